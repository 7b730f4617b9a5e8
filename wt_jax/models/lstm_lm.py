"""Zaremba et al. (2014) LSTM language model, as used by Press & Wolf (2017).

    ids[B, T] → embedding (tying.WordEmbeddings) → dropout → L × (LSTM → dropout) → output layer → logits[B, T, V]

The LSTM is the TensorFlow `BasicLSTMCell` of the reference code: one bias per gate (no separate input
and recurrent biases), gates (i, j, f, o), forget-gate bias offset 0, c' = σ(f)·c + σ(i)·tanh(j),
h' = σ(o)·tanh(c'). Its weights are drawn from U(−init_scale, init_scale); its biases start at zero (the
reference's `linear(..., bias_start=0.0)`); the softmax bias and projection use the uniform initialiser
(the reference's variable-scope initialiser). Dropout (Zaremba's, a fresh mask per element and time step)
is applied to the embeddings and to each layer's output.

Each layer runs as one `lax.scan` over time, with the input-to-hidden product hoisted out of the scan as a
single [T·B, I]×[I, 4H] matmul, so the scan body only does the recurrent [B, H]×[H, 4H] product; its
backward pass is hand-written (`lstm_recurrence`, checked against autodiff in tests/test_lstm_lm.py).

The recurrent state ("carry") is a pair (c, h), each [L, B, H]; it is carried across bptt windows.
"""
from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

import wt_jax.precision as precision
import wt_jax.softmax as softmax
import wt_jax.tying as tying
from wt_jax.models import variational

Carry = tuple[jax.Array, jax.Array]  # (c[L, B, H], h[L, B, H])


def _gate_scale(hidden: int) -> jax.Array:
  """Per-gate pre-activation scale: 2 for the cell candidate j, 1 for i, f, o (see `lstm_recurrence`)."""
  return jnp.concatenate([jnp.ones(hidden), jnp.full(hidden, 2.0), jnp.ones(2 * hidden)])


def _recurrent_weights(w_hh, h_mask, dtype, transpose=False):
  """W_hh (or W_hhᵀ) prepared once, outside the time loop: cast to the matmul dtype, and for per-gate masks
  split into the four gates' [H, H] blocks (XLA's CPU backend would otherwise re-slice or re-transpose a
  loop-invariant operand at every step)."""
  w = w_hh if dtype is None else w_hh.astype(dtype)
  if h_mask is not None and h_mask.shape[0] == 4:
    H = w_hh.shape[0]
    blocks = [w[:, g * H:(g + 1) * H] for g in range(4)]
    return [b.T for b in blocks] if transpose else blocks
  return w.T if transpose else w


def _recurrent_product(h_BxH, w, h_mask, dot):
  """The recurrent part of the gates: h·W_hh (no mask), (h·m)·W_hh (a shared mask m = h_mask[0]) or
  [(h·m_g)·W_g]_g (per-gate masks h_mask[4, B, H], w the four [H, H] blocks) → [B, 4H]."""
  if h_mask is None:
    return dot(h_BxH, w)
  if h_mask.shape[0] == 1:
    return dot(h_BxH * h_mask[0], w)
  return jnp.concatenate([dot(h_BxH * h_mask[g], w[g]) for g in range(4)], axis=-1)


