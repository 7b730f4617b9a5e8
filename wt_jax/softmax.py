"""Softmax approximations over the one output word matrix (tied or not): training costs that score only some rows.

The full softmax scores every word, logits = z·Wᵀ + b over all V rows of the output matrix W (the input
embedding itself when tied: `wt_jax.tying`), so every row of W receives a gradient at every step — the
premise of Press & Wolf (2017)'s Section 3 explanation of tying. The lecture notes' "Softmax approximations"
and "Other softmax structures" (notes_feedforward_lms) list cheaper costs; here, with s_w = z·W_w + b_w the
score of word w, S = (S_1 … S_K) drawn i.i.d. (with replacement: K draws reach fewer than K distinct rows,
`expected_distinct`) from a proposal Q once per step and shared by the batch:

  sampled  a sampled softmax whose normaliser keeps the target's term exact and estimates the other words'
           terms by importance sampling from Q (Bengio & Senécal 2008 sample the whole normaliser; here the
           sample covers only the words other than the target):
             NLL ≈ −s_y + log(exp s_y + Σ_{j: S_j ≠ y} exp(s_{S_j} − log K·Q(S_j)))
           the sum estimates Σ_{w ≠ y} exp s_w without bias, so the loss and its gradient tend to the full
           softmax's as K grows. It is not TensorFlow's `sampled_softmax_loss` (after Jean et al. 2015), which
           also subtracts log K·Q(y) from the target's score (in the limit that rescales each token's gradient
           by 1/(1 − p_y)) and draws K distinct candidates by default. Candidates equal to the target
           ("accidental hits") are dropped, as TensorFlow does by default.
  nce      noise-contrastive estimation (Mnih & Teh 2012), scores read as self-normalised log-probabilities:
             loss = −log σ(Δ_y) − Σ_j log(1 − σ(Δ_{S_j})),   Δ_w = s_w − log K·Q(w)
  class    a class-factored softmax (Goodman 2001), exact and normalised:
             p(w | h) = softmax(z·Cᵀ + c)[class(w)] · softmax over the words of class(w) of s_w
           the classes are bins of the frequency-sorted vocabulary (Mikolov et al. 2011's RNNLM scheme,
           `class_bounds`); the class part has its own small matrix C [n_classes, D] (`WordEmbeddings`), the word
           part reads only the rows of W in the target's class.

z [N, D] are the features the output layer reads (`tying.WordEmbeddings.features`: after the projection when
there is one). The proposal Q is 'log_uniform' over frequency rank, Q(r) = log((r+2)/(r+1)) / log(V+1) for ids
sorted by decreasing frequency (as `wt_jax.data.vocab` sorts them; TensorFlow's log-uniform sampler), or
'unigram', Q ∝ count^power; the draw follows Q rounded to multiples of 2^−32 exactly, and the costs correct
with that rounded Q (`quantise`). Only `class` changes the model; `sampled` and `nce` train the full-softmax model,
and every run is evaluated with its exact probabilities (`tying.WordEmbeddings.logits`).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

import wt_jax.precision as precision
from wt_jax.errors import InputError

KINDS = ("full", "sampled", "nce", "class")
PROPOSALS = ("log_uniform", "unigram")


# --- the proposal Q and the candidates ---------------------------------------------------------------

def proposal_log_probs(kind: str, vocab_size: int, counts: np.ndarray | None = None,
                       power: float = 0.75) -> np.ndarray:
  """log Q[V] (float64) of the proposal `kind`: 'log_uniform' over frequency rank (id), or 'unigram'
  (Q ∝ counts^power; `counts[V]` the training counts, every word with count 0 given count 1)."""
  if kind == "log_uniform":
    r = np.arange(vocab_size, dtype=np.float64)
    return np.log(np.log1p(1.0 / (r + 1.0))) - math.log(math.log(vocab_size + 1.0))
  if kind == "unigram":
    if counts is None or len(counts) != vocab_size:
      raise InputError(f"softmax.proposal='unigram' needs the training counts of all {vocab_size} words.")
    w = np.maximum(np.asarray(counts, np.float64), 1.0) ** power
    return np.log(w) - math.log(w.sum())
  raise InputError(f"Unknown softmax.proposal {kind!r}; expected one of {', '.join(PROPOSALS)}.")


DRAW_BITS = 32  # a draw reads one uniform 32-bit integer


def quantise(log_q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Q as `draw` realises it exactly: (edges uint32[V − 1], log Q' float64[V]).

  A draw reads one uniform integer u in [0, 2^32) and returns the id i with E_{i−1} ≤ u < E_i (E_{−1} = 0,
  E_{V−1} = 2^32), so it returns i with probability exactly Q'(i) = (E_i − E_{i−1}) / 2^32. Q' is Q rounded
  to multiples of 2^−32, every word given at least one (Q' > 0, so every word can be drawn), the rounding's
  total moved onto the likeliest word: |Q' − Q| ≤ 2^−33 elsewhere. The costs correct with log Q', the same
  distribution the draw follows (a float32 CDF instead quantises each word's share to the spacing of the
  floats near the CDF's value, ≈ 6·10⁻⁸ near 1: a rare word's probability several per cent off Q)."""
  q = np.exp(np.asarray(log_q, np.float64))
  total = 1 << DRAW_BITS
  if len(q) > total:
    raise ValueError(f"A proposal over {len(q)} words needs more than {DRAW_BITS} bits per draw.")
  width = np.maximum(np.rint(q / q.sum() * total).astype(np.int64), 1)
  width[np.argmax(q)] += total - width.sum()
  edges = np.cumsum(width)
  return edges[:-1].astype(np.uint32), np.log(width / total)


