"""A pre-LayerNorm decoder-only Transformer LM (Vaswani et al. 2017, Section 3, with the layer norm moved in
front of each sub-layer as in GPT-2), with its word layers in `tying.WordEmbeddings`, so every tying mode of
Press & Wolf (2017) applies unchanged.

    x₀ = E[w]·s_in + P[p]                    [B, M+T, D]   E: the (tied) embedding, P: learned positions
    x ← x + Drop(Attn(LN(x)))                causal multi-head self-attention
    x ← x + Drop(W₂·GELU(W₁·LN(x) + b₁) + b₂)
    logits = (LN(x)·Oᵀ)·s_out + b             O = E when tied (one shared leaf)

The scale of the shared matrix (`tying.WordEmbeddings`): s_in = √D with `input_scale` (Vaswani et al.
Section 3.4; Gemma), s_out = 1/√D with `logit_scale` (T5), or neither (GPT-2).

**Positions are learned** (GPT-2), one vector per slot of the [memory + bptt] input, drawn like the word
embedding: a fixed encoding would fix the ratio of position to word signal in the residual stream and so
decide part of the scale question in advance (sinusoids of amplitude 1 are ≈ 35× the unscaled words drawn at
std 0.02), while learned positions start on the words' scale and follow whichever scale the option gives the
words. They cost (memory + bptt)·D parameters, the same in every cell of a comparison, and cap the input at
memory + bptt tokens (so the batch-1 test's windows must be at most `bptt`).

**Context across windows.** The loop trains on consecutive [B, T] windows of the batched stream, as for the
recurrent LMs. The carry is the previous window's last `memory` token ids, int32[1, B, memory] (−1 where the
stream has not yet produced them): the model re-reads them in front of the window (no loss on them, their
keys masked while −1), so each scored token sees between `memory` and `memory + T − 1` earlier tokens, in
training and in evaluation alike; `memory = 0` makes every window independent (the t-th token of a window
sees t − 1 earlier ones). A perplexity of this model is only comparable with one taken with the same
`memory` and `bptt` (the batch-1 test's windows are `test_window` tokens: set it to `bptt`).
"""
from __future__ import annotations

import math

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp

import wt_jax.precision as precision
import wt_jax.softmax as softmax
import wt_jax.tying as tying
from wt_jax.models import variational


class Dense(nn.Module):
  """x[..., K] → x·W + b, W from U(−init_scale, init_scale), multiplied by `matmuls` (`wt_jax.precision`)."""

  features: int
  init_scale: float
  matmuls: precision.Matmuls = precision.FLOAT32

  @nn.compact
  def __call__(self, x):
    w = self.param("kernel", tying.uniform_init(self.init_scale), (x.shape[-1], self.features))
    b = self.param("bias", nn.initializers.zeros, (self.features,))
    return self.matmuls.dot(x, w) + b


class Block(nn.Module):
  """One pre-LN decoder layer. __call__(x[B, S, D], allowed[B, S, S] bool, train) → x[B, S, D]."""

  dim: int
  num_heads: int
  mlp_size: int
  dropout: float
  init_scale: float
  matmuls: precision.Matmuls = precision.FLOAT32

  @nn.compact
  def __call__(self, x_BxSxD, allowed_BxSxS, train: bool):
    B, S, D = x_BxSxD.shape
    H = self.num_heads
    Dh = D // H
    dropout = variational.Dropout(self.dropout)  # one module, two calls (two masks)
    drop = lambda v: dropout(v, deterministic=not train)
    h = nn.LayerNorm(name="ln_attn")(x_BxSxD)
    qkv_BxSx3D = Dense(3 * D, self.init_scale, self.matmuls, name="qkv")(h)
    q, k, v = (a.reshape(B, S, H, Dh) for a in jnp.split(qkv_BxSx3D, 3, axis=-1))
    scores_BxHxSxS = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(Dh)
    scores_BxHxSxS = jnp.where(allowed_BxSxS[:, None], scores_BxHxSxS, jnp.finfo(jnp.float32).min)
    attn_BxHxSxS = jax.nn.softmax(scores_BxHxSxS, axis=-1)
    ctx_BxSxD = jnp.einsum("bhqk,bkhd->bqhd", attn_BxHxSxS, v).reshape(B, S, D)
    x_BxSxD = x_BxSxD + drop(Dense(D, self.init_scale, self.matmuls, name="attn_out")(ctx_BxSxD))
    h = nn.LayerNorm(name="ln_mlp")(x_BxSxD)
    h = nn.gelu(Dense(self.mlp_size, self.init_scale, self.matmuls, name="mlp_in")(h))
    return x_BxSxD + drop(Dense(D, self.init_scale, self.matmuls, name="mlp_out")(h))