def _forward(xw_TxBx4H, w_hh, c0_BxH, h0_BxH, matmuls, h_mask=None, unroll=1):
  """The recurrence; also returns what the backward pass needs: σ-activations a[T, B, 4H] and c[T, B, H].
  `unroll`: time steps per iteration of the compiled loop (`lax.scan`; the same arithmetic)."""
  H = w_hh.shape[0]
  scale = _gate_scale(H)
  w = _recurrent_weights(w_hh, h_mask, matmuls.dtype)  # cast once, not at every step

  def cell(carry, xw_Bx4H):
    c, h = carry
    # One σ over all four gates: tanh(z) = 2σ(2z) − 1, so j is computed from σ(2·z_j). Mathematically the
    # TF cell exactly; one fused elementwise op instead of four slices is ~2× faster on CPU.
    a = jax.nn.sigmoid((xw_Bx4H + _recurrent_product(h, w, h_mask, matmuls.dot)) * scale)
    i, j, f, o = jnp.split(a, 4, axis=-1)
    c = f * c + i * (2.0 * j - 1.0)
    h = o * jnp.tanh(c)
    return (c, h), (h, a, c)

  (c, h), (hs, acts, cs) = jax.lax.scan(cell, (c0_BxH, h0_BxH), xw_TxBx4H, unroll=unroll)
  return hs, c, h, acts, cs


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def lstm_recurrence(xw_TxBx4H, w_hh, c0_BxH, h0_BxH, matmuls=precision.FLOAT32, unroll=1):
  """LSTM over time given the precomputed input part of the gates xw = x·W_ih + b.

  xw[T, B, 4H], w_hh[H, 4H], c0, h0[B, H] → (h[T, B, H], c_T[B, H], h_T[B, H]). `matmuls`: how the
  recurrent matmuls multiply, forward and backward (`wt_jax.precision.COMPUTE`). `unroll`: time steps
  per iteration of the compiled forward and backward loops (the same arithmetic; on a GPU, where every loop
  iteration costs a host round trip and kernel launches, fewer iterations are faster).

  The custom VJP runs the backward recurrence for the gate gradients only and then forms ∂W_hh as one
  [H, T·B]×[T·B, 4H] matmul, instead of accumulating a [H, 4H] gradient inside the loop at every step as
  plain autodiff of `lax.scan` does (the cuDNN strategy; ~3× faster backward on CPU).
  """
  hs, c, h, _, _ = _forward(xw_TxBx4H, w_hh, c0_BxH, h0_BxH, matmuls, unroll=unroll)
  return hs, c, h


def _recurrence_fwd(xw_TxBx4H, w_hh, c0_BxH, h0_BxH, matmuls, unroll):
  hs, c, h, acts, cs = _forward(xw_TxBx4H, w_hh, c0_BxH, h0_BxH, matmuls, unroll=unroll)
  return (hs, c, h), (w_hh, c0_BxH, h0_BxH, hs, acts, cs)


def _backward(matmuls, w_hh, c0, h0, hs, acts, cs, d_hs, d_cT, d_hT, h_mask=None, unroll=1):
  """The backward loop (gate gradients only) and ∂W_hh after it; with a mask also its gradient."""
  c_prev = jnp.concatenate([c0[None], cs[:-1]], axis=0)
  h_prev = jnp.concatenate([h0[None], hs[:-1]], axis=0)
  H = w_hh.shape[0]
  w_T = _recurrent_weights(w_hh, h_mask, matmuls.dtype, transpose=True)

  def step(carry, inputs):
    dh_next, dc_next, dm = carry
    dy, a, c, cp, *hp = inputs  # hp: [h_prev] with a mask, else []
    i, j, f, o = jnp.split(a, 4, axis=-1)
    g = 2.0 * j - 1.0
    tc = jnp.tanh(c)
    dh = dy + dh_next
    dc = dc_next + dh * o * (1.0 - tc * tc)
    # ∂/∂z of σ is a(1 − a) for every gate; for j, d(2σ(2z) − 1)/dz = 4a(1 − a).
    upstream = jnp.concatenate([dc * g, 4.0 * dc * i, dc * cp, dh * tc], axis=-1)
    dz = upstream * a * (1.0 - a)
    if h_mask is None:
      dh_prev = matmuls.dot(dz, w_T)
    elif h_mask.shape[0] == 1:  # ∂(h·m) → ∂h, ∂m
      du = matmuls.dot(dz, w_T)
      dm, dh_prev = dm + (du * hp[0])[None], du * h_mask[0]
    else:
      du = jnp.stack([matmuls.dot(dz[:, k * H:(k + 1) * H], w_T[k]) for k in range(4)])
      dm, dh_prev = dm + du * hp[0], jnp.sum(du * h_mask, axis=0)
    return (dh_prev, dc * f, dm), dz

  dm0 = None if h_mask is None else jnp.zeros_like(h_mask)
  xs = (d_hs, acts, cs, c_prev) + ((h_prev,) if h_mask is not None else ())
  (dh0, dc0, dm), dz_TxBx4H = jax.lax.scan(step, (d_hT, d_cT, dm0), xs, reverse=True, unroll=unroll)
  if h_mask is None:
    dw_hh = matmuls.dot(h_prev.reshape(-1, H).T, dz_TxBx4H.reshape(-1, 4 * H))
  elif h_mask.shape[0] == 1:
    dw_hh = matmuls.dot((h_prev * h_mask[0]).reshape(-1, H).T, dz_TxBx4H.reshape(-1, 4 * H))
  else:  # gate k's block: Σ_t (h·m_k)ᵀ ∂z_k
    dw_hh = jnp.concatenate([
        matmuls.dot((h_prev * h_mask[k]).reshape(-1, H).T, dz_TxBx4H[..., k * H:(k + 1) * H].reshape(-1, H))
        for k in range(4)], axis=-1)
  return dz_TxBx4H, dw_hh, dc0, dh0, dm