def draw(key: jax.Array, edges: jax.Array, num_samples: int) -> jax.Array:
  """K = num_samples ids drawn i.i.d. (with replacement) from Q' (`quantise`'s edges uint32[V − 1]) → int32[K].
  K draws reach E[distinct] = Σ_w 1 − (1 − Q'(w))^K rows (`expected_distinct`), fewer than K."""
  return ids_of_bits(edges, jax.random.bits(key, (num_samples,), jnp.uint32))


def ids_of_bits(edges: jax.Array, bits_K: jax.Array) -> jax.Array:
  """The id whose interval [E_{i−1}, E_i) holds each uniform uint32 (`quantise`) → int32[K]."""
  return jnp.searchsorted(edges, bits_K, side="right").astype(jnp.int32)


def expected_distinct(log_q: np.ndarray, num_samples: int) -> float:
  """The expected number of distinct ids among K i.i.d. draws from Q: Σ_w 1 − (1 − Q(w))^K (float64)."""
  q = np.exp(np.asarray(log_q, np.float64))
  return float(np.sum(-np.expm1(num_samples * np.log1p(-q))))


# --- scores over some rows ------------------------------------------------------------------------------

def _bias(b, ids):
  return 0.0 if b is None else jnp.take(b, ids, axis=0)


def target_scores(z_NxD, w_VxD, b_V, y_N, dtype=None) -> jax.Array:
  """s_y = z·W_y + b_y for each row's own target → [N] (only the target rows of W are read)."""
  w_NxD = jnp.take(w_VxD, y_N, axis=0)
  if precision.is_low(dtype):
    prod = z_NxD.astype(dtype).astype(jnp.float32) * w_NxD.astype(dtype).astype(jnp.float32)
  else:
    prod = z_NxD * w_NxD
  return jnp.sum(prod, axis=-1) + _bias(b_V, y_N)


def candidate_scores(z_NxD, w_VxD, b_V, ids_K, dtype=None) -> jax.Array:
  """s_{S_j} = z·W_{S_j} + b_{S_j} for every row and every shared candidate → [N, K]."""
  return precision.dot(z_NxD, jnp.take(w_VxD, ids_K, axis=0).T, dtype) + _bias(b_V, ids_K)


