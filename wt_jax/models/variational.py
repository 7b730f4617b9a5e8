"""Variational ("Bayesian") dropout masks — Gal & Ghahramani (2016), as in Gal's and Zilly et al.'s LM code.

A variational mask is sampled once per training window (a [B, T] bptt batch) and reused at every time step
of it, instead of a fresh mask per step (Zaremba et al.'s dropout). Embedding dropout drops whole word
types: every occurrence of a word in a row of the window is kept or dropped together. All masks are
"inverted": kept units are scaled by 1 / (1 − rate), so nothing changes at evaluation (no masks at all).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def keep_mask(rng: jax.Array, rate: float, shape: tuple[int, ...]) -> jax.Array:
  """Bernoulli(1 − rate) / (1 − rate) multipliers of `shape` (float32); all ones when rate == 0."""
  if not 0.0 <= rate < 1.0:
    raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
  if rate == 0.0:
    return jnp.ones(shape, jnp.float32)
  keep = 1.0 - rate
  return jax.random.bernoulli(rng, keep, shape).astype(jnp.float32) / keep


def word_type_mask(rng: jax.Array, rate: float, ids_BxT: jax.Array, vocab_size: int) -> jax.Array:
  """Embedding dropout by word type: ids[B, T] → multipliers[B, T], equal for equal ids within a row.

  Samples one keep/drop decision per (row, word type) — a [B, V] mask — and reads it at the row's ids; the
  reference codes sample per token and then copy the decision to later occurrences, the same distribution.
  """
  mask_BxV = keep_mask(rng, rate, (ids_BxT.shape[0], vocab_size))
  return jnp.take_along_axis(mask_BxV, ids_BxT, axis=1)
