"""Language-model evaluation: perplexity over a token stream with the recurrent state carried across windows.

    evaluate(model, eval_window, params, stream, B, T, ...)   deterministic (dropout off), as every paper
    evaluate_mc(model, params, stream, B, T, samples, key)     Monte-Carlo dropout (Gal 2015)
    test_perplexities(...)                                     the test protocol a run reports

The test protocol (`test_perplexities`): the parameters tested are the final ones (Zaremba et al., Press &
Wolf) or the best by validation perplexity (Zilly et al.'s RHN code), `config.test_params`; the test set is
read once as `eval_batch_size` streams in `bptt` windows (tail dropped) and once as a single stream (batch 1,
every one of the N − 1 targets, as the reference code reports it); with `config.eval_mc_samples` > 0 also
with Monte-Carlo dropout.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

import wt_jax.losses as losses
import wt_jax.models as models
import wt_jax.parallel as parallel
from wt_jax.data import batching


def perplexity(nll_sum: float, tokens: int) -> float:
  """exp(mean NLL); inf rather than an OverflowError for a diverged model."""
  mean = nll_sum / max(tokens, 1)
  return math.exp(mean) if mean < 700 else float("inf")


def make_eval_window(model):
  """Returns f(params, carry, x[B, T], y[B, T], mask[B, T]) → (Σ mask·NLL, carry), jit-compiled; dropout
  off, no penalties. (Sharding follows the inputs: `evaluate` places them.)"""

  @jax.jit
  def f(params, carry, x, y, mask):
    logits, carry = model.apply({"params": params}, x, carry, train=False)
    return jnp.sum(losses.token_nll(logits, y) * mask), carry

  return f


def _placer(dp: parallel.DataParallel | None, batch_size: int):
  """place(tree, axis=0): put an evaluation batch on the devices (`dp.shard_or_replicate`), or leave it
  as it is without `dp`."""
  if dp is None:
    return lambda tree, axis=0: tree
  return lambda tree, axis=0: dp.shard_or_replicate(tree, batch_size, axis)


@functools.partial(jax.jit, static_argnums=(0,))
def _eval_stream(eval_window, params, carry, xs_NxBxT, ys_NxBxT, masks_NxBxT):
  """Every window of a stream in one compiled loop: → (Σ NLL, carry). The sum runs window by window in
  float32, in stream order (as a Python loop over `eval_window` would add them)."""

  def body(acc, window):
    total, carry = acc
    nll, carry = eval_window(params, carry, *window)
    return (total + nll, carry), None

  (total, carry), _ = jax.lax.scan(body, (jnp.zeros((), jnp.float32), carry), (xs_NxBxT, ys_NxBxT, masks_NxBxT))
  return total, carry


@functools.partial(jax.jit, static_argnums=(0,))
def _eval_stream_members(eval_window, params_K, carry_K, xs_NxBxT, ys_NxBxT, masks_NxBxT):
  """`_eval_stream` of K members' parameters (and carries) on one stream, vmapped: → (Σ NLL [K], carry)."""
  one = lambda p, c: _eval_stream(eval_window, p, c, xs_NxBxT, ys_NxBxT, masks_NxBxT)
  return jax.vmap(one)(params_K, carry_K)


def evaluate(model, eval_window, params, stream: np.ndarray, batch_size: int, bptt: int,
             drop_remainder: bool, dp: parallel.DataParallel | None = None, members: int = 0) -> dict:
  """Perplexity of `params` on a token stream, state carried across windows. Returns {'ppl', 'nll', 'tokens'}.

  The whole stream is one compiled call (`lax.scan` over its windows, each `eval_window`): one dispatch and
  one transfer per evaluation, not one per window (on an accelerator, hundreds of host round trips for the
  batch-1 test). With `dp` the streams are split over the devices when batch_size divides by their number;
  otherwise (e.g. the batch-1 test stream) every device computes the whole batch.

  With `members` = K, `params` are K members' (`wt_jax.members`: a leading member axis, placed by `dp`), the
  stream is read by all of them in one program, and 'ppl' and 'nll' are lists of K."""
  w = batching.lm_windows(stream, batch_size, bptt, drop_remainder=drop_remainder)
  place = _placer(dp, batch_size)
  carry = model.initial_carry(batch_size)
  if members:
    carry = jax.tree_util.tree_map(lambda x: np.broadcast_to(x, (members, *x.shape)), carry)
    if dp is not None:
      carry = dp.put(carry, dp.member_sharding(models.CARRY_BATCH_AXIS if dp.divides(batch_size) else None))
    totals, _ = _eval_stream_members(eval_window, params, carry, *place((w.x, w.y, w.mask), 1))
    if dp is not None:  # the members' sums gathered on every device (other processes' members included)
      totals = jax.jit(lambda t: t, out_shardings=dp.replicated)(totals)
    totals = [float(t) for t in jax.device_get(totals)]
    return {"ppl": [perplexity(t, w.num_tokens) for t in totals], "nll": totals, "tokens": w.num_tokens}
  carry = place(carry, models.CARRY_BATCH_AXIS)
  total, _ = _eval_stream(eval_window, params, carry, *place((w.x, w.y, w.mask), 1))
  total = float(total)
  return {"ppl": perplexity(total, w.num_tokens), "nll": total, "tokens": w.num_tokens}


