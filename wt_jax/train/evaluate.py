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

from wt_jax import losses, models, parallel
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


def evaluate(model, eval_window, params, stream: np.ndarray, batch_size: int, bptt: int,
             drop_remainder: bool, dp: parallel.DataParallel | None = None) -> dict:
  """Perplexity of `params` on a token stream, state carried across windows. Returns {'ppl', 'nll', 'tokens'}.

  The whole stream is one compiled call (`lax.scan` over its windows, each `eval_window`): one dispatch and
  one transfer per evaluation, not one per window (on an accelerator, hundreds of host round trips for the
  batch-1 test). With `dp` the streams are split over the devices when batch_size divides by their number;
  otherwise (e.g. the batch-1 test stream) every device computes the whole batch."""
  w = batching.lm_windows(stream, batch_size, bptt, drop_remainder=drop_remainder)
  place = _placer(dp, batch_size)
  carry = place(model.initial_carry(batch_size), models.CARRY_BATCH_AXIS)
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


def test_perplexities(config, model, eval_window, params, test_stream: np.ndarray, mc_key: jax.Array,
                      dp: parallel.DataParallel | None = None) -> dict:
  """The test numbers a run reports for `params` (see the module docstring): {'test_ppl' (batch 1),
  'test_ppl_batched', 'test_protocol', 'eval_dropout', and 'test_ppl_mc' with MC samples}."""
  B, T = config.eval_batch_size, config.bptt
  batched = evaluate(model, eval_window, params, test_stream, B, T, drop_remainder=True, dp=dp)
  single = evaluate(model, eval_window, params, test_stream, 1, config.test_window, drop_remainder=False,
                    dp=dp)
  out = {"test_ppl": single["ppl"], "test_ppl_batched": batched["ppl"],
         "test_protocol": ("test_ppl: one stream (batch 1), all N-1 targets, as the reference reports it "
                           f"(the README's tables use it); test_ppl_batched: {B} streams x {T}-step windows, "
                           "tail dropped"),
         "eval_dropout": "off (deterministic)"}
  if config.eval_mc_samples:
    mc = evaluate_mc(model, params, test_stream, 1, config.test_window, config.eval_mc_samples, mc_key, dp)
    out["test_ppl_mc"] = mc["ppl"]
    out["eval_dropout"] += f"; test_ppl_mc: MC dropout, {config.eval_mc_samples} samples, batch 1"
  return out
