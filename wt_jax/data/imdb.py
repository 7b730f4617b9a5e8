"""IMDB movie reviews (Maas et al. 2011, `aclImdb_v1.tar.gz`) as a word-level LM corpus (Press & Wolf 2017
Table 7). The paper's preprocessing is not published, so ours is defined here, as for BBC News:

- Text: each review is one line; `<br />` tags become spaces; then `bbc.tokenize_line` (lower-case,
  letter words with inner apostrophes, numbers → "N", punctuation dropped) and one `<eos>` per review.
- Split: train = the archive's train/{pos,neg,unsup} reviews (75,000); the archive's test/{pos,neg}
  reviews (25,000), sorted by (label, file name), alternate between valid (even index) and test (odd).
- Vocabulary: the 9,998 most frequent training words + `<unk>` + `<eos>` = 10,000.

The archive lives in `<data root>/imdb/aclImdb_v1.tar.gz` and is downloaded from its home (Stanford) when
missing; it is read in place (no extraction).
"""
from __future__ import annotations

import re
import tarfile
from pathlib import Path

from wt_jax.data import bbc, paths, ptb
from wt_jax.data.vocab import Vocab
from wt_jax.errors import InputError

URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
ARCHIVE = "aclImdb_v1.tar.gz"
VOCAB_SIZE = 10_000
_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)
_MEMBER = re.compile(r"(?:^|/)(train|test)/(pos|neg|unsup)/([^/]+\.txt)$")


def ensure(data_dir: str | None = None, download: bool = True, url: str = URL) -> Path:
  """The path of the IMDB archive (`<root>/imdb/aclImdb_v1.tar.gz`), downloading it first if allowed."""
  return paths.ensure_file("imdb", ARCHIVE, url, data_dir, download, what="IMDB")


def reviews(archive: Path) -> dict[str, list[tuple[str, str, str]]]:
  """{'train'|'test': [(label, file name, text)] sorted}; test has no 'unsup' reviews."""
  out = {"train": [], "test": []}
  try:
    with tarfile.open(archive, "r:*") as tar:
      for m in tar:
        match = _MEMBER.search(m.name)
        if not (m.isfile() and match):
          continue
        split, label, name = match.groups()
        text = tar.extractfile(m).read().decode("utf-8", errors="replace")
        out[split].append((label, name, text))
  except (tarfile.TarError, EOFError, OSError) as e:
    raise InputError(f"{archive} is not a readable tar archive ({e}).") from e
  if not out["train"] or not out["test"]:
    raise InputError(f"{archive} holds no aclImdb/{{train,test}}/{{pos,neg}}/*.txt reviews.")
  return {k: sorted(v) for k, v in out.items()}


def load(data_dir: str | None = None, download: bool = True, url: str = URL) -> ptb.Corpus:
  revs = reviews(ensure(data_dir, download, url))
  tokens = {s: [] for s in ptb.SPLITS}

  def add(stream, text):
    words = bbc.tokenize_line(_BR.sub(" ", text))
    if words:
      stream.extend(words)
      stream.append(ptb.EOS)

  for _, _, text in revs["train"]:
    add(tokens["train"], text)
  held_out = [r for r in revs["test"] if r[0] in ("pos", "neg")]
  for i, (_, _, text) in enumerate(held_out):
    add(tokens["valid" if i % 2 == 0 else "test"], text)
  counts = Vocab.from_tokens(t for t in tokens["train"] if t != ptb.EOS)
  vocab = Vocab(counts.words[:VOCAB_SIZE - 2] + [bbc.UNK, ptb.EOS])
  return ptb.Corpus(*(vocab.encode(tokens[s], unk=bbc.UNK) for s in ptb.SPLITS), vocab=vocab)
