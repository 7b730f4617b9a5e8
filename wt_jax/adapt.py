"""Test-time adaptation of a trained language model, scored under the run's test protocol (`trained_lm.score_ids`:
one stream at batch 1, the carry kept, every one of the N − 1 targets).

    cache_nll(lm, ids, size, thetas, lambdas)        → Σ NLL[L, G] for every (λ, θ) pair, in one compiled pass
    score_cache(lm, ids, size, theta, lam)            → score_ids' dict with the cache
    gradient_rms(lm, train_ids, batch_size, segment)  → MS, the RMS of the training gradients (the RMS rule's)
    score_dynamic(lm, ids, rule, lr, decay, ms=...)   → score_ids' dict, the parameters adapted as they read

**The continuous cache** (Grave et al. 2017, Section 3): p(w | h_t) = (1 − λ)·p_model(w | h_t) + λ·p_cache(w | h_t),
p_cache(w | h_t) ∝ Σ_{i<t among the last n, x_{i+1} = w} exp(θ·h_tᵀh_i). h is the output layer's input (the model's
`features`: the vector a tied softmax reads); a ring of the last n pairs (h_i, x_{i+1}) is carried across windows,
so memory is O(n·D). Before the first target is stored the model's distribution is used alone.

**Dynamic evaluation** (Krause et al. 2018): the stream in segments of `segment` steps; each is scored with the
current parameters, which then take one step on its mean NLL (dropout off). Rule 'sgd': θ ← θ − η·g + λ(θ₀ − θ);
rule 'rms' (their Section 5): θ ← θ − η·g/(MS + ε) + λ·r⊙(θ₀ − θ), r = min(MS / mean MS, 1/λ), MS the RMS of the
gradients over the training text (`gradient_rms`; "mean MS" is the mean of each leaf's mean) and θ₀ the trained
parameters, which `lm` keeps: the adapted ones are returned only when asked.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

import wt_jax.lm_eval as lm_eval
import wt_jax.losses as losses
import wt_jax.precision as precision
from wt_jax.data import batching
from wt_jax.errors import InputError

RULES = ("sgd", "rms")


def _word_scores(module, z):
  return module.words.scores(z)


def _windows(lm, ids, window):
  """ids[N] → x, y, mask [num_windows, window] at batch 1, the last window padded and masked."""
  ids = np.asarray(ids, np.int32)
  if ids.size < 2:
    raise InputError(f"Scoring needs at least 2 tokens (the first is context only); the text has {ids.size}.")
  w = batching.lm_windows(ids, 1, window, drop_remainder=False)
  return w.x[:, 0], w.y[:, 0], w.mask[:, 0], w.num_tokens


def _check_cache(lm, size: int, thetas, lambdas) -> None:
  if lm.config.model == "nnlm":
    raise InputError("The cache needs the output layer's input h_t, which the NNLM's output (tanh layer plus direct "
                     "connections) does not expose; use another model or dynamic evaluation.")
  if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
    raise InputError(f"The cache size n must be an integer ≥ 1, not {size!r}.")
  if not all(0.0 <= lam <= 1.0 for lam in lambdas):
    raise InputError(f"The cache weight λ must lie in [0, 1], not {list(lambdas)}.")
  if not all(math.isfinite(t) and t >= 0 for t in thetas):
    raise InputError(f"The cache's θ must be a finite number ≥ 0, not {list(thetas)}.")


def _empty_ring(size: int, dim: int):
  """The cache's ring of the last `size` (h_i, x_{i+1}) pairs: keys[size, D], words[size], which are filled[size]."""
  return jnp.zeros((size, dim), jnp.float32), jnp.full((size,), -1, jnp.int32), jnp.zeros((size,), bool)


