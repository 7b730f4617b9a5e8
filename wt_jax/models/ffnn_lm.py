"""Feed-forward n-gram language models: Bengio et al. (2003)'s neural probabilistic LM and Mnih & Hinton
(2007)'s log-bilinear LM, through the same loop as the recurrent LMs.

Both predict w_t from the n−1 previous words. The "carry" of the loop's interface is those n−1 words at the
end of the previous window, int32[1, B, n−1], so contexts run across window boundaries exactly as the
recurrent state does (the very first positions of a stream see id 0 as context).

NNLM (Bengio et al. 2003, eq. 1):   x = [C w_{t−n+1}; …; C w_{t−1}]          [(n−1)·m]
                                   h = tanh(x·H + d)                          [hidden]
                                   o = h (hidden = m) or h·P_o (projection)   [m]
                                   logits = o·Oᵀ + b  (+ x·W with direct connections)
  Tying shares C and O (tying.WordEmbeddings): the output layer must act on m-dimensional vectors, so either
  hidden = m or an m×hidden projection P_o (`output_projection`); shapes are checked. Untied, with hidden = m
  and direct connections, the count is the lecture notes' D = Vd + V + (n−1)dV + VH + H + (n−1)dH (their A
  is W here); without direct connections the (n−1)dV term goes.
LBL (Mnih & Hinton 2007):          r̂ = Σ_i r_{w_{t−i}}·C_i                  [m]    (C_i: m×m per position)
                                   logits = r̂·Rᵀ + b
  Tied: one representation table R for context and target words (the original LBL); untied: two.
  The lecture notes' LBL scores v by Σ_i (r_{w_{t−i}}·C_i + c)·r_v + b_v, with a d-dimensional context bias c,
  and count Vd + (n−1)d² + d + V parameters. This model has no c (Vd + (n−1)d² + V tied): the term
  (n−1)·c·r_v depends on v alone, so the free per-word bias b absorbs it (b'_v = b_v + (n−1)·c·r_v gives
  the same logits). The two parametrisations describe the same distributions; only their gradients differ.
"""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

import wt_jax.softmax as softmax
import wt_jax.tying as tying
from wt_jax.models import variational


def _contexts(ids_BxT, carry, n_ctx: int):
  """→ (context ids[B, T, n−1] (oldest first), new carry[1, B, n−1]).

  The loop's targets are y[:, t] = the word after ids[:, t], so the context of position t is the n−1 words
  ending with ids[:, t] itself: ids[t−n+2 .. t] (the carry supplies those before the window)."""
  full = jnp.concatenate([carry[0], ids_BxT], axis=1)  # [B, n−1+T]; ids[:, t] is full[:, n−1+t]
  T = ids_BxT.shape[1]
  ctx = jnp.stack([full[:, k + 1:k + 1 + T] for k in range(n_ctx)], axis=-1)  # last column: ids itself
  return ctx, full[:, -n_ctx:][None]


