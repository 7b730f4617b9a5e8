"""The largest batch that fits a memory limit, by compiling: a search that knows nothing of TPUs.

    search = find_max_batch(lambda b: bytes_per_chip(b), multiple=chips, limit=hbm_bytes, start=guess)
    search.batch_size, search.tried                # the answer, and every batch compiled with its bytes

`wt_jax.aot` supplies the compiles (and raises `DoesNotFit` when the TPU compiler refuses a batch);
`experiments/compile.py --find_max_batch` runs the search.
"""
from __future__ import annotations

import dataclasses
from typing import Callable


class DoesNotFit(RuntimeError):
  """The compiler itself refused the program: its buffers exceed the chip's memory (RESOURCE_EXHAUSTED)."""


@dataclasses.dataclass
class Search:
  """The result of `find_max_batch`: the largest global batch that fits (0: not even `multiple`), every
  batch tried with its bytes per chip, and whether the cap stopped the search (the true maximum is larger)."""
  batch_size: int
  tried: dict[int, int | None]  # None: the compiler refused it (DoesNotFit)
  capped: bool


def find_max_batch(total_bytes: Callable[[int], int], multiple: int, limit: int, cap: int | None = None,
                   resolution: int | None = None, rel_tol: float = 0.0, start: int | None = None) -> Search:
  """The largest batch B (a multiple of `multiple`, ≤ `cap`) with total_bytes(B) ≤ limit, assuming more
  rows never need less memory; a batch for which `total_bytes` raises DoesNotFit does not fit.

  Each call of `total_bytes` is a compile (minutes for a big model), and XLA's memory per chip is not linear
  in the batch (it changes layouts and fusions with the shapes), so the search is plain: from `start`
  (default `multiple`; rounded down to a multiple) double until a batch does not fit — or, if `start` does
  not fit, halve until one does —, then bisect between the largest that fits and the smallest that does not
  until they are `resolution` apart (default `multiple`: the exact largest multiple) or, with `rel_tol` > 0,
  until the one that does not fit is at most (1 + rel_tol) times the one that does (fewer compiles). A
  `start` near the answer (e.g. another slice's result) saves most compiles. The answer is always a batch
  that was compiled and fits."""
  cap = cap or multiple * 65536
  resolution = max(resolution or multiple, multiple)
  tried: dict[int, int] = {}

  def fits(b: int) -> bool:
    if b not in tried:
      try:
        tried[b] = int(total_bytes(b))
      except DoesNotFit:
        tried[b] = None
    return tried[b] is not None and tried[b] <= limit

  b = min(max(multiple, (start or multiple) // multiple * multiple), cap)
  lo, hi = None, None  # lo fits; hi does not
  while lo is None:  # halve from start until a batch fits
    if fits(b):
      lo = b
    elif b == multiple:
      return Search(0, tried, False)
    else:
      hi, b = b, max(multiple, b // 2 // multiple * multiple)
  while hi is None:  # double from there until one does not
    if lo >= cap:
      return Search(lo, tried, True)
    b = min(2 * lo, cap)
    if fits(b):
      lo = b
    else:
      hi = b
  while hi - lo > max(resolution, rel_tol * lo):
    mid = (lo + hi) // 2 // multiple * multiple
    if mid <= lo:
      break
    if fits(mid):
      lo = mid
    else:
      hi = mid
  return Search(lo, tried, False)
