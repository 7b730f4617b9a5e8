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

The input product x·W of all time steps is hoisted out of the time scan; the recurrence has its own
backward pass (`rhn_recurrence`: the loop computes only the micro-layers' gate gradients, each ∂R_ℓ is one
matmul after it). `remat=True` instead differentiates the plain recurrence with each time step under
`jax.checkpoint` (`rhn_recurrence_remat`): the backward pass recomputes the d micro-layers instead of storing
their activations (memory ∝ T·B·H instead of T·d·B·H), and is slower.
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


def _bias_init(scale: float, transform_bias: float):
  """b[d, 2H]: the h half ~ U(−scale, scale), the t half = transform_bias."""

  def init(key, shape, dtype=jnp.float32):
    d, two_h = shape
    h_part = jax.random.uniform(key, (d, two_h // 2), dtype, -scale, scale)
    return jnp.concatenate([h_part, jnp.full((d, two_h // 2), transform_bias, dtype)], axis=-1)

  return init


def _micro_layers(s_BxH, xw_Bx2H, r_c, b_dx2H, s_mask, dot):
  """One RHN time step: the d micro-layers from state s[B, H]; r_c is a list of d matrices [H, 2H]. Returns
  the new state, the input state of every micro-layer (d arrays [B, H]) and its σ-activations
  a_ℓ = σ(z_ℓ·scale) (d arrays [B, 2H]).

  h = tanh(z_h) is computed as 2σ(2z_h) − 1, so both halves of z come out of one σ over [B, 2H] (one fused
  elementwise op instead of two slices; the same trick as `lstm_lm.lstm_recurrence`)."""
  d, H = len(r_c), r_c[0].shape[0]
  scale = jnp.concatenate([jnp.full(H, 2.0), jnp.ones(H)])  # z·scale: 2 for the h half, 1 for the t half
  s_in, acts = [], []
  for l in range(d):  # d is small and static: unrolled inside the scan body
    z = dot(s_BxH * s_mask if s_mask is not None else s_BxH, r_c[l]) + b_dx2H[l]
    if l == 0:
      z = z + xw_Bx2H
    a = jax.nn.sigmoid(z * scale)
    h, t = 2.0 * a[:, :H] - 1.0, a[:, H:]
    s_in.append(s_BxH)
    acts.append(a)
    s_BxH = (h - s_BxH) * t + s_BxH
  return s_BxH, s_in, acts


def _split_once(r_dxKxN, dtype):
  """R[d, K, N] → d matrices [K, N], cast to the matmul input `dtype` (None: kept float32), outside the time
  loop. (XLA's CPU backend copies a static slice R[ℓ] of a loop-invariant stacked array into a fresh buffer at
  every iteration; with d separate loop invariants each step's matmul reads its weights in place — ~25% faster
  at H = 830.)"""
  r = r_dxKxN if dtype is None else r_dxKxN.astype(dtype)
  return [r[l] for l in range(r.shape[0])]


def _rhn_forward(xw_TxBx2H, r_dxHx2H, b_dx2H, s0_BxH, s_mask_BxH, matmuls, keep_activations, unroll=1):
  r_c = _split_once(r_dxHx2H, matmuls.dtype)  # cast and slice once, not at every step

  def step(s, xw_Bx2H):
    s, s_in, acts = _micro_layers(s, xw_Bx2H, r_c, b_dx2H, s_mask_BxH, matmuls.dot)
    return s, ((s, s_in, acts) if keep_activations else s)

  s_T, ys = jax.lax.scan(step, s0_BxH, xw_TxBx2H, unroll=unroll)
  if keep_activations:
    y_TxBxH, s_in, acts = ys  # s_in, acts: d arrays [T, B, H] / [T, B, 2H]
    return y_TxBxH, s_T, s_in, acts
  return ys, s_T, None, None


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def rhn_recurrence(xw_TxBx2H, r_dxHx2H, b_dx2H, s0_BxH, s_mask_BxH=None, matmuls=precision.FLOAT32, unroll=1):
  """One RHN layer over time (Zilly et al. 2017, coupled carry gate), given the hoisted input product.

  xw[T, B, 2H] = x·W_in (seen by micro-layer 0 only), R[d, H, 2H], b[d, 2H], s0[B, H], s_mask[B, H] or None
  (the variational state mask, the same at every micro-layer and step) → (y[T, B, H], s_T[B, H]); y[t] is the
  state after step t. Per step, for ℓ = 0..d−1:
      z_ℓ = (s·m)·R_ℓ + b_ℓ (+ xw[t] at ℓ = 0);   h = tanh(z_ℓ[:H]), t = σ(z_ℓ[H:]);   s ← (h − s)·t + s.
  `matmuls`: how the matmuls multiply, forward and backward (`wt_jax.precision.COMPUTE`). `unroll`:
  time steps per iteration of the compiled forward and backward loops (the same arithmetic).

  The custom VJP runs only the gate gradients ∂z_ℓ in the backward loop and forms each ∂R_ℓ after it as one
  [H, T·B]×[T·B, 2H] matmul (and ∂b_ℓ as one sum), instead of accumulating d [H, 2H] gradients inside the
  loop at every step as autodiff of `lax.scan` does. It keeps every micro-layer's input state and
  activations from the forward pass (T·d·B·3H floats) and forms ∂z (T·d·B·2H) in the backward pass;
  `rhn_recurrence_remat` is the memory-light alternative. The mask gets its true gradient (a cheap [B, H]
  sum), although the models do not need it.
  """
  y, s_T, _, _ = _rhn_forward(xw_TxBx2H, r_dxHx2H, b_dx2H, s0_BxH, s_mask_BxH, matmuls, False, unroll)
  return y, s_T


def _rhn_fwd(xw, r, b, s0, s_mask, matmuls, unroll):
  y, s_T, s_in, acts = _rhn_forward(xw, r, b, s0, s_mask, matmuls, True, unroll)
  return (y, s_T), (r, s_mask, s_in, acts)


def _rhn_bwd(matmuls, unroll, res, cotangents):
  r, s_mask, s_in, acts = res
  dy_TxBxH, ds_T = cotangents
  d, H = r.shape[0], r.shape[1]
  r_T = _split_once(jnp.swapaxes(r, 1, 2), matmuls.dtype)  # d × [2H, H], transposed once: contiguous operands

  def step(carry, inputs):
    ds, dm = carry
    dy, s_l, a_l = inputs
    ds = ds + dy
    dzs = [None] * d
    for l in reversed(range(d)):
      a, s = a_l[l], s_l[l]
      h, t = 2.0 * a[:, :H] - 1.0, a[:, H:]
      # s' = (h − s)·t + s: ∂h = ∂s'·t, ∂t = ∂s'·(h − s), direct ∂s = ∂s'·(1 − t); tanh' = 1 − h², σ' = t(1 − t)
      dz = jnp.concatenate([ds * t * (1.0 - h * h), ds * (h - s) * t * (1.0 - t)], axis=-1)
      du = matmuls.dot(dz, r_T[l])  # ∂(s·m)
      if s_mask is not None:
        dm = dm + du * s
        du = du * s_mask
      ds = ds * (1.0 - t) + du
      dzs[l] = dz
    return (ds, dm), dzs

  dm0 = None if s_mask is None else jnp.zeros_like(s_mask)
  (ds0, dm), dzs = jax.lax.scan(step, (ds_T, dm0), (dy_TxBxH, s_in, acts), reverse=True, unroll=unroll)
  # After the loop: ∂R_ℓ = Σ_t (s_ℓ·m)ᵀ ∂z_ℓ, one [H, T·B]×[T·B, 2H] matmul per micro-layer.
  dr = jnp.stack([
      matmuls.dot((s_in[l] * s_mask if s_mask is not None else s_in[l]).reshape(-1, H).T,
                  dzs[l].reshape(-1, 2 * H)) for l in range(d)])
  db = jnp.stack([dzs[l].sum(axis=(0, 1)) for l in range(d)])
  return dzs[0], dr, db, ds0, dm


rhn_recurrence.defvjp(_rhn_fwd, _rhn_bwd)


def rhn_recurrence_remat(xw_TxBx2H, r_dxHx2H, b_dx2H, s0_BxH, s_mask_BxH=None, matmuls=precision.FLOAT32, unroll=1):
  """`rhn_recurrence`'s maths (same arguments and results) differentiated by JAX, with each time step under
  `jax.checkpoint`: the backward pass recomputes the d micro-layers and accumulates ∂R inside the loop, so
  only the states between steps are kept (memory ∝ T·B·H, not T·d·B·H). Slower than `rhn_recurrence`
  (one more forward's matmuls and a [H, 2H] read-modify-write per micro-layer and step); the memory option.
  (A custom-VJP variant that recomputed the micro-layers and accumulated ∂R in its own loop measured no
  faster and needed more memory on CPU, for its loop-invariant copies of R.)"""
  d, H = r_dxHx2H.shape[0], r_dxHx2H.shape[1]

  def step(s, xw_Bx2H):
    for l in range(d):  # d is small and static: unrolled inside the scan body
      z = matmuls.dot(s * s_mask_BxH if s_mask_BxH is not None else s, r_dxHx2H[l]) + b_dx2H[l]
      if l == 0:
        z = z + xw_Bx2H
      h, t = jnp.tanh(z[:, :H]), jax.nn.sigmoid(z[:, H:])
      s = (h - s) * t + s
    return s, s

  s_T, y_TxBxH = jax.lax.scan(jax.checkpoint(step), s0_BxH, xw_TxBx2H, unroll=unroll)
  return y_TxBxH, s_T


class RHNLayer(nn.Module):
  """x[T, B, I], s[B, H], masks (x_mask[B, I], s_mask[B, H] or None) → y[T, B, H], s[B, H]."""

  hidden: int
  depth: int
  init_scale: float
  transform_bias: float = -2.0
  remat: bool = False
  matmuls: precision.Matmuls = precision.FLOAT32  # how it multiplies (wt_jax.precision.COMPUTE)
  unroll: int = 1  # time steps per compiled loop iteration (rhn_recurrence)

  @nn.compact
  def __call__(self, x_TxBxI, s_BxH, x_mask=None, s_mask=None):
    H, I, d = self.hidden, x_TxBxI.shape[-1], self.depth
    init = tying.uniform_init(self.init_scale)
    w = self.param("w_in", init, (I, 2 * H))
    r = self.param("w_rec", init, (d, H, 2 * H))
    b = self.param("bias", _bias_init(self.init_scale, self.transform_bias), (d, 2 * H))
    if x_mask is not None:
      x_TxBxI = x_TxBxI * x_mask
    xw_TxBx2H = self.matmuls.dot(x_TxBxI, w)
    recurrence = rhn_recurrence_remat if self.remat else rhn_recurrence
    return recurrence(xw_TxBx2H, r, b, s_BxH, s_mask, self.matmuls, self.unroll)


class RHNLM(nn.Module):
  """__call__(ids[B, T], carry s[L, B, H], train) → (logits[B, T, V], carry); features=True: the output
  layer's input z[B, T, H] instead (`tying.WordEmbeddings.features`)."""

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
  matmuls: precision.Matmuls = precision.FLOAT32  # float32 or bfloat16 inputs (config.compute_dtype)
  unroll: int = 1  # time steps per compiled loop iteration (_loop_unroll)
  class_bounds: tuple[int, ...] = ()  # a class-factored softmax (wt_jax.softmax; config.softmax.kind='class')

  def setup(self):
    self.words = tying.WordEmbeddings(vocab_size=self.vocab_size, dim=self.hidden, mode=self.tying,
                                      init_scale=self.init_scale, pr_lambda=self.pr_lambda,
                                      proj_bias=self.proj_bias, output_bias=self.output_bias,
                                      matmuls=self.matmuls, class_bounds=self.class_bounds)
    self.layers = [RHNLayer(self.hidden, self.depth, self.init_scale, self.transform_bias, self.remat,
                            self.matmuls, self.unroll, name=f"rhn_{l}") for l in range(self.num_layers)]

  def initial_carry(self, batch_size: int) -> jax.Array:
    return jnp.zeros((self.num_layers, batch_size, self.hidden), jnp.float32)

  def __call__(self, ids_BxT: jax.Array, carry: jax.Array, *, train: bool = False, features: bool = False):
    B, L, H = ids_BxT.shape[0], self.num_layers, self.hidden
    x = self.words.embed(ids_BxT.T)  # [T, B, H]
    rates = (self.dropout_x, self.dropout_i, self.dropout_h, self.dropout_o)
    masks_on = train and any(isinstance(r, jax.Array) or r > 0 for r in rates)  # (an array: a member's rate)
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
    return self.words.output(jnp.swapaxes(x, 0, 1), features), jnp.stack(states)


def from_config(config) -> RHNLM:
  return RHNLM(
      vocab_size=config.vocab_size, hidden=config.hidden_size, depth=config.depth,
      num_layers=config.num_layers, dropout_x=config.dropout_x, dropout_i=config.dropout_i,
      dropout_h=config.dropout_h, dropout_o=config.dropout_o, init_scale=config.init_scale,
      transform_bias=config.transform_bias, tying=config.words.mode, remat=config.remat,
      pr_lambda=config.words.pr_lambda, proj_bias=config.words.proj_bias, output_bias=config.words.output_bias,
      matmuls=precision.COMPUTE[config.compute_dtype],
      unroll=config.scan_unroll or 1,  # (0: 1; unrolling the RHN on a GPU is not measured yet: lstm_lm.loop_unroll)
      class_bounds=softmax.model_class_bounds(config) if config.softmax.kind == "class" else ())