def _mix(ring, z_TxD, logits_TxV, y_T, m_T, thetas_G, lambdas_L, per_token: bool):
  """One window through the cache (module docstring): (the ring after it, log p of each target under the mixture
  for every (λ, θ) [L, G, T], and with `per_token` the first pair's (log p, rank) of each target, else None). The
  rank is taken among the V words of the same mixture (strictly likelier words: the target never counts itself)."""
  (ring_h, ring_y, ring_ok), size, T = ring, ring[0].shape[0], y_T.shape[0]
  logp_model_T = -losses.token_nll(logits_TxV[None], y_T[None])[0]
  keys, vals, ok = (jnp.concatenate(a) for a in ((ring_h, z_TxD), (ring_y, y_T), (ring_ok, m_T > 0)))
  j, t = jnp.arange(size + T)[None, :], jnp.arange(T)[:, None]
  allowed_TxM = ok[None, :] & (j >= t) & (j < size + t)  # the last n entries before position t
  s_GxTxM = thetas_G[:, None, None] * (z_TxD @ keys.T)[None]
  log_all = jax.nn.logsumexp(jnp.where(allowed_TxM, s_GxTxM, -jnp.inf), axis=-1)
  log_hit = jax.nn.logsumexp(jnp.where(allowed_TxM & (vals[None, :] == y_T[:, None]), s_GxTxM, -jnp.inf), axis=-1)
  used_T = allowed_TxM.any(axis=-1)
  lam = lambdas_L[:, None, None]
  mixed_LxGxT = jnp.logaddexp(jnp.log1p(-lam) + logp_model_T, jnp.log(lam) + (log_hit - log_all)[None])
  mixed_LxGxT = jnp.where(used_T, mixed_LxGxT, logp_model_T)
  out = None
  if per_token:  # the mixture over all V words, for the target's rank
    w_TxM = jnp.where(used_T[:, None], jax.nn.softmax(jnp.where(allowed_TxM, s_GxTxM[0], -jnp.inf), axis=-1), 0.0)
    p_cache_TxV = jax.vmap(lambda w: jnp.zeros(logits_TxV.shape[-1]).at[vals].add(w))(w_TxM)
    l0 = jnp.where(used_T, lambdas_L[0], 0.0)[:, None]
    p_TxV = (1 - l0) * jax.nn.softmax(logits_TxV, axis=-1) + l0 * p_cache_TxV
    p_target_T = jnp.take_along_axis(p_TxV, y_T[:, None], axis=-1)[:, 0]
    out = (mixed_LxGxT[0, 0], 1 + jnp.sum(p_TxV > p_target_T[:, None], axis=-1))
  return (keys[T:], vals[T:], ok[T:]), mixed_LxGxT, out


def _features_and_logits(model, params, x_T, carry):
  """(z[T, D], logits[T, V], carry) of one window at batch 1: the output layer's input and its scores."""
  z_1xTxD, carry = model.apply({"params": params}, x_T[None], carry, train=False, features=True)
  logits_TxV = model.apply({"params": params}, z_1xTxD, method=_word_scores)[0].astype(jnp.float32)
  return z_1xTxD[0].astype(jnp.float32), logits_TxV, carry


@functools.partial(jax.jit, static_argnames=("model", "size", "per_token"))
def _cache_pass(params, xs_NxT, ys_NxT, mask_NxT, thetas_G, lambdas_L, *, model, size, per_token=False):
  """→ (NLL summed per window [N, L, G], per-token (log p, rank) of the first (λ, θ) or None). See the module
  docstring. The windows' sums are added on the host in float64 (`cache_nll`), as the plain protocol does."""
  carry = model.initial_carry(1)
  z_shape = jax.eval_shape(lambda: model.apply({"params": params}, xs_NxT[0][None], carry, features=True))[0]

  def body(acc, window):
    carry, ring = acc
    x_T, y_T, m_T = window
    z_TxD, logits_TxV, carry = _features_and_logits(model, params, x_T, carry)
    ring, mixed_LxGxT, out = _mix(ring, z_TxD, logits_TxV, y_T, m_T, thetas_G, lambdas_L, per_token)
    return (carry, ring), (-jnp.sum(mixed_LxGxT * m_T, axis=-1), out)

  _, (nll_NxLxG, out) = jax.lax.scan(body, (carry, _empty_ring(size, z_shape.shape[-1])), (xs_NxT, ys_NxT, mask_NxT))
  return nll_NxLxG, out


