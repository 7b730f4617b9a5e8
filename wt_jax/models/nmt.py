"""Attention encoder–decoder for translation in the style of DL4MT / Nematus (Press & Wolf 2017,
the translation-model paragraphs of their Weight Tying section and their Neural Machine Translation results).

    src[B, S] → embed → bidirectional GRU → ctx[B, S, 2H]
    state₀ = tanh(mean_s ctx · W_init + b)                      (mean over non-pad source positions)
    for each target position t, with y_{t−1} the previous target word (<s> at t = 0):
      s'_t = GRU₁(E y_{t−1}, s_{t−1})                           (conditional GRU, first transition)
      α_t  = softmax_s( v · tanh(ctx_s W_c + s'_t W_s + b) )    (additive attention; pads get weight 0)
      c_t  = Σ_s α_ts ctx_s
      s_t  = GRU₂(c_t, s'_t)                                    (second transition)
      o_t  = tanh(s_t W_os + E y_{t−1} W_oy + c_t W_oc + b_o)   (deep output, [E]: embedding size)
      logits_t = o_t · Oᵀ + b_out                               ([V_tgt]; O = the output embedding)

Because the deep output maps to the embedding size E, the output embedding O has the shape of an input
embedding and can be tied to it whatever the hidden size H. Tying (`tying`):

| mode        | embedding leaves (tying.WordEmbeddings is `words`)                         |
|-------------|----------------------------------------------------------------------------|
| `none`      | source/embedding [V_src, E]; words/embedding, words/out_embedding [V_tgt, E] |
| `decoder`   | source/embedding; words/embedding used for the decoder input and output   |
| `three_way` | words/embedding [V, E] only: encoder input = decoder input = decoder output; |
|             | needs one joint vocabulary (V_src = V_tgt, the same ids on both sides)     |

The GRU is the Nematus form: r, z gates; candidate tanh(x W + r ⊙ (h U)); h' = z ⊙ h + (1 − z) ⊙ cand.
Input-to-hidden products are computed for all time steps before each recurrence (one big matmul); only
h·U and the attention run inside `lax.scan`. Padding: a padded step leaves the GRU state unchanged, so the
backward encoder starts from zeros at each sentence's last real token, and extra padding changes nothing.

Initialisation as DL4MT: recurrent matrices orthogonal (per gate), other weights N(0, 0.01²), biases 0;
embeddings U(−init_scale, init_scale) (tying.WordEmbeddings). Dropout (rate `dropout`) on the source and
target embeddings, the encoder states and the deep output, a fresh mask per element.
"""
from __future__ import annotations


import flax.linen as nn
import jax
import jax.numpy as jnp

import wt_jax.tying as tying
from wt_jax.errors import InputError

TYING_MODES = ("none", "decoder", "three_way")
NEG_INF = -1e9


def check_tying(mode: str) -> str:
  if mode not in TYING_MODES:
    raise InputError(f"Unknown NMT tying mode {mode!r}; expected one of {', '.join(TYING_MODES)}.")
  return mode


def _orthogonal_blocks(blocks: int):
  """[H, blocks·H] made of `blocks` independent orthogonal H×H matrices."""

  def init(key, shape, dtype=jnp.float32):
    H = shape[0]
    keys = jax.random.split(key, blocks)
    return jnp.concatenate([nn.initializers.orthogonal()(k, (H, H), dtype) for k in keys], axis=1)

  return init


def gru(xw_Bx3H: jax.Array, h_BxH: jax.Array, u_Hx3H: jax.Array) -> jax.Array:
  """One GRU transition given the input part xw = x·W + b: gates r, z, candidate (Nematus order)."""
  H = h_BxH.shape[-1]
  hu = h_BxH @ u_Hx3H
  r = jax.nn.sigmoid(xw_Bx3H[:, :H] + hu[:, :H])
  z = jax.nn.sigmoid(xw_Bx3H[:, H:2 * H] + hu[:, H:2 * H])
  cand = jnp.tanh(xw_Bx3H[:, 2 * H:] + r * hu[:, 2 * H:])
  return z * h_BxH + (1.0 - z) * cand