def _recurrence_bwd(matmuls, unroll, res, cotangents):
  w_hh, c0, h0, hs, acts, cs = res
  d_hs, d_cT, d_hT = cotangents
  dxw, dw_hh, dc0, dh0, _ = _backward(matmuls, w_hh, c0, h0, hs, acts, cs, d_hs, d_cT, d_hT, unroll=unroll)
  return dxw, dw_hh, dc0, dh0


lstm_recurrence.defvjp(_recurrence_fwd, _recurrence_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def masked_lstm_recurrence(xw_TxBx4H, w_hh, c0_BxH, h0_BxH, h_mask_GxBxH, matmuls=precision.FLOAT32, unroll=1):
  """`lstm_recurrence` with a variational mask on the recurrent state (Gal 2015; Gal & Ghahramani 2016):
  the previous h enters the gates as (h·m)·W_hh, the same mask at every step of the window.

  xw[T, B, 4H], w_hh[H, 4H], c0, h0[B, H], h_mask[G, B, H] → (h[T, B, H], c_T, h_T[B, H]), with G = 1 (one
  mask shared by the four gates, as in Inan et al. 2017's VD-LSTM) or G = 4 (each gate i, j, f, o its own
  mask and its own [H, H] block of W_hh, Gal's code). The recurrence itself — gates, backward loop, ∂W_hh
  formed after the loop — is `lstm_recurrence`'s; the mask gets its true gradient ([G, B, H]), which the
  models do not use.
  """
  hs, c, h, _, _ = _forward(xw_TxBx4H, w_hh, c0_BxH, h0_BxH, matmuls, h_mask_GxBxH, unroll)
  return hs, c, h


def _masked_fwd(xw_TxBx4H, w_hh, c0_BxH, h0_BxH, h_mask_GxBxH, matmuls, unroll):
  hs, c, h, acts, cs = _forward(xw_TxBx4H, w_hh, c0_BxH, h0_BxH, matmuls, h_mask_GxBxH, unroll)
  return (hs, c, h), (w_hh, c0_BxH, h0_BxH, h_mask_GxBxH, hs, acts, cs)


def _masked_bwd(matmuls, unroll, res, cotangents):
  w_hh, c0, h0, h_mask, hs, acts, cs = res
  d_hs, d_cT, d_hT = cotangents
  return _backward(matmuls, w_hh, c0, h0, hs, acts, cs, d_hs, d_cT, d_hT, h_mask, unroll)


masked_lstm_recurrence.defvjp(_masked_fwd, _masked_bwd)


class LSTMLayer(nn.Module):
  """One LSTM layer over a whole window. x[T, B, I], (c, h)[B, H] → y[T, B, H], (c, h)."""

  hidden: int
  init_scale: float
  matmuls: precision.Matmuls = precision.FLOAT32  # how it multiplies (wt_jax.precision.COMPUTE)
  unroll: int | bool = 1  # time steps per compiled loop iteration (lstm_recurrence)

  @nn.compact
  def __call__(self, x_TxBxI: jax.Array, c_BxH: jax.Array, h_BxH: jax.Array):
    H, I = self.hidden, x_TxBxI.shape[-1]
    w_init = tying.uniform_init(self.init_scale)
    w_ih = self.param("w_ih", w_init, (I, 4 * H))
    w_hh = self.param("w_hh", w_init, (H, 4 * H))
    bias = self.param("bias", nn.initializers.zeros, (4 * H,))
    xw_TxBx4H = self.matmuls.dot(x_TxBxI, w_ih) + bias
    y_TxBxH, c, h = lstm_recurrence(xw_TxBx4H, w_hh, c_BxH, h_BxH, self.matmuls, self.unroll)
    return y_TxBxH, c, h


class LSTMLM(nn.Module):
  """Multi-layer LSTM LM with a (possibly tied) output layer; embedding size = hidden size.

  __call__(ids[B, T], carry, train) → (logits[B, T, V], carry); with features=True the output layer's input
  z[B, T, H] instead of the logits (`tying.WordEmbeddings.features`, for the costs of `wt_jax.softmax`).
  """

  vocab_size: int
  hidden: int
  num_layers: int = 2
  dropout: float = 0.0
  init_scale: float = 0.1
  embedding_init_scale: float = 0.0  # > 0: the word embeddings / output layer from U(−s, s), not init_scale
  tying: str = "tied"
  pr_lambda: float = 1.0 / 6.5
  proj_bias: bool = True
  output_bias: bool = True  # False: Inan et al.'s reused embeddings (RE) fix the softmax bias at 0
  logit_scale: bool = False
  matmuls: precision.Matmuls = precision.FLOAT32  # float32 or bfloat16 inputs (config.compute_dtype)
  unroll: int | bool = 1  # time steps per compiled loop iteration (loop_unroll; True: all)
  class_bounds: tuple[int, ...] = ()  # a class-factored softmax (wt_jax.softmax; config.softmax.kind='class')

  def setup(self):
    self.words = tying.WordEmbeddings(
        vocab_size=self.vocab_size, dim=self.hidden, mode=self.tying,
        init_scale=self.embedding_init_scale or self.init_scale, pr_lambda=self.pr_lambda,
        proj_bias=self.proj_bias, output_bias=self.output_bias,
        logit_scale=self.logit_scale, matmuls=self.matmuls, class_bounds=self.class_bounds)
    self.layers = [LSTMLayer(self.hidden, self.init_scale, self.matmuls, self.unroll, name=f"lstm_{l}")
                   for l in range(self.num_layers)]
    self.drop = variational.Dropout(self.dropout)

  def initial_carry(self, batch_size: int) -> Carry:
    shape = (self.num_layers, batch_size, self.hidden)
    return (jnp.zeros(shape, jnp.float32), jnp.zeros(shape, jnp.float32))

  def __call__(self, ids_BxT: jax.Array, carry: Carry, *, train: bool = False, features: bool = False):
    c_LxBxH, h_LxBxH = carry
    x = self.words.embed(ids_BxT.T)  # [T, B, H]: time-major inside the model
    x = self.drop(x, deterministic=not train)
    cs, hs = [], []
    for l, layer in enumerate(self.layers):
      x, c, h = layer(x, c_LxBxH[l], h_LxBxH[l])
      x = self.drop(x, deterministic=not train)
      cs.append(c)
      hs.append(h)
    out = self.words.output(jnp.swapaxes(x, 0, 1), features)  # transpose the small [T, B, H], not logits
    return out, (jnp.stack(cs), jnp.stack(hs))


def loop_unroll(config, backend: str | None = None) -> int | bool:
  """Time steps per compiled loop iteration of the LSTM recurrences (Zaremba's and the variational one):
  `config.scan_unroll` when set, else (0, the default) what was fastest where it was measured. On a GPU that is
  the whole window (True: `lax.scan` unrolls every step, and the time loops disappear): XLA:GPU runs a `while`
  loop's control on the host, a round trip per trip, and Zaremba's large model (2 × 1500, 35 steps) trained
  at 3.75 ms per step fully unrolled against 7.07 ms with one step per trip on an H200 in TF32 (BUILD_NOTES
  §24). Elsewhere 1: on the CPU the loop's control is cheap and unrolling only lengthens compilation."""
  if config.scan_unroll:
    return config.scan_unroll
  return True if (backend or jax.default_backend()) == "gpu" else 1


def from_config(config) -> LSTMLM:
  return LSTMLM(
      vocab_size=config.vocab_size, hidden=config.hidden_size, num_layers=config.num_layers,
      dropout=config.dropout, init_scale=config.init_scale,
      embedding_init_scale=config.words.init_scale, tying=config.words.mode,
      pr_lambda=config.words.pr_lambda, proj_bias=config.words.proj_bias, output_bias=config.words.output_bias,
      logit_scale=config.words.logit_scale,
      matmuls=precision.COMPUTE[config.compute_dtype], unroll=loop_unroll(config),
      class_bounds=softmax.model_class_bounds(config) if config.softmax.kind == "class" else ())
