"""Variational-dropout ("Bayesian", BD) LSTM language model — Gal (2015) as run by Press & Wolf (2017), Table 5.

    ids[B, T] → embedding · word-type mask → L × LSTM (per-gate variational masks on its input and its
    recurrent state) → · output mask → output layer (tied or not) → logits[B, T, V]

Follows Gal's Torch code as modified by Press & Wolf (`BayesianRNN/*_WT_*.lua`):
- each of the four gates (i, j, f, o) has its own Linear for the input and for the recurrent state, each with
  a bias — so 8H biases per layer, not 4H as in the Zaremba cell — and sees its *own* dropout mask of the
  input (`dropout_i`) and of the previous hidden state (`dropout_h`);
- masks are sampled once per bptt window and reused at every time step; the embedding mask drops whole word
  types (`dropout_x`); the top layer's output is masked by `dropout_o` before the output layer;
- every parameter, biases included, starts from U(−init_scale, init_scale);
- the layer-l input is layer l−1's output (no extra between-layer dropout: the next layer's input masks
  are it).
Dropout is off at evaluation (no masks). The carry is (c, h), each [L, B, H], as in `lstm_lm`.

Each layer's input product (all gates, all time steps, masked) is hoisted out of the time loop; the
recurrence is `lstm_lm.masked_lstm_recurrence` (without masks `lstm_lm.lstm_recurrence`): the state mask is
applied inside the loop, the backward loop computes only the gate gradients and ∂W_hh is formed after it
(per gate with per-gate masks). Its cell computes tanh(z_j) as 2σ(2z_j) − 1 (the same function; float32
results differ from jnp.tanh by rounding only). The recurrent matmuls stay float32 whatever compute_dtype.

`tie_state_masks=True` is Inan et al. (2017)'s VD-LSTM instead: one mask per layer state (rate `dropout_h`),
used both where the state re-enters its own layer and where it is fed to the next layer (the top layer's:
before the output layer); the embedding's mask is `dropout_i` on layer 0's input (Inan et al.: none, 0) and
`dropout_x` still drops word types. It needs shared masks (`mask_per_gate=False`).
"""
from __future__ import annotations


import flax.linen as nn
import jax
import jax.numpy as jnp

import wt_jax.precision as precision
import wt_jax.softmax as softmax
import wt_jax.tying as tying
from wt_jax.models import lstm_lm, variational

Carry = tuple[jax.Array, jax.Array]


class VariationalLSTMLayer(nn.Module):
  """x[T, B, I], c, h[B, H], masks → y[T, B, H], c, h. Masks: x_mask[G, B, I], h_mask[G, B, H] with G = 4
  (one per gate) or 1 (shared), or None (no dropout)."""

  hidden: int
  init_scale: float
  unroll: int | bool = 1  # time steps per compiled loop iteration (lstm_lm.lstm_recurrence)

  @nn.compact
  def __call__(self, x_TxBxI, c_BxH, h_BxH, x_mask=None, h_mask=None):
    H, I = self.hidden, x_TxBxI.shape[-1]
    init = tying.uniform_init(self.init_scale)
    w_ih = self.param("w_ih", init, (I, 4 * H))
    b_ih = self.param("b_ih", init, (4 * H,))
    w_hh = self.param("w_hh", init, (H, 4 * H))
    b_hh = self.param("b_hh", init, (4 * H,))

    def gates_from(v_xBxK, mask_GxBxK, w_Kx4H):
      """Σ over gates g of (v · mask_g) @ w[:, g] → [..., B, 4H] (mask_g = 1 when there is no mask)."""
      if mask_GxBxK is None:
        return v_xBxK @ w_Kx4H
      G, K = mask_GxBxK.shape[0], w_Kx4H.shape[0]
      if G == 1:
        return (v_xBxK * mask_GxBxK[0]) @ w_Kx4H
      masked = v_xBxK[..., None, :, :] * mask_GxBxK  # [..., 4, B, K]
      out = jnp.einsum("...gbk,kgh->...bgh", masked, w_Kx4H.reshape(K, 4, H))
      return out.reshape(*out.shape[:-2], 4 * H)

    xw_TxBx4H = gates_from(x_TxBxI, x_mask, w_ih) + b_ih + b_hh  # input part for all steps, hoisted
    # The recurrence with its own backward pass (lstm_lm): the state mask is applied inside it.
    if h_mask is None:
      return lstm_lm.lstm_recurrence(xw_TxBx4H, w_hh, c_BxH, h_BxH, precision.FLOAT32, self.unroll)
    return lstm_lm.masked_lstm_recurrence(xw_TxBx4H, w_hh, c_BxH, h_BxH, h_mask, precision.FLOAT32,
                                          self.unroll)


