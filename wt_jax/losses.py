"""Losses with the reference scaling.

The Zaremba et al. (2014) / TensorFlow PTB reference trains on

    cost = Σ_t mean_b NLL(b, t)                     (sum over the bptt steps, mean over the batch)

and its learning rate (1.0) and clip norms (5, 10) are tuned for that scale: a per-token mean would be
bptt (20–35) times smaller and train that much slower. Penalties sown by the model (e.g. the projection
penalty of `wt_jax.tying`) are in units of the NLL summed over *all* tokens, so they enter as Σ / batch_size.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax


def token_nll(logits: jax.Array, targets: jax.Array) -> jax.Array:
  """logits[B, T, V], targets[B, T] int → NLL[B, T] in nats."""
  return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), targets)


def zaremba_cost(nll_BxT: jax.Array, mask_BxT: jax.Array | None = None) -> jax.Array:
  """Σ over time, mean over batch: Σ_{b,t} mask·NLL / B (B = the number of sequences in the batch)."""
  if mask_BxT is not None:
    nll_BxT = nll_BxT * mask_BxT
  return jnp.sum(nll_BxT) / nll_BxT.shape[0]


def total_penalty(penalties: Any) -> jax.Array:
  """Sum of every value a model sowed into its `penalties` collection (0 if none)."""
  leaves = jax.tree_util.tree_leaves(penalties)
  return sum(leaves, jnp.zeros((), jnp.float32))


def augmented_kl(logits: jax.Array, targets: jax.Array, embedding: jax.Array, tau: float,
                 target_gradient: bool = False) -> jax.Array:
  """Inan, Khosravi & Socher (2017)'s augmented loss term, per token: KL(ỹ ‖ ŷ) with

      ŷ = softmax(logits / τ),    ỹ = softmax(L · u_y / τ),    u_y = L[y]

  logits[B, T, V], targets[B, T], embedding L[V, D] → KL[B, T] in nats. ỹ puts mass on the words whose
  embeddings are close to the target's. With `target_gradient=False`, ỹ is a constant target (the
  gradient flows only through ŷ)."""
  u = jnp.take(embedding, targets, axis=0)                            # [B, T, D]
  target_logits = jnp.einsum("btd,vd->btv", u, embedding) / tau
  if not target_gradient:
    target_logits = jax.lax.stop_gradient(target_logits)
  log_y_tilde = jax.nn.log_softmax(target_logits.astype(jnp.float32), axis=-1)
  log_y_hat = jax.nn.log_softmax(logits.astype(jnp.float32) / tau, axis=-1)
  return jnp.sum(jnp.exp(log_y_tilde) * (log_y_tilde - log_y_hat), axis=-1)