def cache_nll(lm, ids, size: int, thetas, lambdas) -> np.ndarray:
  """Σ NLL (nats) over the N − 1 targets of ids[N] with the cache of the last `size` states, for every λ of
  `lambdas` (rows) and θ of `thetas` (columns): float64[L, G], from one pass of the model."""
  thetas, lambdas = [float(t) for t in np.atleast_1d(thetas)], [float(v) for v in np.atleast_1d(lambdas)]
  _check_cache(lm, size, thetas, lambdas)
  xs, ys, mask, _ = _windows(lm, ids, lm.config.test_window)
  with jax.default_matmul_precision(precision.MATMUL_PRECISIONS[lm.config.get("matmul_precision", "default")]):
    nll, _ = _cache_pass(lm.params, xs, ys, mask, jnp.asarray(thetas, jnp.float32),
                         jnp.asarray(lambdas, jnp.float32), model=lm.model, size=int(size))
  return np.asarray(jax.device_get(nll), np.float64).sum(axis=0)


def score_cache(lm, ids, size: int, theta: float, lam: float, per_token: bool = False) -> dict:
  """`trained_lm.score_ids` of ids[N] with the continuous cache (n = `size`, θ, λ): {'ppl', 'nll', 'tokens',
  'protocol', 'adaptation'}; with `per_token`, 'per_token': [{'token', 'logp', 'rank'}] under the mixture."""
  _check_cache(lm, size, [theta], [lam])
  W = lm.config.test_window
  xs, ys, mask, tokens = _windows(lm, ids, W)
  with jax.default_matmul_precision(precision.MATMUL_PRECISIONS[lm.config.get("matmul_precision", "default")]):
    nll_windows, out = _cache_pass(lm.params, xs, ys, mask, jnp.asarray([theta], jnp.float32),
                                   jnp.asarray([lam], jnp.float32), model=lm.model, size=int(size), per_token=per_token)
  nll = float(np.asarray(jax.device_get(nll_windows), np.float64)[:, 0, 0].sum())
  result = {"ppl": lm_eval.perplexity(nll, tokens), "nll": nll, "tokens": tokens,
            "protocol": f"one stream at batch 1 in windows of {W} (test_window), the carry kept; all N-1 targets",
            "adaptation": {"method": "cache (Grave et al. 2017)", "cache_size": int(size), "theta": theta,
                           "lambda": lam, "key": "the output layer's input h_t"}}
  if per_token:
    result["per_token"] = _per_token(lm, ids, *out)
  return result


def _per_token(lm, ids, logp, rank) -> list[dict]:
  n, words = len(ids) - 1, lm.vocab.decode(np.asarray(ids)[1:])
  logp, rank = np.asarray(logp).reshape(-1)[:n], np.asarray(rank).reshape(-1)[:n]
  return [{"token": t, "logp": float(lp), "rank": int(r)} for t, lp, r in zip(words, logp, rank)]


def _segment_loss(params, carry, x_T, y_T, m_T, model, features: bool):
  """(mean NLL of the segment's real targets, (Σ NLL, logp[T] and rank[T] of the targets, carry, z[T, D] or None,
  logits[T, V])); `features`: read through the output layer's input z, which the cache keys on."""
  if features:
    z_TxD, logits_TxV, carry = _features_and_logits(model, params, x_T, carry)
  else:
    logits_1xTxV, carry = model.apply({"params": params}, x_T[None], carry, train=False)
    z_TxD, logits_TxV = None, logits_1xTxV[0].astype(jnp.float32)
  logp_TxV = jax.nn.log_softmax(logits_TxV)
  target_T = jnp.take_along_axis(logp_TxV, y_T[:, None], axis=-1)[:, 0]
  rank_T = 1 + jnp.sum(logp_TxV > target_T[:, None], axis=-1)
  nll = -jnp.sum(target_T * m_T)
  return nll / jnp.maximum(jnp.sum(m_T), 1.0), (nll, target_T, rank_T, carry, z_TxD, logits_TxV)


