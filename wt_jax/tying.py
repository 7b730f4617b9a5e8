"""Where weight tying lives: the word embedding lookup and the output (softmax) layer.

Every language model in wt_jax embeds its input and scores its output through `WordEmbeddings`, whose
`mode` decides, once, which parameters exist:

| mode              | parameters (V = vocabulary, D = embedding = hidden size)         | logits               |
|-------------------|-------------------------------------------------------------------|----------------------|
| `untied`          | embedding U (V×D), out_embedding V (V×D), out_bias b (V)          | h·Vᵀ + b             |
| `tied` (WT)       | embedding S (V×D), out_bias b (V)                                 | h·Sᵀ + b             |
| `projection` (PR) | U, V, b, proj_kernel P (D×D), proj_bias p_b (D)                   | (h·P + p_b)·Vᵀ + b   |
| `tied_projection` | S, b, P, p_b                                                      | (h·P + p_b)·Sᵀ + b   |

Tying is **one shared leaf**: in the tied modes the pytree holds a single `embedding` array; the lookup
reads rows of it and the output layer multiplies by its transpose, so its gradient is the sum of both uses
(Press & Wolf 2017, Section 3). Nothing is ever copied between two arrays.

With `class_bounds` (a class-factored softmax, `wt_jax.softmax`) the head also holds a class matrix
class_embedding C (n_classes×D) and class_bias c (n_classes), and `logits` returns the class-factored model's
exact log-probabilities, so every reader of logits (evaluation, analyses) sees that model's distribution.
`features(h)` is what the output layer multiplies by the word matrix (h after the projection, when there is
one): the training costs of `wt_jax.softmax` score only some rows of the matrix from it.

Projection regularisation (Press & Wolf 2017, in their Weight Tying section: an H×H matrix P before the
output embedding, with the penalty λ‖P‖₂ and λ = 0.15) penalises λ·½‖P‖²_F. The head *sows* that value
into the `penalties` collection; it is expressed in units of the NLL **summed over every token** of the batch
(the authors' code adds `l2_loss(P) / (batch_size · 6.5)` to a cost that is that sum divided by the batch
size, so λ = 1/6.5 ≈ 0.154, and the norm is l2_loss's ½‖P‖²_F). The training loop adds `Σ penalties / batch_size` to its cost; reported perplexities
never include it.
"""
from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

import wt_jax.precision as precision
import wt_jax.softmax as softmax
from wt_jax.errors import InputError

MODES = ("untied", "tied", "projection", "tied_projection")
PROJECTED = ("projection", "tied_projection")  # the modes with a projection P before the output layer
PENALTIES = "penalties"  # the linen collection that regularisers sow into


def uniform_init(scale: float):
  """Initialiser drawing U(−scale, scale), as the Zaremba/Press & Wolf reference code does for weights."""

  def init(key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, -scale, scale)

  return init


