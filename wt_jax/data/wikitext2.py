"""WikiText-2 (Merity et al. 2017), version 1, tokenised (`wiki.{train,valid,test}.tokens`).

Read like the common LM loaders: every line, empty ones included, is split on whitespace and followed by one
`<eos>`; rare words are already `<unk>`. Counts on the official files: 2,088,628 / 217,646 / 245,569 tokens,
vocabulary 33,278 (from the training split, `<eos>` and `<unk>` included).

Files live in `<data root>/wikitext2/`, plain or gzipped; when missing they are downloaded from the
canonical `wikitext-2-v1.zip` (members `wikitext-2/wiki.*.tokens`).

Halves of the training text (`load_half`). Inan et al. (2017), Section 6.3, train their small networks "on the
first and second halves of the Wikitext2 training set", two datasets "each about the same size as PTB (1044K
vs 929K)". The paper does not say where it cut: 1044K is half of the 2,088K training tokens counted as here
(one `<eos>` per line). We cut at the article boundary nearest the middle of the token stream, so that no
article is split between the halves (two distinct sets of whole articles) and each half begins as the file
does, with an empty line and an article's title. On the official file the first half holds 305 articles,
1,044,532 tokens, and the second 295 articles, 1,044,096 tokens; a cut at exactly half the tokens would fall
218 tokens earlier, near the end of the article before " = Arikamedu = ". Validation and test texts and the
vocabulary stay WikiText-2's (33,278 words, the same ids as the whole corpus), so a half's perplexities are
over the same words as the whole corpus's.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from wt_jax.data import paths, ptb
from wt_jax.data.vocab import Vocab
from wt_jax.errors import InputError

URL = "https://wikitext.smerity.com/wikitext-2-v1.zip"
SPLITS = ptb.SPLITS
HALVES = (1, 2)  # load_half: the first or the second half of the training text
# An article's title line, stripped: one '=' on each side (its sections' headings are `= = Heading = =`).
_TITLE = re.compile(r"= [^=].* =")


def split_file(folder: Path, split: str) -> Path | None:
  return paths.find_file(folder, [f"wiki.{split}.tokens.gz", f"wiki.{split}.tokens"])


def ensure(data_dir: str | None = None, download: bool = True, url: str = URL) -> Path:
  """The folder holding the three split files, downloading them first if allowed."""
  folder = paths.data_root(data_dir) / "wikitext2"
  if all(split_file(folder, s) for s in SPLITS):
    return folder
  if not download:
    raise paths.DataUnavailableError(
        f"WikiText-2 not found in {folder} (expected wiki.{{train,valid,test}}.tokens[.gz]). Set the "
        f"environment variable {paths.ENV_VAR} (or --config.data_dir) to the folder that holds wikitext2/.")
  paths.extract_zip(paths.download_file(url, folder / "wikitext-2-v1.zip"), url,
                    {f"wiki.{s}.tokens": folder / f"wiki.{s}.tokens" for s in SPLITS})
  return folder


def load(data_dir: str | None = None, download: bool = True, url: str = URL) -> ptb.Corpus:
  """The three splits as id streams, vocabulary from the training split (ids by decreasing frequency)."""
  folder = ensure(data_dir, download, url)
  streams = {s: ptb.read_tokens(split_file(folder, s)) for s in SPLITS}
  for s, toks in streams.items():
    if all(t == ptb.EOS for t in toks):
      raise InputError(f"WikiText-2 {s} split at {split_file(folder, s)} contains no words.")
  vocab = Vocab.from_tokens(streams["train"])
  return ptb.Corpus(*(vocab.encode(streams[s], unk="<unk>" if "<unk>" in vocab else None) for s in SPLITS),
                    vocab=vocab)


def read_lines(path: Path) -> list[str]:
  """The lines of a split file (.tokens or .tokens.gz) as `ptb.read_tokens` iterates them."""
  return paths.read_lines(path)


def article_starts(lines: list[str]) -> list[int]:
  """Indices of the lines where an article begins: the empty line just before its title line (` = Title = `,
  itself followed by an empty line). The official training file holds 600, Merity et al.'s article count."""
  return [i - 1 for i in range(1, len(lines) - 1)
          if _TITLE.fullmatch(lines[i].strip()) and not lines[i - 1].strip() and not lines[i + 1].strip()]


def half_boundary(lines: list[str]) -> int:
  """The index of the line that begins the second half: of the article starts, the one whose token offset
  (each line's words and one `<eos>`) is nearest the middle of the token stream, the earlier one on a tie."""
  offsets = np.concatenate([[0], np.cumsum([len(line.split()) + 1 for line in lines])])
  starts = [s for s in article_starts(lines) if s > 0]
  if not starts:
    raise InputError("The WikiText-2 training text has fewer than two articles (title lines ` = Title = ` "
                     "between empty lines), so it cannot be cut into halves at an article boundary.")
  return min(starts, key=lambda s: abs(2 * int(offsets[s]) - int(offsets[-1])))


def load_half(half: int, data_dir: str | None = None, download: bool = True, url: str = URL) -> ptb.Corpus:
  """WikiText-2 with the first (`half` 1) or second (2) half of its training text as `train` (cut at
  `half_boundary`, see the module docstring); valid, test and the vocabulary (ids) of the whole corpus."""
  if half not in HALVES:
    raise InputError(f"half must be one of {HALVES}, not {half!r}.")
  corpus = load(data_dir, download, url)
  lines = read_lines(split_file(ensure(data_dir, download, url), "train"))
  cut = sum(len(line.split()) + 1 for line in lines[:half_boundary(lines)])
  train = corpus.train[:cut] if half == 1 else corpus.train[cut:]
  return ptb.Corpus(train, corpus.valid, corpus.test, vocab=corpus.vocab)


def sentences(split: str = "train", data_dir: str | None = None, download: bool = True) -> list[list[str]]:
  """word2vec's sentences: the non-empty lines of a split (paragraphs and ` = Heading = ` lines)."""
  path = split_file(ensure(data_dir, download), split)
  out = [words for words in (line.split() for line in paths.read_lines(path)) if words]
  if not out:
    raise InputError(f"WikiText-2 {split} split at {path} contains no words.")
  return out
