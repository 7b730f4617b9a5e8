"""A word vocabulary: ids by decreasing training-set frequency (ties broken alphabetically), as the
TensorFlow PTB reader builds it."""
from __future__ import annotations

import collections
from typing import Iterable, Sequence

import numpy as np

from wt_jax.errors import InputError


class Vocab:
  """word ↔ id."""

  def __init__(self, words: Sequence[str]):
    self.words = list(words)
    self.index = {w: i for i, w in enumerate(self.words)}
    if len(self.index) != len(self.words):
      raise InputError("Vocabulary words must be unique.")

  @classmethod
  def from_tokens(cls, tokens: Iterable[str], max_size: int | None = None) -> "Vocab":
    counts = collections.Counter(tokens)
    words = sorted(counts, key=lambda w: (-counts[w], w))
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