class BDLSTMLM(nn.Module):
  """__call__(ids[B, T], carry, train) → (logits[B, T, V], carry); features=True: the output layer's input
  z[B, T, H] instead (`tying.WordEmbeddings.features`). Dropout rates are drop probabilities."""

  vocab_size: int
  hidden: int
  num_layers: int = 2
  dropout_x: float = 0.0   # word types of the embedding
  dropout_i: float = 0.0   # each layer's input, per gate
  dropout_h: float = 0.0   # each layer's recurrent state, per gate
  dropout_o: float = 0.0   # top layer's output
  mask_per_gate: bool = True
  tie_state_masks: bool = False  # Inan et al.'s VD-LSTM: a layer state's mask is also its output's mask
  init_scale: float = 0.04
  tying: str = "tied"
  pr_lambda: float = 1.0 / 6.5
  proj_bias: bool = True
  output_bias: bool = True  # False: Inan et al.'s reused embeddings (RE) fix the softmax bias at 0
  matmuls: precision.Matmuls = precision.FLOAT32  # the output layer's (config.compute_dtype; the gates: float32)
  unroll: int | bool = 1  # time steps per compiled loop iteration (lstm_lm.loop_unroll; True: all)
  class_bounds: tuple[int, ...] = ()  # a class-factored softmax (wt_jax.softmax; config.softmax.kind='class')

  def setup(self):
    self.words = tying.WordEmbeddings(vocab_size=self.vocab_size, dim=self.hidden, mode=self.tying,
                                      init_scale=self.init_scale, pr_lambda=self.pr_lambda,
                                      proj_bias=self.proj_bias, output_bias=self.output_bias,
                                      matmuls=self.matmuls, class_bounds=self.class_bounds)
    self.layers = [VariationalLSTMLayer(self.hidden, self.init_scale, self.unroll, name=f"lstm_{l}")
                   for l in range(self.num_layers)]

  def initial_carry(self, batch_size: int) -> Carry:
    shape = (self.num_layers, batch_size, self.hidden)
    return (jnp.zeros(shape, jnp.float32), jnp.zeros(shape, jnp.float32))

  def __call__(self, ids_BxT: jax.Array, carry: Carry, *, train: bool = False, features: bool = False):
    c_LxBxH, h_LxBxH = carry
    B, L, H = ids_BxT.shape[0], self.num_layers, self.hidden
    x = self.words.embed(ids_BxT.T)  # [T, B, H]
    rates = (self.dropout_x, self.dropout_i, self.dropout_h, self.dropout_o)
    masks_on = train and any(isinstance(r, jax.Array) or r > 0 for r in rates)  # (an array: a member's rate)
    if self.tie_state_masks and self.mask_per_gate:
      raise ValueError("tie_state_masks (Inan et al.'s VD-LSTM) uses one mask per state: set mask_per_gate=False.")
    if masks_on:
      kx, ki, kh, ko = jax.random.split(self.make_rng("dropout"), 4)
      G = 4 if self.mask_per_gate else 1
      x = x * variational.word_type_mask(kx, self.dropout_x, ids_BxT, self.vocab_size).T[..., None]
      x_masks = variational.keep_mask(ki, self.dropout_i, (L, G, B, H))
      h_masks = variational.keep_mask(kh, self.dropout_h, (L, G, B, H))
      if self.tie_state_masks:  # layer l ≥ 1 sees layer l−1's output through that state's own mask
        x_masks = jnp.concatenate([x_masks[:1], h_masks[:-1]], axis=0)
    cs, hs = [], []
    for l, layer in enumerate(self.layers):
      x, c, h = layer(x, c_LxBxH[l], h_LxBxH[l], x_masks[l] if masks_on else None,
                      h_masks[l] if masks_on else None)
      cs.append(c)
      hs.append(h)
    if masks_on:
      x = x * (h_masks[-1, 0] if self.tie_state_masks else variational.keep_mask(ko, self.dropout_o, (B, H)))
    return self.words.output(jnp.swapaxes(x, 0, 1), features), (jnp.stack(cs), jnp.stack(hs))


def from_config(config) -> BDLSTMLM:
  return BDLSTMLM(
      vocab_size=config.vocab_size, hidden=config.hidden_size, num_layers=config.num_layers,
      dropout_x=config.dropout_x, dropout_i=config.dropout_i, dropout_h=config.dropout_h,
      dropout_o=config.dropout_o, mask_per_gate=config.mask_per_gate, init_scale=config.init_scale,
      tie_state_masks=config.tie_state_masks,
      tying=config.words.mode, pr_lambda=config.words.pr_lambda, proj_bias=config.words.proj_bias,
      output_bias=config.words.output_bias,
      matmuls=precision.COMPUTE[config.compute_dtype], unroll=lstm_lm.loop_unroll(config),
      class_bounds=softmax.model_class_bounds(config) if config.softmax.kind == "class" else ())
