"""The gradient update rules of the input, output and tied embeddings (Press & Wolf 2017, Section 3).

For a model that embeds with a matrix U and scores with a matrix V (h = the vector the logits are computed
from, p = softmax(h·Vᵀ + b), o = the target word, i = the input word), Section 3 observes:

  ∂L/∂V_k = (p_k − 1[k = o]) · h              every row of V moves at every step;
  ∂L/∂U_k = 0 for k ≠ i                         only the input word's row of U moves;
  tied, U = V = S:  ∂L/∂S_k = (p_k − 1[k = o]) · h + 1[k = i] · (input-role term)
                                                every row moves, and rows k ≠ i move exactly as the
                                                untied output embedding's would.

This module measures those terms on any wt_jax model that embeds and scores through `tying.WordEmbeddings`
(the LSTM, BD-LSTM and RHN LMs, skip-gram):

    grads = role_gradients(loss_fn, params)         # {'input': [V, D], 'output': [V, D], 'leaves': {...}}
    report = section3_checks(grads, capture, targets, weight, input_ids)   # errors of each closed form

`role_gradients` splits the gradient of the embedding matrices by the *use* that produced it, without
changing the model: it intercepts `WordEmbeddings.embed` and `WordEmbeddings.output_matrix` and adds a zero
[V, D] offset to each use (a lookup of rows of δ_in, a + δ_out on the output matrix); the gradients with
respect to δ_in and δ_out are the input-role and the output-role contributions. In a tied model their sum
is the gradient of the one `embedding` leaf; in an untied one they are the gradients of U and of V.

The closed forms are computed independently from the captured h and logits (`capture`), so each check can
fail: feed it a wrong gradient and its error is large (tests/test_update_rules.py).

Statistics over training: `rows_moved` (which rows a gradient moves) accumulates into per-row update counts
to set against word frequency; the similarity of embeddings over training uses
`wt_jax.analysis.embeddings.pairwise_distance_rho`. `experiments/notebooks/update_rules.ipynb` walks
through all of it.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import wt_jax.losses as losses
import wt_jax.tying as tying


def _embedding_shape(params: Any) -> tuple[int, int]:
  leaves = tying.embedding_leaves(params)
  if not leaves:
    raise ValueError("No `embedding` leaf in these parameters: the model must embed through "
                     "tying.WordEmbeddings.")
  shapes = {tuple(x.shape) for x in leaves.values()}
  if len(shapes) != 1:
    raise ValueError(f"Embedding matrices of different shapes: {shapes}.")
  return shapes.pop()


@contextlib.contextmanager
def _role_offsets(delta_in: jax.Array, delta_out: jax.Array, capture: dict | None = None):
  """Within the block, every WordEmbeddings lookup reads E + δ_in and every output matrix is E + δ_out
  (δ = 0 leaves the model's value unchanged); `capture` receives the h and the logits of `logits`."""

  def interceptor(next_fun, args, kwargs, context):
    if not isinstance(context.module, tying.WordEmbeddings):
      return next_fun(*args, **kwargs)
    out = next_fun(*args, **kwargs)
    if context.method_name == "embed":
      return out + jnp.take(delta_in, args[0], axis=0)
    if context.method_name == "output_matrix":
      return out + delta_out
    if context.method_name == "logits" and capture is not None:
      capture["h"], capture["logits"] = args[0], out
    return out

  with nn.intercept_methods(interceptor):
    yield


def role_gradients(loss_fn: Callable[[Any], jax.Array], params: Any) -> dict:
  """Split the embedding gradient of `loss_fn` at `params` by role.

  loss_fn(params) → scalar; it must run a model whose words go through `tying.WordEmbeddings`.
  Returns {'loss': scalar, 'input': [V, D] (the lookup's contribution), 'output': [V, D] (the output
  layer's), 'leaves': {path: [V, D]} (the gradients of the embedding leaves themselves: one when tied,
  two when untied)}.
  """
  V, D = _embedding_shape(params)
  zeros = jnp.zeros((V, D), jnp.float32)

  def wrapped(p, d_in, d_out):
    with _role_offsets(d_in, d_out):
      return loss_fn(p)

  loss, (g_params, g_in, g_out) = jax.value_and_grad(wrapped, argnums=(0, 1, 2))(params, zeros, zeros)
  return {"loss": loss, "input": g_in, "output": g_out, "leaves": tying.embedding_leaves(g_params)}


def capture_output_layer(loss_fn: Callable[[Any], jax.Array], params: Any) -> dict:
  """Run `loss_fn(params)` once and return {'h': [..., D], 'logits': [..., V]} as the output layer saw
  them (h before a projection, if the model has one)."""
  V, D = _embedding_shape(params)
  capture: dict = {}
  zeros = jnp.zeros((V, D), jnp.float32)
  with _role_offsets(zeros, zeros, capture):
    loss_fn(params)
  if not capture:
    raise ValueError("The loss never called WordEmbeddings.logits (a sampled loss such as negative "
                     "sampling has no full softmax; use the full-softmax variant for Section 3).")
  return capture


def projected(h: jax.Array, params: Any) -> jax.Array:
  """h as the output matrix sees it: h·P + p_b in the projection modes, h otherwise."""
  flat = {jax.tree_util.keystr(k, simple=True, separator="/"): v
          for k, v in jax.tree_util.tree_leaves_with_path(params)}
  kernel = [v for k, v in flat.items() if k.endswith("proj_kernel")]
  if not kernel:
    return h
  h = h @ kernel[0]
  bias = [v for k, v in flat.items() if k.endswith("proj_bias")]
  return h + bias[0] if bias else h


def output_rule(h: jax.Array, logits: jax.Array, targets: jax.Array, weight: float) -> jax.Array:
  """Section 3's closed form for the output embedding: Σ_n w·(p_n − onehot(o_n)) ⊗ h_n.

  h[..., D], logits[..., V], targets[...] int; `weight` is the loss's factor on each token's NLL (1 for a
  summed loss, 1/B for the Zaremba cost Σ_t mean_b). Returns [V, D].
  """
  V = logits.shape[-1]
  p = jax.nn.softmax(logits.reshape(-1, V).astype(jnp.float32), axis=-1)
  err = p - jax.nn.one_hot(targets.reshape(-1), V, dtype=jnp.float32)
  return weight * err.T @ h.reshape(-1, h.shape[-1]).astype(jnp.float32)


def rows_moved(grad: jax.Array, tol: float = 0.0) -> np.ndarray:
  """bool[V]: which rows of a [V, D] gradient are not (within tol) zero."""
  return np.asarray(jnp.max(jnp.abs(grad), axis=-1) > tol)


def _rel_err(a: jax.Array, b: jax.Array) -> float:
  scale = float(jnp.max(jnp.abs(b))) or 1.0
  return float(jnp.max(jnp.abs(a - b))) / scale


def section3_checks(grads: dict, capture: dict, params: Any, targets: jax.Array, weight: float,
                    input_ids: jax.Array, tol: float = 1e-4) -> dict:
  """Check Section 3's statements on gradients split by `role_gradients`.

  capture: from `capture_output_layer` (same params and batch); targets: the words the logits predict;
  weight: the loss's factor on each token's NLL; input_ids: every word id the model looked up.

  Returns a dict of measurements and verdicts:
    output_rule_err   max |∂L/∂V (output role) − Σ w (p − y) ⊗ h| / max |closed form|;
    input_rows_moved  rows of the input-role gradient that move; input_rows_outside  those of them that are
                      not input words (Section 3: 0); output_rows_moved  rows moved by the output role (V);
    tied              whether one leaf holds both roles; then sum_err  |leaf grad − (input + output)| and
                      tied_rows_err  the error of the closed form on the rows that are not input words;
    ok                all verdicts hold at `tol` (relative).
  """
  V = grads["input"].shape[0]
  rule = output_rule(projected(capture["h"], params), capture["logits"], targets, weight)
  moved_in = rows_moved(grads["input"])
  is_input = np.zeros(V, bool)
  is_input[np.unique(np.asarray(input_ids).reshape(-1))] = True
  out = {
      "output_rule_err": _rel_err(grads["output"], rule),
      "input_rows_moved": int(moved_in.sum()),
      "input_rows_outside": int((moved_in & ~is_input).sum()),
      "output_rows_moved": int(rows_moved(grads["output"]).sum()),
      "input_words": int(is_input.sum()),
      "vocab": V,
  }
  leaves = grads["leaves"]
  out["tied"] = len(leaves) == 1
  ok = out["output_rule_err"] < tol and out["input_rows_outside"] == 0
  if out["tied"]:
    (leaf,) = leaves.values()
    out["sum_err"] = _rel_err(leaf, grads["input"] + grads["output"])
    others = jnp.asarray(~is_input)
    out["tied_rows_err"] = _rel_err(jnp.where(others[:, None], leaf, 0.0), jnp.where(others[:, None], rule, 0.0))
    out["tied_rows_moved"] = int(rows_moved(leaf).sum())
    ok = ok and out["sum_err"] < tol and out["tied_rows_err"] < tol
  ok = ok and all(bool(np.all(np.isfinite(np.asarray(g)))) for g in (grads["input"], grads["output"]))
  out["ok"] = bool(ok)
  return out


def lm_loss(model: nn.Module, x: jax.Array, y: jax.Array, carry: Any = None) -> Callable[[Any], jax.Array]:
  """loss_fn(params) for a wt_jax language model on one window: the training cost Σ_t mean_b NLL (dropout
  off, no penalties: they do not touch the embeddings). x, y: [B, T]. Its per-token weight is 1/B."""

  if carry is None:
    carry = model.initial_carry(x.shape[0])

  def loss_fn(params):
    logits, _ = model.apply({"params": params}, x, carry, train=False)
    return losses.zaremba_cost(losses.token_nll(logits, y))

  return loss_fn