@functools.partial(jax.jit, static_argnames=("model",))
def _gradient_squares(params, xs_NxBxT, ys_NxBxT, *, model):
  """Σ over the windows of the squared gradient of each window's mean NLL (dropout off), the carry kept."""

  def loss(p, carry, x, y):
    logits, carry = model.apply({"params": p}, x, carry, train=False)
    return jnp.mean(losses.token_nll(logits, y)), carry

  def body(acc, window):
    carry, sq = acc
    (_, carry), g = jax.value_and_grad(loss, has_aux=True)(params, carry, *window)
    return (jax.lax.stop_gradient(carry), jax.tree_util.tree_map(lambda a, b: a + b * b, sq, g)), None

  zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
  (_, sq), _ = jax.lax.scan(body, (model.initial_carry(xs_NxBxT.shape[1]), zeros), (xs_NxBxT, ys_NxBxT))
  return sq


def gradient_rms(lm, train_ids, batch_size: int = 100, segment: int | None = None, max_batches: int = 0):
  """MS of the RMS rule: √(mean over training windows of g²) per parameter, g the gradient of a window's mean NLL
  ([batch_size, segment] windows of the training stream, `segment` default the run's bptt; the first
  `max_batches` windows when > 0), as Krause et al.'s code collects it."""
  segment = lm.config.bptt if segment is None else segment
  w = batching.lm_windows(train_ids, batch_size, segment)
  n = min(max_batches, len(w)) if max_batches > 0 else len(w)
  with jax.default_matmul_precision(precision.MATMUL_PRECISIONS[lm.config.get("matmul_precision", "default")]):
    sq = _gradient_squares(lm.params, w.x[:n], w.y[:n], model=lm.model)
  return jax.tree_util.tree_map(lambda s: jnp.sqrt(s / n), sq)


@functools.partial(jax.jit, static_argnames=("model", "rms", "size"))
def _dynamic_pass(params0, ms, xs_NxT, ys_NxT, mask_NxT, lr, decay, eps, theta=None, lam=None, *, model, rms,
                  size=0):
  """→ (NLL per segment [N], per-token (logp, rank), adapted parameters). See the module docstring. With a cache
  (`size` > 0, θ, λ) each segment is scored by the cache's mixture, its ring carried across segments, and the step
  is on the model's own NLL. The segments' sums are added on the host in float64 (`score_dynamic`), as the plain
  protocol does."""
  tree = jax.tree_util.tree_map
  if rms:
    leaves = jax.tree_util.tree_leaves(ms)
    mean_ms = sum(jnp.mean(s) for s in leaves) / len(leaves)
    rate = tree(lambda s: jnp.minimum(s / mean_ms, 1.0 / decay), ms)  # (1/0 = inf: no clip without decay)
  ring = None
  if size:
    z = jax.eval_shape(lambda: model.apply({"params": params0}, xs_NxT[0][None], model.initial_carry(1),
                                           features=True))[0]
    ring = _empty_ring(size, z.shape[-1])

  def body(acc, window):
    params, carry, ring = acc
    x_T, y_T, m_T = window
    (_, (nll, logp, rank, carry, z_TxD, logits_TxV)), g = jax.value_and_grad(_segment_loss, has_aux=True)(
        params, carry, *window, model, bool(size))
    if size:  # scored by the mixture; the step stays on the model's NLL
      ring, mixed_1x1xT, (logp, rank) = _mix(ring, z_TxD, logits_TxV, y_T, m_T, theta[None], lam[None], True)
      nll = -jnp.sum(mixed_1x1xT[0, 0] * m_T)
    if rms:
      params = tree(lambda p, p0, g, s, r: p - lr * g / (s + eps) + decay * r * (p0 - p), params, params0, g, ms, rate)
    else:
      params = tree(lambda p, p0, g: p - lr * g + decay * (p0 - p), params, params0, g)
    return (params, jax.lax.stop_gradient(carry), ring), (nll, logp, rank)

  (params, _, _), (nll_N, *out) = jax.lax.scan(body, (params0, model.initial_carry(1), ring),
                                               (xs_NxT, ys_NxT, mask_NxT))
  return nll_N, out, params


