"""Recurrent Highway Network language model — Zilly et al. (2017), as used by Press & Wolf (2017), Table 5.

    ids[B, T] → embedding · word-type mask → L × RHN layer (recurrence depth d) → · output mask
    → output layer (tied or not) → logits[B, T, V]

One RHN time step of a layer with state s[B, H] and input x[B, I] runs d "micro-layers" ℓ = 0..d−1:
    h_ℓ = tanh(x·W_H·[ℓ=0] + (s·m_h)·R_Hℓ + b_Hℓ)
    t_ℓ = σ(x·W_T·[ℓ=0] + (s·m_h)·R_Tℓ + b_Tℓ)
    s   ← h_ℓ · t_ℓ + s · (1 − t_ℓ)          (coupled carry gate c = 1 − t)
where x is the (masked) input, seen only by the first micro-layer. Following Zilly et al.'s TensorFlow code
(`rhn.py`): variational masks m_i on the input and m_h on the state (the same m_h at every micro-layer and
time step of a window), word-type embedding dropout m_x, output mask m_o; the transform-gate biases start at
`transform_bias` (−2), every other parameter from U(−init_scale, init_scale).

Parameters per layer: W [I, 2H] (h and t parts side by side), R [d, H, 2H], b [d, 2H], i.e.
2H·(I + d·H + d); with the embedding V·I and the output layer (V·H + V untied, V tied) that is
10000·830 + 2·830·(830 + 10·830 + 10) + 10000 = 23,482,400 tied and 31,782,400 untied for the PTB setting.

The input product x·W of all time steps is hoisted out of the time scan. `remat=True` wraps each time step
in `jax.checkpoint`, so the backward pass recomputes the d micro-layers instead of storing their
activations (memory ∝ T·B·H instead of T·d·B·H).
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from wt_jax import precision, tying
from wt_jax.models import variational


def _bias_init(scale: float, transform_bias: float):
  """b[d, 2H]: the h half ~ U(−scale, scale), the t half = transform_bias."""

  def init(key, shape, dtype=jnp.float32):
    d, two_h = shape
    h_part = jax.random.uniform(key, (d, two_h // 2), dtype, -scale, scale)
    return jnp.concatenate([h_part, jnp.full((d, two_h // 2), transform_bias, dtype)], axis=-1)

  return init


class RHNLayer(nn.Module):
  """x[T, B, I], s[B, H], masks (x_mask[B, I], s_mask[B, H] or None) → y[T, B, H], s[B, H]."""

  hidden: int
  depth: int
  init_scale: float
  transform_bias: float = -2.0
  remat: bool = False
  dtype: Any = None  # matmul input dtype (None: float32; see wt_jax.precision)

  @nn.compact
  def __call__(self, x_TxBxI, s_BxH, x_mask=None, s_mask=None):
    H, I, d = self.hidden, x_TxBxI.shape[-1], self.depth
    init = tying.uniform_init(self.init_scale)
    w = self.param("w_in", init, (I, 2 * H))
    r = self.param("w_rec", init, (d, H, 2 * H))
    b = self.param("bias", _bias_init(self.init_scale, self.transform_bias), (d, 2 * H))
    if x_mask is not None:
      x_TxBxI = x_TxBxI * x_mask
    xw_TxBx2H = precision.dot(x_TxBxI, w, self.dtype)

    def step(s, xw_Bx2H):
      for l in range(d):  # d is small and static: unrolled inside the scan body
        z = precision.dot(s * s_mask if s_mask is not None else s, r[l], self.dtype) + b[l]
        if l == 0:
          z = z + xw_Bx2H
        h, t = jnp.tanh(z[:, :H]), jax.nn.sigmoid(z[:, H:])
        s = (h - s) * t + s
      return s, s

    if self.remat:
      step = jax.checkpoint(step)
    s, y_TxBxH = jax.lax.scan(step, s_BxH, xw_TxBx2H)
    return y_TxBxH, s


class RHNLM(nn.Module):
  """__call__(ids[B, T], carry s[L, B, H], train) → (logits[B, T, V], carry)."""

  vocab_size: int
  hidden: int
  depth: int = 10
  num_layers: int = 1
  dropout_x: float = 0.0
  dropout_i: float = 0.0
  dropout_h: float = 0.0
  dropout_o: float = 0.0
  init_scale: float = 0.04
  transform_bias: float = -2.0
  tying: str = "tied"
  remat: bool = False
  pr_lambda: float = 1.0 / 6.5
  proj_bias: bool = True
  output_bias: bool = True  # False: Inan et al.'s reused embeddings (RE) fix the softmax bias at 0
  dtype: Any = None  # matmul input dtype: None (float32) or bfloat16 (config.compute_dtype)

  def setup(self):
    self.words = tying.WordEmbeddings(vocab_size=self.vocab_size, dim=self.hidden, mode=self.tying,
                                      init_scale=self.init_scale, pr_lambda=self.pr_lambda,
                                      proj_bias=self.proj_bias, output_bias=self.output_bias,
                                      dtype=self.dtype)
    self.layers = [RHNLayer(self.hidden, self.depth, self.init_scale, self.transform_bias, self.remat,
                            self.dtype, name=f"rhn_{l}") for l in range(self.num_layers)]

  def initial_carry(self, batch_size: int) -> jax.Array:
    return jnp.zeros((self.num_layers, batch_size, self.hidden), jnp.float32)

  def __call__(self, ids_BxT: jax.Array, carry: jax.Array, *, train: bool = False):
    B, L, H = ids_BxT.shape[0], self.num_layers, self.hidden
    x = self.words.embed(ids_BxT.T)  # [T, B, H]
    masks_on = train and any(r > 0 for r in (self.dropout_x, self.dropout_i, self.dropout_h, self.dropout_o))
    if masks_on:
      kx, ki, kh, ko = jax.random.split(self.make_rng("dropout"), 4)
      x = x * variational.word_type_mask(kx, self.dropout_x, ids_BxT, self.vocab_size).T[..., None]
      x_masks = variational.keep_mask(ki, self.dropout_i, (L, B, H))
      s_masks = variational.keep_mask(kh, self.dropout_h, (L, B, H))
    states = []
    for l, layer in enumerate(self.layers):
      x, s = layer(x, carry[l], x_masks[l] if masks_on else None, s_masks[l] if masks_on else None)
      states.append(s)
    if masks_on:
      x = x * variational.keep_mask(ko, self.dropout_o, (B, H))
    return self.words.logits(jnp.swapaxes(x, 0, 1)), jnp.stack(states)


def from_config(config) -> RHNLM:
  return RHNLM(
      vocab_size=config.vocab_size, hidden=config.hidden_size, depth=config.depth,
      num_layers=config.num_layers, dropout_x=config.dropout_x, dropout_i=config.dropout_i,
      dropout_h=config.dropout_h, dropout_o=config.dropout_o, init_scale=config.init_scale,
      transform_bias=config.transform_bias, tying=config.words.mode, remat=config.remat,
      pr_lambda=config.words.pr_lambda, proj_bias=config.words.proj_bias, output_bias=config.words.output_bias,
      dtype=precision.compute_dtype(config.compute_dtype))