class NNLM(nn.Module):
  """Bengio et al. (2003). __call__(ids[B, T], carry, train) → (logits[B, T, V], carry)."""

  vocab_size: int
  emb: int = 200
  hidden: int = 200
  context: int = 4               # n − 1
  tying: str = "untied"          # untied | tied
  output_projection: bool = False  # o = h·P_o (needed for tying when hidden ≠ emb)
  direct: bool = False           # Bengio's direct connections x·W (an extra V×(n−1)m matrix, never tied)
  dropout: float = 0.0
  init_scale: float = 0.1
  output_bias: bool = True

  def setup(self):
    if self.tying not in ("untied", "tied"):
      raise ValueError(f"NNLM tying must be 'untied' or 'tied', not {self.tying!r}.")
    if not self.output_projection and self.hidden != self.emb:
      raise ValueError(f"The NNLM output layer acts on the hidden layer ({self.hidden} units) but the output "
                       f"embedding has {self.emb} columns: set hidden_size = emb_size, or "
                       f"output_projection=True (an {self.hidden}×{self.emb} projection).")
    init = tying.uniform_init(self.init_scale)
    self.words = tying.WordEmbeddings(self.vocab_size, self.emb, mode=self.tying, init_scale=self.init_scale,
                                      output_bias=self.output_bias)
    self.hidden_w = self.param("hidden_w", init, (self.context * self.emb, self.hidden))
    self.hidden_b = self.param("hidden_b", nn.initializers.zeros, (self.hidden,))
    if self.output_projection:
      self.out_proj = self.param("out_proj", init, (self.hidden, self.emb))
    if self.direct:
      self.direct_w = self.param("direct_w", init, (self.context * self.emb, self.vocab_size))
    self.drop = variational.Dropout(self.dropout)

  def initial_carry(self, batch_size: int):
    return jnp.zeros((1, batch_size, self.context), jnp.int32)

  def __call__(self, ids_BxT, carry, *, train: bool = False):
    ctx, carry = _contexts(ids_BxT, carry, self.context)
    B, T = ids_BxT.shape
    x = self.words.embed(ctx).reshape(B, T, self.context * self.emb)
    x = self.drop(x, deterministic=not train)
    h = jnp.tanh(x @ self.hidden_w + self.hidden_b)
    h = self.drop(h, deterministic=not train)
    o = h @ self.out_proj if self.output_projection else h
    logits = self.words.logits(o)
    if self.direct:
      logits = logits + x @ self.direct_w
    return logits, carry


class LBL(nn.Module):
  """Mnih & Hinton (2007) log-bilinear LM. __call__(ids[B, T], carry, train) → (logits[B, T, V], carry);
  features=True: r̂[B, T, m], the output layer's input, instead."""

  vocab_size: int
  emb: int = 200
  context: int = 4
  tying: str = "tied"            # tied: one table R (the original); untied: context and target tables
  dropout: float = 0.0
  init_scale: float = 0.1
  output_bias: bool = True
  class_bounds: tuple[int, ...] = ()  # a class-factored softmax (wt_jax.softmax)

  def setup(self):
    if self.tying not in ("untied", "tied"):
      raise ValueError(f"LBL tying must be 'untied' or 'tied', not {self.tying!r}.")
    self.words = tying.WordEmbeddings(self.vocab_size, self.emb, mode=self.tying, init_scale=self.init_scale,
                                      output_bias=self.output_bias, class_bounds=self.class_bounds)
    # C_i for context position i (oldest first), each m×m; initialised near the identity / context size.
    eye = jnp.eye(self.emb) / self.context
    self.context_w = self.param(
        "context_w", lambda k, s: eye + tying.uniform_init(self.init_scale / self.emb ** 0.5)(k, s),
        (self.context, self.emb, self.emb))
    self.drop = variational.Dropout(self.dropout)

  def initial_carry(self, batch_size: int):
    return jnp.zeros((1, batch_size, self.context), jnp.int32)

  def __call__(self, ids_BxT, carry, *, train: bool = False, features: bool = False):
    ctx, carry = _contexts(ids_BxT, carry, self.context)
    r = self.drop(self.words.embed(ctx), deterministic=not train)      # [B, T, n−1, m]
    r_hat = jnp.einsum("btim,imk->btk", r, self.context_w)             # Σ_i r_{w_i}·C_i
    return self.words.output(r_hat, features), carry


def nnlm_from_config(config) -> NNLM:
  return NNLM(vocab_size=config.vocab_size, emb=config.emb_size, hidden=config.hidden_size,
              context=config.context, tying=config.words.mode, output_projection=config.output_projection,
              direct=config.direct, dropout=config.dropout, init_scale=config.init_scale,
              output_bias=config.words.output_bias)


def lbl_from_config(config) -> LBL:
  return LBL(vocab_size=config.vocab_size, emb=config.emb_size, context=config.context, tying=config.words.mode,
             dropout=config.dropout, init_scale=config.init_scale, output_bias=config.words.output_bias,
             class_bounds=softmax.model_class_bounds(config) if config.softmax.kind == "class" else ())
