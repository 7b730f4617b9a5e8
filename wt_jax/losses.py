"""Losses with the reference scaling.

The Zaremba et al. (2014) / TensorFlow PTB reference trains on

    cost = Σ_t mean_b NLL(b, t)                     (sum over the bptt steps, mean over the batch)

and its learning rate (1.0) and clip norms (5, 10) are tuned for that scale: a per-token mean would be
bptt (20–35) times smaller and train that much slower. Penalties sown by the model (e.g. the projection
penalty of `wt_jax.tying`) are in units of the NLL summed over *all* tokens, so they enter as Σ / batch_size.
"""
from __future__ import annotations

from typing import Any, Callable

import chex
import jax
import jax.numpy as jnp
import optax

import numpy as np

import wt_jax.precision as precision
import wt_jax.softmax as softmax
import wt_jax.tying as tying


def token_nll(logits: jax.Array, targets: jax.Array) -> jax.Array:
  """logits[B, T, V], targets[B, T] int → NLL[B, T] in nats."""
  return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), targets)


def zaremba_cost(nll_BxT: jax.Array, mask_BxT: jax.Array | None = None) -> jax.Array:
  """Σ over time, mean over batch: Σ_{b,t} mask·NLL / B (B = the number of sequences in the batch)."""
  if mask_BxT is not None:
    nll_BxT = nll_BxT * mask_BxT
  return jnp.sum(nll_BxT) / nll_BxT.shape[0]


def augmented_kl(logits: jax.Array, targets: jax.Array, embedding: jax.Array, tau: float,
                 target_gradient: bool = False) -> jax.Array:
  """Inan, Khosravi & Socher (2017)'s augmented loss term, per token: KL(ỹ ‖ ŷ) with

      ŷ = softmax(logits / τ),    ỹ = softmax(L · u_y / τ),    u_y = L[y]

  logits[B, T, V], targets[B, T], embedding L[V, D] → KL[B, T] in nats. ỹ puts mass on the words whose
  embeddings are close to the target's. With `target_gradient=False`, ỹ is a constant target (the
  gradient flows only through ŷ)."""
  u = jnp.take(embedding, targets, axis=0)                            # [B, T, D]
  target_logits = jnp.einsum("btd,vd->btv", u, embedding) / tau
  if isinstance(target_gradient, jax.Array):  # a per-member switch: the same values, the gradient where it is on
    target_logits = jnp.where(target_gradient, target_logits, jax.lax.stop_gradient(target_logits))
  elif not target_gradient:
    target_logits = jax.lax.stop_gradient(target_logits)
  log_y_tilde = jax.nn.log_softmax(target_logits.astype(jnp.float32), axis=-1)
  log_y_hat = jax.nn.log_softmax(logits.astype(jnp.float32) / tau, axis=-1)
  return jnp.sum(jnp.exp(log_y_tilde) * (log_y_tilde - log_y_hat), axis=-1)


def weight_l2(params: Any) -> jax.Array:
  """½‖θ‖² over every leaf (a tied matrix once: it is one leaf)."""
  return 0.5 * sum(jnp.sum(jnp.square(p)) for p in jax.tree_util.tree_leaves(params))


