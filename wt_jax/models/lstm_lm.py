"""Zaremba et al. (2014) LSTM language model, as used by Press & Wolf (2017).

    ids[B, T] → embedding (tying.WordEmbeddings) → dropout → L × (LSTM → dropout) → output layer → logits[B, T, V]

The LSTM is the TensorFlow `BasicLSTMCell` of the reference code: one bias per gate (no separate input
and recurrent biases), gates (i, j, f, o), forget-gate bias offset 0, c' = σ(f)·c + σ(i)·tanh(j),
h' = σ(o)·tanh(c'). Its weights are drawn from U(−init_scale, init_scale); its biases start at zero (the
reference's `linear(..., bias_start=0.0)`); the softmax bias and projection use the uniform initialiser
(the reference's variable-scope initialiser). Dropout (Zaremba's, a fresh mask per element and time step)
is applied to the embeddings and to each layer's output.

Each layer runs as one `lax.scan` over time, with the input-to-hidden product hoisted out of the scan as a
single [T·B, I]×[I, 4H] matmul, so the scan body only does the recurrent [B, H]×[H, 4H] product.

The recurrent state ("carry") is a pair (c, h), each [L, B, H]; it is carried across bptt windows.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from wt_jax import tying

UNROLL = 1
Carry = tuple[jax.Array, jax.Array]  # (c[L, B, H], h[L, B, H])


class LSTMLayer(nn.Module):
  """One LSTM layer over a whole window. x[T, B, I], (c, h)[B, H] → y[T, B, H], (c, h)."""

  hidden: int
  init_scale: float

  @nn.compact
  def __call__(self, x_TxBxI: jax.Array, c_BxH: jax.Array, h_BxH: jax.Array):
    H, I = self.hidden, x_TxBxI.shape[-1]
    w_init = tying.uniform_init(self.init_scale)
    w_ih = self.param("w_ih", w_init, (I, 4 * H))
    w_hh = self.param("w_hh", w_init, (H, 4 * H))
    bias = self.param("bias", nn.initializers.zeros, (4 * H,))
    xw_TxBx4H = jnp.einsum("tbi,ig->tbg", x_TxBxI, w_ih) + bias

    def cell(carry, xw_Bx4H):
      c, h = carry
      gates = xw_Bx4H + h @ w_hh
      i, j, f, o = jnp.split(gates, 4, axis=-1)
      c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(j)
      h = jax.nn.sigmoid(o) * jnp.tanh(c)
      return (c, h), h

    (c, h), y_TxBxH = jax.lax.scan(cell, (c_BxH, h_BxH), xw_TxBx4H, unroll=UNROLL)
    return y_TxBxH, c, h


class LSTMLM(nn.Module):
  """Multi-layer LSTM LM with a (possibly tied) output layer; embedding size = hidden size.

  __call__(ids[B, T], carry, train) → (logits[B, T, V], carry).
  """

  vocab_size: int
  hidden: int
  num_layers: int = 2
  dropout: float = 0.0
  init_scale: float = 0.1
  tying: str = "tied"
  pr_lambda: float = 1.0 / 6.5
  proj_bias: bool = True
  logit_scale: bool = False

  def setup(self):
    self.words = tying.WordEmbeddings(
        vocab_size=self.vocab_size, dim=self.hidden, mode=self.tying, init_scale=self.init_scale,
        pr_lambda=self.pr_lambda, proj_bias=self.proj_bias, logit_scale=self.logit_scale)
    self.layers = [LSTMLayer(self.hidden, self.init_scale, name=f"lstm_{l}")
                   for l in range(self.num_layers)]
    self.drop = nn.Dropout(self.dropout)

  def initial_carry(self, batch_size: int) -> Carry:
    shape = (self.num_layers, batch_size, self.hidden)
    return (jnp.zeros(shape, jnp.float32), jnp.zeros(shape, jnp.float32))

  def __call__(self, ids_BxT: jax.Array, carry: Carry, *, train: bool = False):
    c_LxBxH, h_LxBxH = carry
    x = self.words.embed(ids_BxT.T)  # [T, B, H]: time-major inside the model
    x = self.drop(x, deterministic=not train)
    cs, hs = [], []
    for l, layer in enumerate(self.layers):
      x, c, h = layer(x, c_LxBxH[l], h_LxBxH[l])
      x = self.drop(x, deterministic=not train)
      cs.append(c)
      hs.append(h)
    logits_BxTxV = self.words.logits(jnp.swapaxes(x, 0, 1))  # transpose the small [T, B, H], not logits
    return logits_BxTxV, (jnp.stack(cs), jnp.stack(hs))


def from_config(config) -> LSTMLM:
  return LSTMLM(
      vocab_size=config.vocab_size, hidden=config.hidden_size, num_layers=config.num_layers,
      dropout=config.dropout, init_scale=config.init_scale, tying=config.tying,
      pr_lambda=config.pr_lambda, proj_bias=config.proj_bias, logit_scale=config.logit_scale)