class TransformerLM(nn.Module):
  """__call__(ids[B, T], carry int32[1, B, memory], train) → (logits[B, T, V], carry) (module docstring);
  features=True: the output layer's input z[B, T, D] instead (`tying.WordEmbeddings.features`)."""

  vocab_size: int
  dim: int = 256
  num_layers: int = 4
  num_heads: int = 4
  mlp_size: int = 1024
  memory: int = 0
  max_len: int = 128         # input slots (memory + window): the learned position table's rows
  dropout: float = 0.0
  init_scale: float = 0.035  # U(−s, s): s = 0.035 is a standard deviation of 0.02 (GPT-2's)
  embedding_init_scale: float = 0.0  # > 0: the word layers from U(−s, s) instead (T5's std 1: s = √3)
  tying: str = "tied"
  pr_lambda: float = 1.0 / 6.5
  proj_bias: bool = True
  output_bias: bool = True
  input_scale: bool = False
  logit_scale: bool = False
  matmuls: precision.Matmuls = precision.FLOAT32
  class_bounds: tuple[int, ...] = ()  # a class-factored softmax (wt_jax.softmax)

  def setup(self):
    if self.dim % self.num_heads:
      raise ValueError(f"The model size {self.dim} is not a multiple of num_heads = {self.num_heads}.")
    if self.memory < 0:
      raise ValueError(f"memory must be ≥ 0 tokens, not {self.memory}.")
    self.words = tying.WordEmbeddings(
        vocab_size=self.vocab_size, dim=self.dim, mode=self.tying,
        init_scale=self.embedding_init_scale or self.init_scale,
        pr_lambda=self.pr_lambda, proj_bias=self.proj_bias, output_bias=self.output_bias,
        logit_scale=self.logit_scale, input_scale=self.input_scale, matmuls=self.matmuls,
        class_bounds=self.class_bounds)
    self.blocks = [Block(self.dim, self.num_heads, self.mlp_size, self.dropout, self.init_scale, self.matmuls,
                         name=f"block_{l}") for l in range(self.num_layers)]
    self.positions = self.param("positions", tying.uniform_init(self.init_scale), (self.max_len, self.dim))
    self.ln_out = nn.LayerNorm()
    self.drop = variational.Dropout(self.dropout)

  def initial_carry(self, batch_size: int):
    return jnp.full((1, batch_size, self.memory), -1, jnp.int32)  # −1: no token yet

  def __call__(self, ids_BxT, carry, *, train: bool = False, features: bool = False):
    B, T = ids_BxT.shape
    chex.assert_shape(carry, (1, B, self.memory))
    full_BxS = jnp.concatenate([carry[0], ids_BxT], axis=1)  # S = memory + T; the window is the last T
    S = full_BxS.shape[1]
    if S > self.max_len:
      raise ValueError(f"A window of {T} tokens after {self.memory} of memory needs {S} positions; the model has "
                       f"{self.max_len} (memory + bptt): evaluate on windows of at most bptt tokens.")
    causal_SxS = jnp.tril(jnp.ones((S, S), bool))
    allowed_BxSxS = causal_SxS[None] & (full_BxS >= 0)[:, None, :]  # a key is seen if earlier and a token
    x = self.words.embed(jnp.maximum(full_BxS, 0)) + self.positions[:S]
    x = self.drop(x, deterministic=not train)
    for block in self.blocks:
      x = block(x, allowed_BxSxS, train)
    out = self.words.output(self.ln_out(x[:, S - T:]), features)
    return out, full_BxS[:, S - self.memory:][None]


def from_config(config) -> TransformerLM:
  if config.test_window > config.bptt:
    raise ValueError(f"transformer_lm has learned positions for memory + bptt = {config.memory + config.bptt} "
                     f"tokens; set test_window ≤ bptt (it is {config.test_window}, bptt {config.bptt}).")
  return TransformerLM(
      vocab_size=config.vocab_size, dim=config.hidden_size, num_layers=config.num_layers,
      num_heads=config.num_heads, mlp_size=config.mlp_size, memory=config.memory,
      max_len=config.memory + config.bptt, dropout=config.dropout,
      init_scale=config.init_scale, tying=config.words.mode, pr_lambda=config.words.pr_lambda,
      proj_bias=config.words.proj_bias, output_bias=config.words.output_bias,
      input_scale=config.words.input_scale, logit_scale=config.words.logit_scale,
      embedding_init_scale=config.words.init_scale,
      matmuls=precision.COMPUTE[config.compute_dtype],
      class_bounds=softmax.model_class_bounds(config) if config.softmax.kind == "class" else ())