def evaluate_mc(model, params, stream: np.ndarray, batch_size: int, bptt: int, samples: int,
                key: jax.Array, dp: parallel.DataParallel | None = None) -> dict:
  """Monte-Carlo dropout evaluation (Gal 2015; Zilly et al.'s `evaluate_mc`): `samples` passes over the
  stream, each with one dropout draw kept for the whole pass; the per-token probabilities of the targets
  are averaged over the passes before taking logs. Returns {'ppl', 'nll', 'tokens', 'samples'}."""

  @jax.jit
  def window_logp(params, carry, x, y, k):
    logits, carry = model.apply({"params": params}, x, carry, train=True, rngs={"dropout": k})
    return -losses.token_nll(logits, y), carry

  w = batching.lm_windows(stream, batch_size, bptt, drop_remainder=False)
  place = _placer(dp, batch_size)
  xs, ys = place((w.x, w.y), 1)
  per_pass = []
  for k in jax.random.split(key, samples):
    carry, logps = place(model.initial_carry(batch_size), models.CARRY_BATCH_AXIS), []
    for i in range(len(w)):
      logp, carry = window_logp(params, carry, xs[i], ys[i], k)  # the same draw for every window
      logps.append(logp)
    per_pass.append(jnp.stack(logps))
  logp = jax.nn.logsumexp(jnp.stack(per_pass), axis=0) - math.log(samples)  # log of the mean probability
  total = float(-jnp.sum(jnp.where(place(w.mask, 1) > 0, logp, 0.0)))  # (on device: works multi-host)
  return {"ppl": perplexity(total, w.num_tokens), "nll": total, "tokens": w.num_tokens, "samples": samples}


def test_perplexities(config, model, eval_window, params, test_stream: np.ndarray, mc_keys: list,
                      dp: parallel.DataParallel | None = None, group=None) -> list[dict]:
  """The test numbers a run reports for `params` (see the module docstring), one dict per model: {'test_ppl' (batch
  1), 'test_ppl_batched', 'test_protocol', 'eval_dropout', and 'test_ppl_mc' with MC samples}. Without `group`,
  `params` are one model's; with it (`wt_jax.members.Members`) its members' (a leading member axis), the two
  deterministic passes read by all members in one program, MC dropout member by member with each own model.
  `mc_keys`: each model's MC dropout key."""
  B, T = config.eval_batch_size, config.bptt
  K = group.size if group else 0
  each = lambda out: out["ppl"] if K else [out["ppl"]]
  batched = each(evaluate(model, eval_window, params, test_stream, B, T, drop_remainder=True, dp=dp, members=K))
  single = each(evaluate(model, eval_window, params, test_stream, 1, config.test_window, drop_remainder=False,
                          dp=dp, members=K))
  out = [{"test_ppl": s, "test_ppl_batched": b,
          "test_protocol": ("test_ppl: one stream (batch 1), all N-1 targets, as the reference reports it (the README's "
                            f"tables use it); test_ppl_batched: {B} streams x {T}-step windows, tail dropped"),
          "eval_dropout": "off (deterministic)"} for s, b in zip(single, batched)]
  for k, o in enumerate(out if config.eval_mc_samples else []):
    own_model = models.build(group.configs[k]) if K else model
    own_params = jax.tree_util.tree_map(lambda x: x[k], params) if K else params
    mc = evaluate_mc(own_model, own_params, test_stream, 1, config.test_window, config.eval_mc_samples, mc_keys[k],
                     None if K else dp)
    o["test_ppl_mc"] = mc["ppl"]
    o["eval_dropout"] += f"; test_ppl_mc: MC dropout, {config.eval_mc_samples} samples, batch 1"
  return out
