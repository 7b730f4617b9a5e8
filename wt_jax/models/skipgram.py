"""word2vec skip-gram (Mikolov et al. 2013), untied (input U, output V) or tied (one matrix S).

    model = SkipGram(vocab_size=V, dim=D, tying="tied")
    loss = model.apply(variables, centers[N], contexts[N], negatives[N, K], method=model.negative_sampling)
    loss = model.apply(variables, centers[N], contexts[N], method=model.full_softmax)
    loss = window_loss(u[N, T, D], v[N, G, 1+K, D], mask[N, T, G, 1+K])   # over windows, shared noise
    loss = window_loss(u[B, J, D], v[B, J, 1+K, D], mask[B, J, 1+K])      # over windows, noise a pair

The embeddings live in `tying.WordEmbeddings` (no output bias), so a tied model holds one `embedding` leaf
used both for the centre word (input role) and for the scored words (output role).

Negative sampling: Σ_n [−log σ(u_c·v_o) − Σ_k log σ(−u_c·v_{n_k})], **summed** over the N pairs, so that
an SGD step with learning rate α moves each row as word2vec.c's per-pair updates with the same α would
(applied at once rather than one pair after another). Full softmax: Σ_n −log softmax(u_c Vᵀ)_o, the
variant Press & Wolf's Section 3 analyses.

Initialisation: word2vec.c and gensim draw U ~ U(−0.5/D, 0.5/D) and set V = 0. A tied model cannot start
at zero (S = 0 has zero gradient), so every matrix here, U, V and S alike, starts at U(−0.5/D, 0.5/D);
the untied model therefore differs from gensim's in its starting V (BUILD_NOTES.md).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

import wt_jax.tying as tying
from wt_jax.errors import InputError

MODES = ("untied", "tied")


def negative_sampling_loss(u: jax.Array, v_pos: jax.Array, v_neg: jax.Array) -> jax.Array:
  """u[N, D] centre vectors, v_pos[N, D] context vectors, v_neg[N, K, D] noise vectors → the summed loss
  Σ_n [−log σ(u_n·v⁺_n) − Σ_k log σ(−u_n·v⁻_nk)] (scalar). Shared by `SkipGram.negative_sampling` and the
  trainer's sparse SGD step, which differentiates it with respect to the gathered rows."""
  pos = jnp.einsum("nd,nd->n", u, v_pos)   # [N]
  neg = jnp.einsum("nd,nkd->nk", u, v_neg)  # [N, K]
  return -(jnp.sum(jax.nn.log_sigmoid(pos)) + jnp.sum(jax.nn.log_sigmoid(-neg)))


def window_loss(u: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
  """Negative sampling over windows, in word2vec.c's orientation (a context word's input vector predicts its
  centre). Output slot 0 is the centre (the positive), slots 1..K noise words; two forms:
  - one noise set a window (BlazingText's shared negatives, Gupta & Khare 2017), N blocks of G centres: u[N, T, D]
    the input vectors of each block's T text rows, v[N, G, 1+K, D] its centres' output sets, mask[N, T, G, 1+K] —
    the scores are one [T, D]×[D, G(1+K)] product a block;
  - one set a slot (word2vec.c): u[B, J, D], v[B, J, 1+K, D], mask[B, J, 1+K].
  The mask keeps the (row, output) pairs that count (a context inside its centre's window and sentence; a noise
  word other than the centre, which word2vec.c skips) → Σ mask·[−log σ(u·v₀) − Σ_k log σ(−u·v_k)] (scalar):
  `negative_sampling_loss` of the kept pairs."""
  scores = jnp.einsum("ntd,ngod->ntgo", u, v) if mask.ndim == 4 else jnp.einsum("bjd,bjod->bjo", u, v)
  sign = jnp.where(jnp.arange(scores.shape[-1]) == 0, 1.0, -1.0)
  return -jnp.sum(jnp.where(mask, jax.nn.log_sigmoid(sign * scores), 0.0))


class SkipGram(nn.Module):
  vocab_size: int
  dim: int
  tying: str = "untied"

  def setup(self):
    if self.tying not in MODES:
      raise InputError(f"Unknown skip-gram tying {self.tying!r}; expected one of {', '.join(MODES)}.")
    self.words = tying.WordEmbeddings(vocab_size=self.vocab_size, dim=self.dim, mode=self.tying,
                                      init_scale=0.5 / self.dim, output_bias=False)

  def __call__(self, centers, contexts, negatives):
    return self.negative_sampling(centers, contexts, negatives)

  def input_vectors(self, ids: jax.Array) -> jax.Array:
    """ids[...] → u[..., D] (rows of U, or of S when tied)."""
    return self.words.embed(ids)

  def output_vectors(self, ids: jax.Array) -> jax.Array:
    """ids[...] → v[..., D] (rows of V, or of S when tied)."""
    return jnp.take(self.words.output_matrix(), ids, axis=0)

  def negative_sampling(self, centers: jax.Array, contexts: jax.Array, negatives: jax.Array) -> jax.Array:
    """centers[N], contexts[N], negatives[N, K] int → the summed loss (scalar)."""
    return negative_sampling_loss(self.input_vectors(centers), self.output_vectors(contexts),
                                  self.output_vectors(negatives))

  def full_softmax(self, centers: jax.Array, contexts: jax.Array) -> jax.Array:
    """centers[N], contexts[N] int → Σ_n −log softmax(u_c Vᵀ)_o (scalar)."""
    logits = self.words.logits(self.input_vectors(centers))  # [N, V]
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.sum(jnp.take_along_axis(logp, contexts[:, None], axis=-1))


def from_config(config) -> SkipGram:
  return SkipGram(vocab_size=config.vocab_size, dim=config.dim, tying=config.tying)
