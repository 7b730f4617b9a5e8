"""BBC News (Greene & Cunningham 2006; 2,225 articles in 5 categories) as a word-level LM corpus, for
Press & Wolf (2017) Table 7. The paper's preprocessing and split are not published, so ours are defined here:

- Text: every non-empty line of an article (the title is the first) is one sentence; lower-cased; tokens
  are runs of letters (with inner apostrophes: "don't", "bbc's"), runs of digits (with inner . or ,) become
  "N" as in Mikolov's PTB, and everything else (punctuation) is dropped, as PTB has none; `<eos>` ends
  each line. Files are read as UTF-8, invalid bytes replaced (one article, sport/199, has a Latin-1 '£').
- Split, deterministic and stratified by category: articles sorted by (category, file name); within each
  category the i-th article goes to valid if i % 10 == 8, to test if i % 10 == 9, else to train (80/10/10).
- Vocabulary: the 9,998 most frequent training words (ties alphabetical) + `<unk>` + `<eos>` = 10,000, as
  PTB; other words become `<unk>` in every split.

The archive `bbc-fulltext.zip` lives in `<data root>/bbc/`; when missing it is downloaded from the dataset's
home (mlg.ucd.ie).
"""
from __future__ import annotations

import re
import zipfile
from pathlib import Path

from wt_jax.data import paths, ptb
from wt_jax.data.vocab import Vocab
from wt_jax.errors import InputError

URL = "http://mlg.ucd.ie/files/datasets/bbc-fulltext.zip"
ARCHIVE = "bbc-fulltext.zip"
VOCAB_SIZE = 10_000
UNK = "<unk>"
_TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)*|[0-9]+(?:[.,][0-9]+)*")


def tokenize_line(line: str) -> list[str]:
  return ["N" if t[0].isdigit() else t for t in _TOKEN.findall(line.lower())]


def ensure(data_dir: str | None = None, download: bool = True, url: str = URL) -> Path:
  """The path of the BBC News archive (`<root>/bbc/bbc-fulltext.zip`), downloading it first if allowed."""
  return paths.ensure_file("bbc", ARCHIVE, url, data_dir, download, what="BBC News")


def articles(archive: Path) -> list[tuple[str, str, str]]:
  """(category, file name, text) of every article, sorted by category then file name."""
  try:
    with zipfile.ZipFile(archive) as z:
      out = []
      for name in z.namelist():
        parts = name.split("/")
        if len(parts) >= 2 and parts[-1].endswith(".txt") and not parts[-1].startswith("README"):
          out.append((parts[-2], parts[-1], z.read(name).decode("utf-8", errors="replace")))
  except zipfile.BadZipFile as e:
    raise InputError(f"{archive} is not a zip archive ({e}).") from e
  if not out:
    raise InputError(f"{archive} holds no <category>/<article>.txt files.")
  return sorted(out)


def split_of(index_in_category: int) -> str:
  r = index_in_category % 10
  return "valid" if r == 8 else "test" if r == 9 else "train"


def load(data_dir: str | None = None, download: bool = True, url: str = URL) -> ptb.Corpus:
  arts = articles(ensure(data_dir, download, url))
  tokens = {s: [] for s in ptb.SPLITS}
  seen: dict[str, int] = {}
  for category, _, text in arts:
    i = seen[category] = seen.get(category, -1) + 1
    stream = tokens[split_of(i)]
    for line in text.splitlines():
      words = tokenize_line(line)
      if words:
        stream.extend(words)
        stream.append(ptb.EOS)
  counts = Vocab.from_tokens(t for t in tokens["train"] if t != ptb.EOS)
  vocab = Vocab(counts.words[:VOCAB_SIZE - 2] + [UNK, ptb.EOS])
  return ptb.Corpus(*(vocab.encode(tokens[s], unk=UNK) for s in ptb.SPLITS), vocab=vocab)