def sampled_softmax_nll(z_NxD, w_VxD, b_V, y_N, ids_K, log_q_V, remove_accidental_hits=True,
                        dtype=None) -> jax.Array:
  """The importance-sampled NLL of each target (module docstring) → [N], ≈ −log p(y) (unbiased denominator)."""
  s_y = target_scores(z_NxD, w_VxD, b_V, y_N, dtype)
  s_NxK = candidate_scores(z_NxD, w_VxD, b_V, ids_K, dtype) - (math.log(ids_K.shape[0]) + log_q_V[ids_K])
  if remove_accidental_hits:
    s_NxK = jnp.where(ids_K[None, :] == y_N[:, None], -jnp.inf, s_NxK)
  log_z = jax.nn.logsumexp(jnp.concatenate([s_y[:, None], s_NxK], axis=1), axis=1)
  return log_z - s_y


def nce_loss(z_NxD, w_VxD, b_V, y_N, ids_K, log_q_V, dtype=None) -> tuple[jax.Array, jax.Array]:
  """Mnih & Teh (2012)'s NCE with K noise samples (module docstring) → (loss[N], −s_y[N]); −s_y is the
  self-normalised model's NLL of the target, the number a progress line can show."""
  log_k = math.log(ids_K.shape[0])
  s_y = target_scores(z_NxD, w_VxD, b_V, y_N, dtype)
  delta_y = s_y - (log_k + log_q_V[y_N])
  delta_NxK = candidate_scores(z_NxD, w_VxD, b_V, ids_K, dtype) - (log_k + log_q_V[ids_K])
  loss = jax.nn.softplus(-delta_y) + jnp.sum(jax.nn.softplus(delta_NxK), axis=1)
  return loss, -s_y


# --- the class-factored softmax -------------------------------------------------------------------------

def class_bounds(counts: np.ndarray, num_classes: int, power: float = 0.5) -> tuple[int, ...]:
  """Frequency bins of a vocabulary sorted by decreasing count → (0 = b_0 < b_1 < … < b_C = V): class c is ids
  [b_c, b_{c+1}). The RNNLM toolkit's assignment (Mikolov et al. 2011): walk the words from the most frequent,
  accumulating f_w = count_w^power / Σ count^power; a word joins the current class a, which then moves on
  to a + 1 once the accumulated mass passes (a + 1)/num_classes. power 1 bins by frequency (frequent words get
  classes of their own, rare ones share large classes); 0.5, the toolkit's default, evens the class sizes."""
  counts = np.asarray(counts, np.float64)
  if num_classes < 1 or num_classes > len(counts):
    raise InputError(f"softmax.num_classes must be in [1, V = {len(counts)}], not {num_classes}.")
  if np.any(np.diff(counts) > 0):
    raise ValueError("Class bins need ids sorted by decreasing training frequency (wt_jax.data.vocab).")
  f = np.maximum(counts, 0.0) ** power
  mass = np.cumsum(f) / max(f.sum(), 1e-300)
  bounds, a = [0], 0
  for i in range(len(counts)):
    if mass[i] > (a + 1) / num_classes and a < num_classes - 1:
      a += 1
      bounds.append(i + 1)
  if bounds[-1] != len(counts):
    bounds.append(len(counts))
  return tuple(int(b) for b in bounds)


def class_index(bounds) -> np.ndarray:
  """class(w) for every id → int32[V]."""
  b = np.asarray(bounds)
  return np.repeat(np.arange(len(b) - 1, dtype=np.int32), np.diff(b))