def gru_over_time(xw_TxBx3H, mask_TxB, u_Hx3H, reverse: bool = False):
  """The GRU over a (time-major) sequence from a zero state; padded steps keep the state. → h[T, B, H]."""
  B, H = xw_TxBx3H.shape[1], u_Hx3H.shape[0]

  def step(h, inputs):
    xw, m = inputs
    h = jnp.where(m[:, None], gru(xw, h, u_Hx3H), h)
    return h, h

  _, hs = jax.lax.scan(step, jnp.zeros((B, H), xw_TxBx3H.dtype), (xw_TxBx3H, mask_TxB), reverse=reverse)
  return hs


def attend(ctx_BxSxC, ctx_proj_BxSxA, mask_BxS, query_BxA, v_A):
  """Additive attention → (context[B, C], weights α[B, S]); α is 0 on padding and sums to 1 over the rest."""
  scores = jnp.tanh(ctx_proj_BxSxA + query_BxA[:, None, :]) @ v_A
  alpha = jax.nn.softmax(jnp.where(mask_BxS, scores, NEG_INF), axis=-1)
  alpha = jnp.where(mask_BxS, alpha, 0.0)
  return jnp.einsum("bs,bsc->bc", alpha, ctx_BxSxC), alpha


class NMT(nn.Module):
  """The encoder–decoder. Ids: 0 = <pad> (masked), target inputs start with <s>; see wt_jax.data.subwords.

  __call__(src[B, S], tgt_in[B, T], train) → logits[B, T, V_tgt]; `encode` and `decode_step` serve decoding.
  """

  src_vocab: int
  tgt_vocab: int
  emb: int = 256
  hidden: int = 256
  attention: int = 0        # attention layer size; 0 → hidden
  tying: str = "none"
  dropout: float = 0.0
  init_scale: float = 0.01
  pad_id: int = 0

  def setup(self):
    check_tying(self.tying)
    if self.tying == "three_way" and self.src_vocab != self.tgt_vocab:
      raise ValueError(
          f"three_way tying needs one joint vocabulary for source and target (one matrix embeds both), but "
          f"src_vocab={self.src_vocab} != tgt_vocab={self.tgt_vocab}. Build the data with a joint "
          f"vocabulary (Subwords.learn(..., joint=True); configs set joint_vocab=True).")
    E, H, A = self.emb, self.hidden, self.attention or self.hidden
    self.words = tying.WordEmbeddings(self.tgt_vocab, E, mode="untied" if self.tying == "none" else "tied",
                                      init_scale=self.init_scale)
    if self.tying != "three_way":
      self.source = nn.Embed(self.src_vocab, E, embedding_init=tying.uniform_init(self.init_scale))
    w, z, ortho = nn.initializers.normal(0.01), nn.initializers.zeros, _orthogonal_blocks(3)
    p = self.param
    self.enc_fwd = {"w": p("enc_fwd_w", w, (E, 3 * H)), "b": p("enc_fwd_b", z, (3 * H,)),
                    "u": p("enc_fwd_u", ortho, (H, 3 * H))}
    self.enc_bwd = {"w": p("enc_bwd_w", w, (E, 3 * H)), "b": p("enc_bwd_b", z, (3 * H,)),
                    "u": p("enc_bwd_u", ortho, (H, 3 * H))}
    self.init_w, self.init_b = p("init_w", w, (2 * H, H)), p("init_b", z, (H,))
    self.gru1 = {"w": p("dec_gru1_w", w, (E, 3 * H)), "b": p("dec_gru1_b", z, (3 * H,)),
                 "u": p("dec_gru1_u", ortho, (H, 3 * H))}
    self.att = {"ctx": p("att_ctx_w", w, (2 * H, A)), "b": p("att_b", z, (A,)),
                "query": p("att_query_w", w, (H, A)), "v": p("att_v", w, (A,))}
    self.gru2 = {"w": p("dec_gru2_w", w, (2 * H, 3 * H)), "b": p("dec_gru2_b", z, (3 * H,)),
                 "u": p("dec_gru2_u", ortho, (H, 3 * H))}
    self.out = {"s": p("out_state_w", w, (H, E)), "y": p("out_prev_w", w, (E, E)),
                "c": p("out_ctx_w", w, (2 * H, E)), "b": p("out_b", z, (E,))}
    self.drop = nn.Dropout(self.dropout)

  def embed_source(self, src: jax.Array) -> jax.Array:
    return self.words.embed(src) if self.tying == "three_way" else self.source(src)

  def encode(self, src_BxS: jax.Array, train: bool = False) -> dict:
    """→ {'ctx'[B, S, 2H], 'ctx_proj'[B, S, A], 'mask'[B, S] bool, 'state'[B, H]} (the decoder's start)."""
    mask = src_BxS != self.pad_id
    x = self.drop(self.embed_source(src_BxS), deterministic=not train)
    x_T = jnp.swapaxes(x, 0, 1)
    m_T = mask.T
    fwd = gru_over_time(x_T @ self.enc_fwd["w"] + self.enc_fwd["b"], m_T, self.enc_fwd["u"])
    bwd = gru_over_time(x_T @ self.enc_bwd["w"] + self.enc_bwd["b"], m_T, self.enc_bwd["u"], reverse=True)
    ctx = jnp.swapaxes(jnp.concatenate([fwd, bwd], axis=-1), 0, 1)  # [B, S, 2H]
    n = jnp.maximum(mask.sum(axis=1, keepdims=True), 1)
    mean = jnp.where(mask[..., None], ctx, 0.0).sum(axis=1) / n
    state = jnp.tanh(mean @ self.init_w + self.init_b)
    ctx = self.drop(ctx, deterministic=not train)
    return {"ctx": ctx, "ctx_proj": ctx @ self.att["ctx"] + self.att["b"], "mask": mask, "state": state}

  def _transition(self, enc, state_BxH, xw1_Bx3H):
    """s' = GRU₁, attention, s = GRU₂ → (s, c, α)."""
    s1 = gru(xw1_Bx3H, state_BxH, self.gru1["u"])
    c, alpha = attend(enc["ctx"], enc["ctx_proj"], enc["mask"], s1 @ self.att["query"], self.att["v"])
    s2 = gru(c @ self.gru2["w"] + self.gru2["b"], s1, self.gru2["u"])
    return s2, c, alpha

  def _readout(self, s, y_emb, c, train: bool):
    o = jnp.tanh(s @ self.out["s"] + y_emb @ self.out["y"] + c @ self.out["c"] + self.out["b"])
    return self.words.logits(self.drop(o, deterministic=not train))

  def decode(self, enc: dict, tgt_in_BxT: jax.Array, train: bool = False, return_attention: bool = False):
    """Teacher-forced decoder: → logits[B, T, V] (and α[B, T, S] if `return_attention`)."""
    y = self.drop(self.words.embed(tgt_in_BxT), deterministic=not train)  # [B, T, E]
    y_T = jnp.swapaxes(y, 0, 1)
    xw1_T = y_T @ self.gru1["w"] + self.gru1["b"]
    m_T = (tgt_in_BxT != self.pad_id).T

    def step(state, inputs):
      xw1, m = inputs
      s, c, alpha = self._transition(enc, state, xw1)
      return jnp.where(m[:, None], s, state), (s, c, alpha)

    # The scan body calls no submodule, only pure functions of arrays fetched in setup.
    _, (s_T, c_T, alpha_T) = jax.lax.scan(step, enc["state"], (xw1_T, m_T))
    logits = self._readout(jnp.swapaxes(s_T, 0, 1), y, jnp.swapaxes(c_T, 0, 1), train)
    if return_attention:
      return logits, jnp.swapaxes(alpha_T, 0, 1)
    return logits

  def __call__(self, src_BxS, tgt_in_BxT, train: bool = False, return_attention: bool = False):
    return self.decode(self.encode(src_BxS, train), tgt_in_BxT, train, return_attention)

  def decode_step(self, enc: dict, state_BxH: jax.Array, prev_B: jax.Array):
    """One decoding step (no dropout): previous word ids[B] → (state[B, H], log-probabilities[B, V], α[B, S])."""
    y = self.words.embed(prev_B)
    s, c, alpha = self._transition(enc, state_BxH, y @ self.gru1["w"] + self.gru1["b"])
    return s, jax.nn.log_softmax(self._readout(s, y, c, False), axis=-1), alpha


def from_config(config, src_vocab: int, tgt_vocab: int) -> NMT:
  return NMT(src_vocab=src_vocab, tgt_vocab=tgt_vocab, emb=config.emb_size, hidden=config.hidden_size,
             attention=config.attention_size, tying=config.tying, dropout=config.dropout,
             init_scale=config.init_scale)
