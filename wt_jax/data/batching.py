"""Zaremba et al. (2014) batching of a token stream for truncated BPTT.

The stream is cut into `batch_size` contiguous rows ([B, N // B], the tail dropped) and read in
consecutive windows of `bptt` steps; targets are the inputs shifted by one. The recurrent state is carried
from one window to the next, so row b of window k+1 continues row b of window k.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from wt_jax.errors import InputError


@dataclasses.dataclass
class Windows:
  """x, y: int32[num_windows, B, T]; mask: float32[num_windows, B, T] (1 = a real target)."""

  x: np.ndarray
  y: np.ndarray
  mask: np.ndarray

  def __len__(self) -> int:
    return self.x.shape[0]

  @property
  def num_tokens(self) -> int:
    return int(self.mask.sum())


def lm_windows(stream: np.ndarray, batch_size: int, bptt: int, drop_remainder: bool = True) -> Windows:
  """Windows of a token stream.

  drop_remainder=True is the reference's `ptb_iterator`: ((N // B) − 1) // T full windows. With False the
  last partial window is padded and masked, so every one of the B·(N // B − 1) targets is scored (with
  B = 1 that is all N − 1 of them, as the reference's batch-1 test reports).
  """
  stream = np.asarray(stream, dtype=np.int32)
  row_len = len(stream) // batch_size
  if row_len < 2:
    raise InputError(f"A stream of {len(stream)} tokens is too short for batch size {batch_size}.")
  rows = stream[: row_len * batch_size].reshape(batch_size, row_len)
  n_targets = row_len - 1
  num = n_targets // bptt if drop_remainder else -(-n_targets // bptt)
  if num == 0:
    raise InputError(f"A stream of {len(stream)} tokens gives no full window of {bptt} steps at batch "
                     f"size {batch_size}.")
  pad = num * bptt - n_targets
  x = np.pad(rows[:, :-1], ((0, 0), (0, max(pad, 0))))[:, : num * bptt]
  y = np.pad(rows[:, 1:], ((0, 0), (0, max(pad, 0))))[:, : num * bptt]
  mask = np.zeros((batch_size, num * bptt), np.float32)
  mask[:, :n_targets] = 1.0
  return Windows(*(np.ascontiguousarray(a.reshape(batch_size, num, bptt).transpose(1, 0, 2)) for a in (x, y, mask)))
