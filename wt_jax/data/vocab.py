"""A word vocabulary: ids by decreasing training-set frequency (ties broken alphabetically), as the
TensorFlow PTB reader builds it; and a run folder's vocabulary file, `vocab.txt` (one word per line in id order, so
row i of the embeddings is word i; word2vec's runs add "<TAB>count"), which makes the folder enough to export,
analyse or use the run without its corpus."""
from __future__ import annotations

import collections
from typing import Iterable, Sequence

import numpy as np
from etils import epath

import wt_jax.files as files
from wt_jax.errors import InputError

FILE = "vocab.txt"  # <run folder>/vocab.txt


class Vocab:
  """word ↔ id."""

  def __init__(self, words: Sequence[str]):
    self.words = list(words)
    self.index = {w: i for i, w in enumerate(self.words)}
    if len(self.index) != len(self.words):
      raise InputError("Vocabulary words must be unique.")

  @classmethod
  def from_tokens(cls, tokens: Iterable[str], max_size: int | None = None) -> "Vocab":
    words = [w for _, w in sorted((-n, w) for w, n in collections.Counter(tokens).items())]
    return cls(words[:max_size] if max_size else words)

  def __len__(self) -> int:
    return len(self.words)

  def __contains__(self, word: str) -> bool:
    return word in self.index

  def encode(self, tokens: Iterable[str], unk: str | None = None) -> np.ndarray:
    """tokens → int32 ids; unknown words map to `unk` if given, else raise KeyError."""
    unk_id = self.index[unk] if unk is not None else None
    out = []
    for t in tokens:
      i = self.index.get(t, unk_id)
      if i is None:
        raise KeyError(f"Word {t!r} is not in the vocabulary.")
      out.append(i)
    return np.asarray(out, dtype=np.int32)

  def decode(self, ids: Iterable[int]) -> list[str]:
    return [self.words[int(i)] for i in ids]


def write_file(path, words: Sequence[str], counts: Sequence[int] | None = None) -> None:
  """A vocabulary file: `words` one per line in id order, each with "<TAB>count" when `counts` are given."""
  lines = words if counts is None else (f"{w}\t{c}" for w, c in zip(words, counts))
  files.write_whole(path, "".join(f"{line}\n" for line in lines))


def read_file(path, errors: str = "strict") -> list[str]:
  """The words of a vocabulary file, in id order (anything after a tab, a count, ignored). `errors`: how bytes
  that are not UTF-8 are decoded (`bytes.decode`)."""
  lines = epath.Path(path).read_bytes().decode("utf-8", errors=errors).splitlines()
  return [line.split("\t")[0] for line in lines if line]


def check_file(path, words: Sequence[str], corpus: str) -> None:
  """`InputError` if the vocabulary file at `path` lists other words than `words` (those of `corpus`): a resumed
  run whose checkpoint's rows would go on training as other words. Names the first word that differs."""
  saved, words = read_file(path, errors="replace"), list(words)
  if saved == words:
    return
  at = next((i for i, (a, b) in enumerate(zip(saved, words)) if a != b), min(len(saved), len(words)))
  was, now = (repr(w[at]) if at < len(w) else "nothing" for w in (saved, words))
  raise InputError(f"{path} lists another vocabulary than this corpus's ({corpus}): word {at} was {was}, is {now}. "
                   f"Resume with the corpus the run started with, or move {FILE} aside if this corpus is the one to "
                   "go on with.")
