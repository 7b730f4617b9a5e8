"""Parallel sentences → padded, length-bucketed batches for the NMT model.

A pair (source ids x, target ids y) becomes
    src     = x + [</s>]          (every source has at least one position)
    tgt_in  = [<s>] + y           (the decoder's inputs, teacher forcing)
    tgt_out = y + [</s>]          (what it must predict; <pad> positions are not scored)
Both sides of a batch are padded to one length: the smallest of `buckets` ≥ the batch's longest sequence
(so a jit-compiled step sees few shapes; a longer evaluation sentence is padded to a multiple of the largest
bucket). Training batches are formed from windows of
`batch_size · pool` randomly ordered pairs sorted by length, and visited in random order; the last
batch is completed with empty rows (all <pad>, weight 0), so no pair is dropped.
"""
from __future__ import annotations

import dataclasses
from typing import Iterator, Sequence

import numpy as np

from wt_jax.data import multi30k, wmt
from wt_jax.data.subwords import BOS, EOS, PAD
from wt_jax.errors import InputError

DEFAULT_BUCKETS = (8, 16, 24, 32, 48, 64, 96, 128)
CORPORA = ("multi30k", "wmt14_enfr", "wmt15_ende")


def load_corpus(config) -> dict[str, tuple[list[str], list[str]]]:
  """{'train'|'valid'|'test': (source sentences, target sentences)} for `config.dataset`: Multi30k from the
  data root, or WMT through tensorflow-datasets (the optional extra '.[wmt]')."""
  if config.dataset == "multi30k":
    return multi30k.load_pair(config.src_lang, config.tgt_lang, config.data_dir or None, config.download)
  if config.dataset in wmt.BUILDERS:
    return wmt.load_pair(config.dataset, config.src_lang, config.tgt_lang, config.data_dir or None,
                         config.download, config.get("max_train_pairs", 0))
  raise InputError(f"Unknown dataset {config.dataset!r}; known: {', '.join(CORPORA)}.")


@dataclasses.dataclass
class Batch:
  """src[B, L], tgt_in[B, L], tgt_out[B, L] int32; index[B]: each row's position in the pair list (−1: filler)."""

  src: np.ndarray
  tgt_in: np.ndarray
  tgt_out: np.ndarray
  index: np.ndarray

  @property
  def num_target_tokens(self) -> int:
    return int((self.tgt_out != PAD).sum())


def bucket_length(n: int, buckets: Sequence[int]) -> int:
  """The smallest bucket ≥ n; beyond the largest bucket, the next multiple of it (e.g. a long test sentence)."""
  for b in buckets:
    if n <= b:
      return b
  return -(-n // buckets[-1]) * buckets[-1]


def filter_long(src: Sequence[np.ndarray], tgt: Sequence[np.ndarray], max_len: int):
  """Keep pairs whose two sides have at most `max_len` subwords (before </s>) and at least one."""
  keep = [i for i, (a, b) in enumerate(zip(src, tgt)) if 0 < len(a) <= max_len and 0 < len(b) <= max_len]
  return [src[i] for i in keep], [tgt[i] for i in keep]


def make_batch(src: Sequence[np.ndarray], tgt: Sequence[np.ndarray], index: Sequence[int],
               batch_size: int, buckets: Sequence[int]) -> Batch:
  """Pad the pairs `index` (at most batch_size; filler rows after) into one Batch."""
  n = len(index)
  L = bucket_length(max(max(len(src[i]), len(tgt[i])) + 1 for i in index), buckets)
  s = np.full((batch_size, L), PAD, np.int32)
  ti = np.full((batch_size, L), PAD, np.int32)
  to = np.full((batch_size, L), PAD, np.int32)
  for r, i in enumerate(index):
    a, b = src[i], tgt[i]
    s[r, :len(a) + 1] = np.append(a, EOS)
    ti[r, :len(b) + 1] = np.append(BOS, b)
    to[r, :len(b) + 1] = np.append(b, EOS)
  idx = np.full((batch_size,), -1, np.int64)
  idx[:n] = index
  return Batch(s, ti, to, idx)


def train_batches(src, tgt, batch_size: int, rng: np.random.Generator, buckets=DEFAULT_BUCKETS,
                  pool: int = 50) -> Iterator[Batch]:
  """One epoch of length-bucketed batches in random order (see module docstring)."""
  order = rng.permutation(len(src))
  groups = []
  for start in range(0, len(order), batch_size * pool):
    chunk = order[start:start + batch_size * pool]
    chunk = chunk[np.argsort([max(len(src[i]), len(tgt[i])) for i in chunk], kind="stable")]
    groups += [chunk[j:j + batch_size] for j in range(0, len(chunk), batch_size)]
  for g in rng.permutation(len(groups)):
    yield make_batch(src, tgt, groups[g], batch_size, buckets)


def eval_batches(src, tgt, batch_size: int, buckets=DEFAULT_BUCKETS) -> Iterator[Batch]:
  """Every pair once, sorted by length (use Batch.index to put outputs back in order)."""
  order = np.argsort([max(len(a), len(b)) for a, b in zip(src, tgt)], kind="stable")
  for j in range(0, len(order), batch_size):
    yield make_batch(src, tgt, order[j:j + batch_size], batch_size, buckets)


def num_train_batches(n_pairs: int, batch_size: int, pool: int = 50) -> int:
  full, rest = divmod(n_pairs, batch_size * pool)
  return full * pool + -(-rest // batch_size)
