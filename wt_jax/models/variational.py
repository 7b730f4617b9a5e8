"""Variational ("Bayesian") dropout masks — Gal & Ghahramani (2016), as in Gal's and Zilly et al.'s LM code.

A variational mask is sampled once per training window (a [B, T] bptt batch) and reused at every time step
of it, instead of a fresh mask per step (Zaremba et al.'s dropout). Embedding dropout drops whole word
types: every occurrence of a word in a row of the window is kept or dropped together. All masks are
"inverted": kept units are scaled by 1 / (1 − rate), so nothing changes at evaluation (no masks at all).

`Dropout` is Zaremba et al.'s (a fresh mask per element and time step), flax's `nn.Dropout` arithmetic.

A rate may be a traced scalar (one per member of `wt_jax.members`): then the mask is always drawn (a rate of 0
keeps every unit, Bernoulli(1) being 1) and its range is checked where the members are built.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


def keep_mask(rng: jax.Array, rate: float, shape: tuple[int, ...]) -> jax.Array:
  """Bernoulli(1 − rate) / (1 − rate) multipliers of `shape` (float32); all ones when rate == 0."""
  if not isinstance(rate, jax.Array):  # (an array: a member's rate, `wt_jax.members`)
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


class Dropout(nn.Module):
  """Zaremba et al.'s dropout: x[...] → x · Bernoulli(1 − rate) / (1 − rate), a fresh mask per element and
  call (the 'dropout' rng), identity when `deterministic` or rate == 0 — flax's `nn.Dropout`, the same
  arithmetic and rng, with a `rate` that may be a traced per-member scalar."""

  rate: float | jax.Array = 0.0

  @nn.compact
  def __call__(self, x, deterministic: bool):
    dynamic = isinstance(self.rate, jax.Array)  # (a member's rate, `wt_jax.members`: masks drawn whatever its value)
    if deterministic or not (dynamic or self.rate):
      return x
    if not dynamic and self.rate == 1.0:
      return jnp.zeros_like(x)  # (x / 0 would put NaN in the gradient)
    keep = 1.0 - self.rate
    mask = jax.random.bernoulli(self.make_rng("dropout"), p=keep, shape=x.shape)
    return jax.lax.select(mask, x / keep, jnp.zeros_like(x))