def make_lm_cost(config, counts: np.ndarray | None = None) -> Callable:
  """The training cost a language-model config asks for, as one function the train step calls:

      cost(params, logits[B, T, V], targets[B, T], penalties, key) → (cost, nll[B, T])

  cost = w_ce·Σ_t mean_b NLL                           (`zaremba_cost`; w_ce = config.al.ce_weight, 1 by default)
       + Σ penalties / B                               (sown by the model, e.g. projection regularisation)
       + α·Σ_t mean_b KL(ỹ ‖ ŷ)                         (Inan et al.'s augmented loss, when config.al.alpha > 0)
       + wd·½‖θ‖²                                       (when config.weight_decay_mode == 'loss': Zilly et al.)

  The augmented loss builds ỹ from the embedding `config.al.embedding` names (`tying.word_matrix`); with
  `config.al.target_gradient` the target carries a gradient too. nll is returned for the perplexities,
  which never include the other terms. `key` is the step's randomness for the cost (unused here).

  With `config.softmax.kind` other than 'full' the cost is `approximate_lm_cost`'s, which reads the output
  layer's features instead of logits (it has `takes_features = True`); `counts` [V] are the training counts
  its unigram proposal needs.
  """
  al = config.al
  # α, τ, w_ce, the target's gradient switch and wd are numbers, or, in a members program (`wt_jax.members`), traced
  # per-member scalars (jax arrays): a term is computed when its value is an array or non-zero. The config's ranges
  # are checked where it is resolved (`wt_jax.train.lm.check`).
  alpha, tau, ce_weight, target_gradient = al.alpha, al.tau, al.ce_weight, al.target_gradient
  l2 = config.weight_decay if config.weight_decay_mode == "loss" else 0.0
  use_al, use_l2 = isinstance(alpha, jax.Array) or alpha != 0, isinstance(l2, jax.Array) or l2 != 0
  scale_ce = isinstance(ce_weight, jax.Array) or ce_weight != 1
  which = al.embedding
  if config.softmax.kind != "full":
    return approximate_lm_cost(config, counts, ce_weight, l2)

  def cost(params, logits_BxTxV, targets_BxT, penalties, key=None):
    del key
    chex.assert_rank([logits_BxTxV, targets_BxT], [3, 2])
    chex.assert_equal_shape_prefix([logits_BxTxV, targets_BxT], 2)
    nll_BxT = token_nll(logits_BxTxV, targets_BxT)
    ce = zaremba_cost(nll_BxT)
    if scale_ce:
      ce = ce_weight * ce
    total = ce + sum(jax.tree_util.tree_leaves(penalties), jnp.zeros((), jnp.float32)) / targets_BxT.shape[0]
    if use_al:
      kl_BxT = augmented_kl(logits_BxTxV, targets_BxT, tying.word_matrix(params, which), tau, target_gradient)
      total = total + alpha * zaremba_cost(kl_BxT)
    if use_l2:
      total = total + l2 * weight_l2(params)
    return total, nll_BxT

  return cost


def approximate_lm_cost(config, counts: np.ndarray | None, ce_weight: float = 1.0, l2: float = 0.0) -> Callable:
  """The cost of `config.softmax.kind` in 'sampled' | 'nce' | 'class' (`wt_jax.softmax`), scaled as
  `make_lm_cost`'s (Σ over time, mean over batch; penalties / B; loss-side decay):

      cost(params, z[B, T, D], targets[B, T], penalties, key) → (cost, nll[B, T])

  z are the output layer's features (the model called with features=True); the candidates of 'sampled' and
  'nce' are drawn from `key`, once per step for the whole batch. nll is what the training perplexity is read
  from (`softmax.TRAIN_NLL`): exact for 'class', an estimate otherwise."""
  s, kind = config.softmax, config.softmax.kind
  dtype = precision.COMPUTE[config.compute_dtype].dtype
  num_samples = int(s.num_samples)
  if kind in ("sampled", "nce"):
    # the draw follows Q' (Q rounded to 2^−32) exactly, and the costs correct with the same Q'
    edges, log_q = softmax.quantise(
        softmax.proposal_log_probs(s.proposal, config.vocab_size, counts, s.unigram_power))
    edges, log_q = jnp.asarray(edges), jnp.asarray(log_q, jnp.float32)
  bounds = softmax.model_class_bounds(config) if kind == "class" else None

  def cost(params, z_BxTxD, targets_BxT, penalties, key):
    chex.assert_rank([z_BxTxD, targets_BxT], [3, 2])
    chex.assert_equal_shape_prefix([z_BxTxD, targets_BxT], 2)
    B, T = targets_BxT.shape
    z, y = z_BxTxD.reshape(B * T, -1), targets_BxT.reshape(B * T)
    words = params["words"]
    w, b = tying.word_matrix(params, "output"), words.get("out_bias")
    if kind == "sampled":
      ids = softmax.draw(key, edges, num_samples)
      loss = nll = softmax.sampled_softmax_nll(z, w, b, y, ids, log_q, s.remove_accidental_hits, dtype)
    elif kind == "nce":
      loss, nll = softmax.nce_loss(z, w, b, y, softmax.draw(key, edges, num_samples), log_q, dtype)
    else:
      loss = nll = softmax.class_nll(z, w, b, words["class_embedding"], words.get("class_bias"), y, bounds,
                                     dtype)
    total = zaremba_cost(loss.reshape(B, T))
    if isinstance(ce_weight, jax.Array) or ce_weight != 1.0:
      total = ce_weight * total
    total = total + sum(jax.tree_util.tree_leaves(penalties), jnp.zeros((), jnp.float32)) / B
    if isinstance(l2, jax.Array) or l2 != 0:
      total = total + l2 * weight_l2(params)
    return total, nll.reshape(B, T)

  cost.takes_features = True
  return cost