class WordEmbeddings(nn.Module):
  """Input embedding and output layer of a language model, tied or not.

  Attributes:
    vocab_size: V.
    dim: D, the embedding size; the output layer acts on D-dimensional vectors.
    mode: one of `MODES`.
    init_scale: every parameter here is drawn from U(−init_scale, init_scale).
    pr_lambda: λ of the projection penalty λ·½‖P‖²_F (authors' code: 1/6.5 ≈ 0.154).
    proj_bias: whether the projection has a bias p_b (the authors' code has one).
    output_bias: whether the softmax has a bias b (Inan et al.'s "reused embeddings" fix it at zero: False).
    logit_scale: multiply logits by D^-½ (off in the papers; an option for experimentation).
    input_scale: multiply looked-up embeddings by D^½ (Vaswani et al. 2017, Section 3.4; Gemma). With a
      tied leaf the two scales are the two places the one matrix's size can be corrected: before the first
      layer (input_scale) or before the softmax (logit_scale).
    matmuls: how the output layer multiplies (float32 or bfloat16 inputs; `wt_jax.precision.COMPUTE`).
    class_bounds: () for a softmax over the words; (0 = b_0 < … < b_C = V) for a class-factored one whose
      class c holds ids [b_c, b_{c+1}) (`wt_jax.softmax.class_bounds`).
  """

  vocab_size: int
  dim: int
  mode: str = "tied"
  init_scale: float = 0.1
  pr_lambda: float = 1.0 / 6.5
  proj_bias: bool = True
  output_bias: bool = True
  logit_scale: bool = False
  input_scale: bool = False
  matmuls: precision.Matmuls = precision.FLOAT32
  class_bounds: tuple[int, ...] = ()

  def setup(self):
    if self.mode not in MODES:
      raise InputError(f"Unknown tying mode {self.mode!r}; expected one of {', '.join(MODES)}.")
    init = uniform_init(self.init_scale)
    V, D = self.vocab_size, self.dim
    self.embedding = self.param("embedding", init, (V, D))
    if self.mode in ("untied", "projection"):
      self.out_embedding = self.param("out_embedding", init, (V, D))
    if self.mode in ("projection", "tied_projection"):
      self.proj_kernel = self.param("proj_kernel", init, (D, D))
      if self.proj_bias:
        self.proj_b = self.param("proj_bias", init, (D,))
    if self.output_bias:
      self.out_bias = self.param("out_bias", init, (V,))
    if self.class_bounds:
      b = self.class_bounds
      if b[0] != 0 or b[-1] != V or any(x >= y for x, y in zip(b, b[1:])):
        raise InputError(f"class_bounds must rise strictly from 0 to V = {V}; got {b[:3]}…{b[-3:]}.")
      self.class_embedding = self.param("class_embedding", init, (len(b) - 1, D))
      if self.output_bias:
        self.class_bias = self.param("class_bias", init, (len(b) - 1,))

  def output_matrix(self) -> jax.Array:
    """The V×D matrix the logits are computed against: the embedding itself when tied."""
    return self.embedding if self.mode in ("tied", "tied_projection") else self.out_embedding

  def embed(self, ids: jax.Array) -> jax.Array:
    """ids[...] int → embeddings[..., D] (× √D with `input_scale`)."""
    x = jnp.take(self.embedding, ids, axis=0)
    return x * math.sqrt(self.dim) if self.input_scale else x

  def _project(self, h: jax.Array) -> jax.Array:
    """h[..., D] → h·P + p_b (the projection modes, `PROJECTED`), sowing its penalty."""
    h = self.matmuls.dot(h, self.proj_kernel)
    if self.proj_bias:
      h = h + self.proj_b
    penalty = self.pr_lambda * 0.5 * jnp.sum(jnp.square(self.proj_kernel))
    self.sow(PENALTIES, "projection_l2", penalty, init_fn=lambda: 0.0, reduce_fn=lambda a, b: a + b)
    return h

  def features(self, h: jax.Array) -> jax.Array:
    """h[..., D] → z[..., D], the vector the word scores are read from: s_w = z·W_w + b_w (× D^-½ folded
    into z with `logit_scale`). Sows the projection penalty when there is a projection."""
    z = self._project(h) if self.mode in PROJECTED else h
    return z * (1.0 / math.sqrt(self.dim)) if self.logit_scale else z

  def logits(self, h: jax.Array) -> jax.Array:
    """h[..., D] → logits[..., V]; sows the projection penalty when there is a projection. With
    `class_bounds`: the class-factored model's exact log-probabilities (a valid input to any softmax)."""
    if self.class_bounds:
      return self.scores(self.features(h))
    out = self.matmuls.dot(self._project(h) if self.mode in PROJECTED else h, self.output_matrix().T)
    if self.logit_scale:
      out = out * (1.0 / math.sqrt(self.dim))
    if self.output_bias:
      out = out + self.out_bias
    return out

  def scores(self, z: jax.Array) -> jax.Array:
    """The features z[..., D] (`features`) → logits[..., V]: s_w = z·W_w + b_w (the class-factored model's exact
    log-probabilities with `class_bounds`). `logits(h)` is `scores(features(h))` up to where D^-½ is applied."""
    if self.class_bounds:
      lead = z.shape[:-1]
      logp = softmax.class_log_probs(z.reshape(-1, self.dim), self.output_matrix(),
                                     self.out_bias if self.output_bias else None, self.class_embedding,
                                     self.class_bias if self.output_bias else None, self.class_bounds,
                                     self.matmuls.dtype)
      return logp.reshape(*lead, self.vocab_size)
    out = self.matmuls.dot(z, self.output_matrix().T)
    return out + self.out_bias if self.output_bias else out

  def output(self, h: jax.Array, features: bool = False) -> jax.Array:
    """What a language model returns for its top-layer states h[..., D]: `logits` (or, for the costs of
    `wt_jax.softmax`, which score only some rows, `features`)."""
    return self.features(h) if features else self.logits(h)

  def __call__(self, ids: jax.Array) -> jax.Array:
    return self.embed(ids)


def count_params(params: Any) -> int:
  """Number of scalars in a parameter pytree (a shared leaf counts once: it is one leaf)."""
  return int(sum(x.size for x in jax.tree_util.tree_leaves(params)))


def constrain_embedding_rows(params: Any, norm: float) -> Any:
  """`params` with every row of the input embedding (params['words']['embedding'], V×D) rescaled to L2 norm
  `norm`; `params` itself when norm is 0. Inan et al. (2017, Section 6.2) hold the rows of L at norm 1; the
  loop applies this to the initial parameters and after every update (a projection onto the constraint, so
  the stored leaf is the constrained L that the AL target and the analyses read)."""
  if not norm:
    return params
  if norm < 0:
    raise InputError(f"words.row_norm must be ≥ 0 (0: off), not {norm}.")
  if "words" not in params or "embedding" not in params["words"]:
    raise InputError("words.row_norm needs a model whose input embedding is params['words']['embedding'].")
  embedding = params["words"]["embedding"]
  row_norms = jnp.linalg.norm(embedding, axis=-1, keepdims=True)
  words = {**params["words"], "embedding": embedding * (norm / jnp.maximum(row_norms, 1e-12))}
  return {**params, "words": words}


def word_matrix(params: Any, role: str) -> jax.Array:
  """The V×D matrix of a word role: 'input' (the lookup table L) or 'output' (the softmax matrix W); the
  same leaf when tied. params is a language model's parameter tree (its head under params['words'])."""
  words = params["words"]
  if role == "output" and "out_embedding" in words:
    return words["out_embedding"]
  if role not in ("input", "output"):
    raise ValueError(f"Unknown word role {role!r}; expected 'input' or 'output'.")
  return words["embedding"]


def embedding_leaves(params: Any) -> dict[str, jax.Array]:
  """The V×D embedding matrices of a parameter tree, by path: one when tied, two when untied."""
  out = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    name = jax.tree_util.keystr(path, simple=True, separator="/")
    if name.endswith(("/embedding", "/out_embedding")) or name in ("embedding", "out_embedding"):
      out[name] = leaf
  return out