def score_dynamic(lm, ids, rule: str, lr: float, decay: float = 0.0, ms=None, segment: int | None = None,
                  eps: float = 2e-5, per_token: bool = False, keep_params: bool = False,
                  cache: tuple[int, float, float] | None = None) -> dict:
  """`trained_lm.score_ids` of ids[N] with dynamic evaluation (`rule` 'sgd' or 'rms', step size `lr`, decay
  toward the trained parameters `decay`, segments of `segment` steps: default the run's bptt; 'rms' needs
  `ms`, from `gradient_rms`). With lr = 0 the parameters never move: the protocol's perplexity (for a recurrent
  model whatever `segment`; a Transformer's context depends on its window). `keep_params`: the adapted
  parameters under 'params' (the run's own are never changed). `cache` (n, θ, λ): the continuous cache too, as
  `score_cache` has it, over the adapted model's states (λ = 0: dynamic evaluation alone; lr = 0: the cache alone)."""
  if rule not in RULES:
    raise InputError(f"Unknown dynamic evaluation rule {rule!r}; expected one of {', '.join(RULES)}.")
  if not (math.isfinite(lr) and lr >= 0 and math.isfinite(decay) and decay >= 0):
    raise InputError(f"The step size and the decay must be finite numbers ≥ 0, not {lr!r} and {decay!r}.")
  if rule == "rms" and ms is None:
    raise InputError("The 'rms' rule needs the RMS of the training gradients (gradient_rms).")
  if not eps > 0:
    raise InputError(f"ε must be > 0, not {eps!r}.")
  segment = lm.config.bptt if segment is None else segment
  if isinstance(segment, bool) or not isinstance(segment, (int, np.integer)) or segment < 1:
    raise InputError(f"The segment length must be an integer ≥ 1, not {segment!r}.")
  if cache is not None:
    _check_cache(lm, cache[0], [cache[1]], [cache[2]])
  xs, ys, mask, tokens = _windows(lm, ids, segment)
  ms = ms if rule == "rms" else jax.tree_util.tree_map(jnp.ones_like, lm.params)
  size, theta, lam = cache if cache is not None else (0, 0.0, 0.0)
  with jax.default_matmul_precision(precision.MATMUL_PRECISIONS[lm.config.get("matmul_precision", "default")]):
    nll_segments, out, params = _dynamic_pass(lm.params, ms, xs, ys, mask, jnp.float32(lr), jnp.float32(decay),
                                              jnp.float32(eps), jnp.float32(theta), jnp.float32(lam),
                                              model=lm.model, rms=rule == "rms", size=int(size))
  nll = float(np.asarray(jax.device_get(nll_segments), np.float64).sum())
  result = {"ppl": lm_eval.perplexity(nll, tokens), "nll": nll, "tokens": tokens,
            "protocol": f"one stream at batch 1 in segments of {segment}, the carry kept; all N-1 targets, each "
                        "scored before the step on its segment",
            "adaptation": {"method": "dynamic evaluation (Krause et al. 2018)" + (" and cache" if cache else ""),
                           "rule": rule, "lr": lr, "decay": decay, "segment": int(segment),
                           **({"epsilon": eps} if rule == "rms" else {}),
                           **({"cache_size": int(size), "theta": theta, "lambda": lam} if cache else {})}}
  if per_token:
    result["per_token"] = _per_token(lm, ids, *out)
  if keep_params:
    result["params"] = params
  return result