def class_log_probs(z_NxD, w_VxD, b_V, c_CxD, cb_C, bounds, dtype=None) -> jax.Array:
  """The class-factored model's exact log p(w | h) for every word → [N, V] (each row sums to 1 in
  probability). Used for evaluation; the training cost `class_nll` reads only the target's class."""
  cls = jnp.asarray(class_index(bounds))
  n_classes = len(bounds) - 1
  word_NxV = precision.dot(z_NxD, w_VxD.T, dtype) + (0.0 if b_V is None else b_V)
  class_NxC = jax.nn.log_softmax(precision.dot(z_NxD, c_CxD.T, dtype) + (0.0 if cb_C is None else cb_C), -1)
  # log Σ_{w ∈ c} exp s_w per class, stable: the classes are contiguous, sorted segments of the last axis
  word_VxN = word_NxV.T
  seg_max = jax.lax.stop_gradient(jax.ops.segment_max(word_VxN, cls, n_classes, indices_are_sorted=True))
  seg_sum = jax.ops.segment_sum(jnp.exp(word_VxN - seg_max[cls]), cls, n_classes, indices_are_sorted=True)
  lse_NxC = (jnp.log(seg_sum) + seg_max).T
  return jnp.take(class_NxC - lse_NxC, cls, axis=1) + word_NxV


def class_nll(z_NxD, w_VxD, b_V, c_CxD, cb_C, y_N, bounds, dtype=None) -> jax.Array:
  """−log p(y | h) of the class-factored softmax → [N], exact; reads the class matrix and, of W, only the
  rows of each target's class (a window of M = the largest class's size rows, starting at the class's
  first id, the rows outside the class masked)."""
  b = np.asarray(bounds)
  V, M = w_VxD.shape[0], int(np.max(np.diff(b)))
  cls = jnp.asarray(class_index(bounds))
  starts, ends = jnp.asarray(b[:-1], jnp.int32), jnp.asarray(b[1:], jnp.int32)
  c_N = cls[y_N]
  class_NxC = precision.dot(z_NxD, c_CxD.T, dtype) + (0.0 if cb_C is None else cb_C)
  class_nll_N = jax.nn.logsumexp(class_NxC, axis=1) - jnp.take_along_axis(class_NxC, c_N[:, None], 1)[:, 0]
  first_N = jnp.minimum(starts[c_N], V - M)  # the window [first, first + M) holds the whole class
  rows_NxM = first_N[:, None] + jnp.arange(M, dtype=jnp.int32)
  inside_NxM = (rows_NxM >= starts[c_N][:, None]) & (rows_NxM < ends[c_N][:, None])
  w_NxMxD = jnp.take(w_VxD, rows_NxM, axis=0)
  if precision.is_low(dtype):
    s_NxM = jnp.einsum("nd,nmd->nm", z_NxD.astype(dtype), w_NxMxD.astype(dtype),
                       preferred_element_type=jnp.float32)
  else:
    s_NxM = jnp.einsum("nd,nmd->nm", z_NxD, w_NxMxD)
  s_NxM = jnp.where(inside_NxM, s_NxM + _bias(b_V, rows_NxM), -jnp.inf)
  s_y = jnp.take_along_axis(s_NxM, (y_N - first_N)[:, None], 1)[:, 0]
  return class_nll_N + jax.nn.logsumexp(s_NxM, axis=1) - s_y


# --- from a config ------------------------------------------------------------------------------------------

TRAIN_NLL = {  # what a run's training perplexity is computed from, by softmax.kind
    "full": "exact (full softmax)",
    "class": "exact (the class-factored model)",
    "sampled": "the sampled-softmax estimate of the NLL (K candidates; biased low)",
    "nce": "the self-normalised score: -(z.W_y + b_y), not normalised",
}


def kind_of(config) -> str:
  """config.softmax.kind, checked ('full' for a config without the group)."""
  s = config.get("softmax")
  kind = "full" if s is None else s.kind
  if kind not in KINDS:
    raise InputError(f"Unknown softmax.kind {kind!r}; expected one of {', '.join(KINDS)}.")
  if kind in ("sampled", "nce") and not 0 < s.num_samples:
    raise InputError(f"softmax.num_samples must be ≥ 1, not {s.num_samples}.")
  return kind


def settings(config) -> dict:
  """The settings of the config's softmax approximation that change its cost ({} for the full softmax): what
  a record (results.json, a bench line) needs to tell two runs of one kind apart."""
  s, kind = config.get("softmax"), kind_of(config)
  if kind in ("sampled", "nce"):
    return {"num_samples": s.num_samples, "proposal": s.proposal,
            **({"unigram_power": s.unigram_power} if s.proposal == "unigram" else {})}
  if kind == "class":
    return {"num_classes": len(s.class_bounds) - 1 if s.class_bounds else s.num_classes,
            "class_power": s.class_power,
            **({"largest_class": int(max(b - a for a, b in zip(s.class_bounds, s.class_bounds[1:])))}
               if s.class_bounds else {})}
  return {}


def expected_candidate_rows(config, counts: np.ndarray | None = None) -> float | None:
  """The expected number of distinct rows among the config's K draws per step (sampled, nce; None for the
  others): `expected_distinct` of the Q the draw follows; `counts` [V] for a unigram proposal."""
  s, kind = config.get("softmax"), kind_of(config)
  if kind not in ("sampled", "nce"):
    return None
  log_q = quantise(proposal_log_probs(s.proposal, config.vocab_size, counts, s.unigram_power))[1]
  return expected_distinct(log_q, s.num_samples)


def counts(train_ids: np.ndarray, vocab_size: int) -> np.ndarray:
  """Training counts of every id → int64[V]."""
  return np.bincount(np.asarray(train_ids).ravel(), minlength=vocab_size)[:vocab_size]


def resolve(config, train_ids: np.ndarray):
  """`config` with softmax.class_bounds filled from the training stream when softmax.kind is 'class' and
  none are given (a copy; `config` itself otherwise). The bounds are then part of the run's config (run.json),
  so the folder alone rebuilds the model."""
  if kind_of(config) != "class" or config.softmax.class_bounds:
    return config
  s = config.softmax
  bounds = class_bounds(counts(train_ids, config.vocab_size), s.num_classes, s.class_power)
  config = config.copy_and_resolve_references()
  config.softmax.class_bounds = bounds
  return config


NCE_NEEDS_BIAS = ("softmax.nce_start_normalised starts NCE normalised by moving the output bias to −log V, but "
                  "words.output_bias is off (Inan et al.'s reused embeddings): without the shift the rows NCE "
                  "never scores keep s ≈ 0 and swamp the exact normaliser; set words.output_bias=True, or "
                  "softmax.nce_start_normalised=False to train without it knowingly.")


def check_nce_start(config) -> None:
  """One line (ValueError) when NCE is asked to start normalised (`start_normalised`) with no output bias to
  move: the setting would do nothing, and NCE would start unnormalised."""
  if kind_of(config) == "nce" and config.softmax.nce_start_normalised and not config.words.output_bias:
    raise InputError(NCE_NEEDS_BIAS)


def start_normalised(params, config):
  """`params` with the output bias moved by −log V when NCE trains them (`softmax.nce_start_normalised`):
  NCE reads the scores as log-probabilities and only ever lowers the rows it scores, so a model that starts
  with s_w ≈ 0 for every word (Σ_w exp s_w ≈ V) keeps the rows it never reaches near 0, and they dominate
  the exact normaliser the evaluation uses. With the shift the model starts normalised (Σ_w exp s_w ≈ 1).
  A model without an output bias gets NCE_NEEDS_BIAS (ValueError) instead of an unmoved start."""
  if kind_of(config) != "nce" or not config.softmax.nce_start_normalised:
    return params
  if "out_bias" not in params.get("words", {}):
    raise InputError(NCE_NEEDS_BIAS)
  words = {**params["words"], "out_bias": params["words"]["out_bias"] - math.log(config.vocab_size)}
  return {**params, "words": words}


def model_class_bounds(config) -> tuple[int, ...]:
  """The class bounds a model is built with: () unless softmax.kind is 'class'."""
  if kind_of(config) != "class":
    return ()
  if not config.softmax.class_bounds:
    raise InputError("softmax.kind='class' needs softmax.class_bounds, the frequency bins of the training "
                     "counts: wt_jax.softmax.resolve(config, train_ids) fills them (experiments.ptb does).")
  return tuple(int(b) for b in config.softmax.class_bounds)
