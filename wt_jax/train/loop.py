"""The one training loop shared by every language model.

    fit(config, corpus, workdir) → results dict (also written to <workdir>/results.json)

A model plugs in through `wt_jax.models.build(config)` (see the interface in `wt_jax.models`); the loop never
looks at its name. The train step is one `jax.jit`-compiled function: forward over a [B, T] window (the
model scans over time), the reference cost Σ_t mean_b NLL + Σ penalties / B (`wt_jax.losses`), gradients,
optax update (clip, SGD with the Zaremba schedule). The recurrent state is carried across windows and reset
at the start of each epoch.

Evaluation: validation every epoch, batched (config.eval_batch_size streams, the reference's windows); at the
end the test set both batched and as one stream (batch 1, every one of the N − 1 targets, as the reference
reports it). Penalties never enter a perplexity.

Robustness: orbax checkpoints every epoch (and every `checkpoint_every_steps`) plus the best by validation
perplexity; a killed run resumes from its last checkpoint (the recurrent state, position and dropout keys
are restored, so it ends with the same numbers); a non-finite loss stops the run with a message before
anything is saved, so the last good checkpoint survives.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import platform
import signal
import subprocess
import threading
import time
from pathlib import Path

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging

from wt_jax import losses, models, parallel, tying
from wt_jax.data import batching
from wt_jax.train import metrics as metrics_lib
from wt_jax.train import optim
from wt_jax.train.checkpoint import Checkpoints


class NonFiniteLossError(FloatingPointError):
  """The training loss became NaN or infinite."""


def run_keys(seed: int) -> tuple[jax.Array, jax.Array]:
  """(init key, dropout key) of a run with this seed: `fit` initialises the parameters from the first, so
  `init_params(model, run_keys(seed)[0], B, T)` rebuilds a run's initial parameters (analyses of ΔW)."""
  init_key, dropout_key = jax.random.split(jax.random.key(seed))
  return init_key, dropout_key


def init_params(model, rng: jax.Array, batch_size: int, bptt: int, embedding_row_norm: float = 0.0):
  """The model's parameter pytree (only the 'params' collection); with `embedding_row_norm` > 0 the input
  embedding's rows rescaled to that norm (`tying.constrain_embedding_rows`, as `fit` starts from)."""
  x = jnp.zeros((batch_size, bptt), jnp.int32)
  variables = model.init(rng, x, model.initial_carry(batch_size), train=False)
  return tying.constrain_embedding_rows(variables["params"], embedding_row_norm)


def augmented_loss_settings(config) -> dict | None:
  """Inan et al.'s augmented loss from the config (`al_*` fields), or None when it is off (al_gamma = 0)."""
  gamma = config.get("al_gamma", 0.0)
  if not gamma:
    return None
  if config.al_embedding not in ("input", "output"):
    raise ValueError(f"Unknown al_embedding {config.al_embedding!r}; expected 'input' (Inan's L) or 'output'.")
  if config.al_tau <= 0:
    raise ValueError(f"al_tau must be positive, not {config.al_tau}.")
  ce_weight = config.get("al_ce_weight", 1.0)
  if not 0.0 <= ce_weight:
    raise ValueError(f"al_ce_weight must be ≥ 0, not {ce_weight}.")
  return {"alpha": gamma * config.al_tau, "tau": config.al_tau, "embedding": config.al_embedding,
          "target_gradient": bool(config.al_target_gradient), "ce_weight": ce_weight}


def _al_matrix(params, which: str) -> jax.Array:
  """The V×D matrix that builds the augmented loss's target: the input embedding, or the output one
  (the same leaf when tied)."""
  words = params["words"]
  return words["out_embedding"] if which == "output" and "out_embedding" in words else words["embedding"]


def make_train_step(model, tx: optax.GradientTransformation, dropout_key: jax.Array, l2_on_loss: float = 0.0,
                    dp: parallel.DataParallel | None = None, augmented: dict | None = None,
                    embedding_row_norm: float = 0.0):
  """Returns step(state, carry, acc, x[B,T], y[B,T]) → (state, carry, acc, norms), jit-compiled.

  With `dp`, the step is compiled for that mesh: x, y and the carry sharded along the batch, the state,
  acc and norms replicated (pass arrays placed by `dp`). The cost is written for the global batch, so the
  gradient equals the single-device one (XLA adds the all-reduce).

  The cost is Σ_t mean_b NLL + Σ penalties / B + l2_on_loss·½‖θ‖² (the last is the RHN code's weight decay;
  decoupled weight decay lives in the optimizer, see `optim.make_optimizer`), plus, with `augmented`
  (`augmented_loss_settings`), α·Σ_t mean_b KL(ỹ‖ŷ) (Inan et al. 2017; `losses.augmented_kl`), the NLL term
  then weighted by its `ce_weight` (1 unless a Section-6.2 sweep mixes the two). Perplexities count the NLL
  only. With `embedding_row_norm` > 0 the input embedding's rows are rescaled to that norm after the update
  (`tying.constrain_embedding_rows`; Inan et al.'s Section 6.2 holds them at 1).

  state: {'params', 'opt_state', 'step'}; acc: running {'nll', 'tokens', 'nonfinite'} sums; norms: this
  step's global L2 norm of the gradient (before clipping) and the norm of the gradient of each embedding
  matrix (one when tied, two when untied), named by their path.
  """

  def loss_fn(params, carry, x, y, key):
    (logits, carry), aux = model.apply({"params": params}, x, carry, train=True,
                                       rngs={"dropout": key}, mutable=[tying.PENALTIES])
    nll = losses.token_nll(logits, y)
    batch = x.shape[0]
    ce = losses.zaremba_cost(nll)
    if augmented and augmented.get("ce_weight", 1.0) != 1.0:
      ce = augmented["ce_weight"] * ce
    cost = ce + losses.total_penalty(aux.get(tying.PENALTIES, {})) / batch
    if augmented:
      kl = losses.augmented_kl(logits, y, _al_matrix(params, augmented["embedding"]), augmented["tau"],
                               augmented["target_gradient"])
      cost = cost + augmented["alpha"] * losses.zaremba_cost(kl)
    if l2_on_loss:
      cost = cost + l2_on_loss * 0.5 * sum(jnp.sum(jnp.square(p)) for p in jax.tree_util.tree_leaves(params))
    return cost, (carry, jnp.sum(nll))

  def step(state, carry, acc, x, y):
    key = jax.random.fold_in(dropout_key, state["step"])
    carry = jax.lax.stop_gradient(carry)
    (_, (carry, nll_sum)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state["params"], carry, x, y, key)
    updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
    params = tying.constrain_embedding_rows(optax.apply_updates(state["params"], updates), embedding_row_norm)
    acc = {"nll": acc["nll"] + nll_sum, "tokens": acc["tokens"] + y.size,
           "nonfinite": acc["nonfinite"] + (~jnp.isfinite(nll_sum)).astype(jnp.int32)}
    # (norms of params and updates cost ~15% of a small-model step here: the loop takes the params' norm
    # only when it logs)
    norms = {"grad": optax.tree.norm(grads)}
    for name, g in tying.embedding_leaves(grads).items():
      norms[f"grad/{name}"] = jnp.linalg.norm(g)
    state = {"params": params, "opt_state": opt_state, "step": state["step"] + 1}
    return state, carry, acc, norms

  if dp is None:
    return jax.jit(step, donate_argnums=(0, 1, 2))
  rep, rows, carry_rows = dp.replicated, dp.batch_sharding(0), dp.batch_sharding(models.CARRY_BATCH_AXIS)
  return jax.jit(step, donate_argnums=(0, 1, 2), in_shardings=(rep, carry_rows, rep, rows, rows),
                 out_shardings=(rep, carry_rows, rep, rep))


def train_step_for(config, model, tx: optax.GradientTransformation, dropout_key: jax.Array,
                   dp: parallel.DataParallel | None = None):
  """`make_train_step` with every cost term `config` asks for (weight decay on the loss, the augmented
  loss): the step `fit` trains with, and the one `experiments.bench` times."""
  return make_train_step(model, tx, dropout_key, optim.weight_decay_on_loss(config), dp,
                         augmented_loss_settings(config), config.get("embedding_row_norm", 0.0))


def make_eval_window(model):
  """Returns f(params, carry, x, y, mask) → (Σ mask·NLL, carry), jit-compiled; dropout off, no penalties.
  (Sharding follows the inputs: `evaluate` places them.)"""

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


def evaluate(model, eval_window, params, stream: np.ndarray, batch_size: int, bptt: int,
             drop_remainder: bool, dp: parallel.DataParallel | None = None) -> dict:
  """Perplexity of `params` on a token stream, state carried across windows. Returns {'ppl', 'nll', 'tokens'}.

  With `dp` the streams are split over the devices when batch_size divides by their number; otherwise
  (e.g. the batch-1 test stream) every device computes the whole batch."""
  w = batching.lm_windows(stream, batch_size, bptt, drop_remainder=drop_remainder)
  place = _placer(dp, batch_size)
  carry = place(model.initial_carry(batch_size), models.CARRY_BATCH_AXIS)
  total = 0.0
  for i in range(len(w)):
    nll, carry = eval_window(params, carry, *place((w.x[i], w.y[i], w.mask[i])))
    if dp is not None and dp.num_devices > 1:
      # Wait for each window: with several (simulated) CPU devices, a long queue of asynchronously
      # dispatched windows deadlocked in XLA's collective rendezvous (BUILD_NOTES §7).
      nll = jax.block_until_ready(nll)
    total = total + nll
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


@contextlib.contextmanager
def _deferred_sigint():
  """Turn the first Ctrl-C into a flag the loop checks between steps (a second one interrupts at once), so
  an interrupted run can save a consistent checkpoint. Outside the main thread this does nothing."""
  flag = threading.Event()
  if threading.current_thread() is not threading.main_thread():
    yield flag
    return
  previous = signal.getsignal(signal.SIGINT)

  def handler(signum, frame):
    flag.set()
    signal.signal(signal.SIGINT, previous)

  signal.signal(signal.SIGINT, handler)
  try:
    yield flag
  finally:
    signal.signal(signal.SIGINT, previous)


def perplexity(nll_sum: float, tokens: int) -> float:
  """exp(mean NLL), inf rather than an OverflowError for a diverged model."""
  mean = nll_sum / max(tokens, 1)
  return math.exp(mean) if mean < 700 else float("inf")


def _initial_state(model, tx, rng, batch_size, bptt, embedding_row_norm=0.0):
  params = init_params(model, rng, batch_size, bptt, embedding_row_norm)
  return {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32)}


class _NoWriter:
  """Stands in for the metrics writer in processes other than 0."""

  def write(self, **record):
    pass


def _zero_acc():
  return {"nll": jnp.zeros((), jnp.float32), "tokens": jnp.zeros((), jnp.int32),
          "nonfinite": jnp.zeros((), jnp.int32)}


def _code_revision() -> str | None:
  """The git commit of the wt_jax checkout this runs from (suffix "+dirty" with uncommitted changes)."""
  src = Path(__file__).resolve().parents[2]
  try:
    run = lambda *a: subprocess.run(["git", "-C", str(src), *a], capture_output=True, text=True,
                                    timeout=10, check=True).stdout.strip()
    commit = run("rev-parse", "HEAD")
    dirty = run("status", "--porcelain", "--untracked-files=no", "--", "wt_jax", "experiments", "configs")
  except (OSError, subprocess.SubprocessError):
    return None  # not a git checkout (e.g. an installed wheel) or no git binary
  return commit + ("+dirty" if dirty else "")


def _host() -> dict:
  """What the run ran on: CPU model and core count (for reports), platform of the JAX devices."""
  cpu = platform.processor() or platform.machine()
  try:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
      if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip()
        break
  except OSError:
    pass
  return {"cpu": cpu, "cpu_count": os.cpu_count(), "platform": jax.default_backend()}


def _versions() -> dict:
  return {"jax": jax.__version__, "flax": flax.__version__, "optax": optax.__version__,
          "wt_jax_commit": _code_revision()}


def fit(config, corpus, workdir: str | Path) -> dict:
  """Train `config` on `corpus` (train/valid/test streams), writing everything under `workdir`."""
  t_start = time.time()
  workdir = Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  if config.test_params not in ("final", "best"):
    raise ValueError(f"Unknown test_params {config.test_params!r}; expected 'final' or 'best'.")
  if corpus.vocab_size != config.vocab_size:
    raise ValueError(f"config.vocab_size={config.vocab_size} but the corpus has {corpus.vocab_size} "
                     f"types; set --config.vocab_size={corpus.vocab_size}.")
  model = models.build(config)
  B, T = config.batch_size, config.bptt
  dp = parallel.DataParallel.create(num_devices=config.num_devices)  # the batch is split over the devices
  dp.check_batch(B)
  if config.get("train_max_tokens", 0):  # train on a prefix of the training stream (Inan et al. Section 6.2)
    if config.train_max_tokens < B * T + 1:
      raise ValueError(f"train_max_tokens={config.train_max_tokens} is less than one batch (B·T+1 = "
                       f"{B * T + 1} tokens).")
    corpus = dataclasses.replace(corpus, train=corpus.train[:config.train_max_tokens])
  train = batching.lm_windows(corpus.train, B, T)
  if config.eval_max_tokens:  # smoke runs of big models: evaluate on a prefix of valid and test only
    corpus = dataclasses.replace(corpus, valid=corpus.valid[:config.eval_max_tokens],
                                 test=corpus.test[:config.eval_max_tokens])
  steps_per_epoch = len(train)
  total_steps = steps_per_epoch * config.num_epochs
  if config.max_steps:
    total_steps = min(total_steps, config.max_steps)
  tx = optim.make_optimizer(config, steps_per_epoch)

  init_key, dropout_key = run_keys(config.seed)
  # Built on the devices, replicated (every process computes the same initial parameters from the seed).
  state = jax.jit(lambda k: _initial_state(model, tx, k, B, T, config.get("embedding_row_norm", 0.0)), out_shardings=dp.replicated)(init_key)
  num_params = tying.count_params(state["params"])
  new_carry = lambda: dp.shard_batch(model.initial_carry(B), models.CARRY_BATCH_AXIS)
  carry = new_carry()
  meta = {"config": config.to_dict(), "history": [], "epoch_nll": 0.0, "epoch_tokens": 0,
          "best_valid_ppl": None, "best_epoch": None, "train_s": 0.0, "wall_s": 0.0}

  ckpts = Checkpoints(workdir / "checkpoints")
  writer = metrics_lib.MetricsWriter(workdir / "metrics.jsonl") if parallel.is_writer() else _NoWriter()
  resumed_from = None
  if ckpts.latest_step() is not None:
    restored, meta = ckpts.restore("last", {**state, "carry": carry})
    carry = restored.pop("carry")
    state = restored
    resumed_from = int(state["step"])
    logging.info("Resumed from %s at step %d.", ckpts.directory / "last", resumed_from)
  versions = _versions()  # taken now: the code this process runs, even if the checkout changes later
  logging.info("%s: %s parameters, %d steps/epoch, %d steps in all; %d device(s) in %d process(es); "
               "versions %s.", config.name, f"{num_params:,}", steps_per_epoch, total_steps, dp.num_devices,
               jax.process_count(), versions)

  train_step = train_step_for(config, model, tx, dropout_key, dp)
  eval_window = make_eval_window(model)
  param_norm = jax.jit(optax.tree.norm)
  step = int(state["step"])
  zero_acc = lambda: dp.replicate(_zero_acc())
  acc = zero_acc()
  acc_base = {"nll": meta["epoch_nll"], "tokens": meta["epoch_tokens"]}  # epoch sums before a resume
  clock = {"t0": time.time(), "step0": step}  # the current stretch of pure training
  wall_before = meta["wall_s"]

  def epoch_sums():
    a = jax.device_get(acc)
    if int(a["nonfinite"]):
      raise NonFiniteLossError(
          f"The training loss became non-finite before step {step} (epoch {step // steps_per_epoch + 1}). "
          f"Stopped without saving; the last good checkpoint (step {ckpts.latest_step()}) is kept in "
          f"{ckpts.directory}. Try a lower learning rate or clip norm.")
    return acc_base["nll"] + float(a["nll"]), acc_base["tokens"] + int(a["tokens"])

  def tick() -> float:
    """Close the current stretch of training time; returns its tokens/s."""
    now = time.time()
    dt = max(now - clock["t0"], 1e-9)
    meta["train_s"] += dt
    tps = (step - clock["step0"]) * B * T / dt
    clock.update(t0=now, step0=step)
    return tps

  def save(kind):
    nll, tok = epoch_sums()
    meta.update(epoch_nll=nll, epoch_tokens=tok, wall_s=wall_before + time.time() - t_start)
    ckpts.save(kind, step, {**state, "carry": carry}, meta)

  def restart_clock():
    clock.update(t0=time.time(), step0=step)

  with _deferred_sigint() as interrupted:
    while step < total_steps:
      pos = step % steps_per_epoch
      epoch = step // steps_per_epoch + 1
      if pos == 0:
        carry = new_carry()
        acc, acc_base = zero_acc(), {"nll": 0.0, "tokens": 0}
      state, carry, acc, norms = train_step(state, carry, acc, *dp.shard_batch((train.x[pos], train.y[pos])))
      step += 1
      if interrupted.is_set():  # Ctrl-C: keep what was trained since the last checkpoint, then stop
        tick()
        save("last")
        logging.warning("Interrupted at step %d; saved a checkpoint in %s. Re-run the same command to "
                        "resume.", step, ckpts.directory / "last")
        raise KeyboardInterrupt
      end_of_epoch = step % steps_per_epoch == 0
      if step % config.log_every == 0 or end_of_epoch or step == total_steps:
        nll, tok = epoch_sums()  # syncs with the device
        tps = tick()
        eta = (total_steps - step) * B * T / max(tps, 1e-9)
        lr = optim.epoch_lr(epoch, config.learning_rate, config.lr_decay, config.decay_after_epoch)
        logging.info("epoch %d step %d/%d (%.0f%% of epoch) train ppl %.2f lr %.4g  %.0f tok/s  ETA %.1f min",
                     epoch, step, total_steps, 100 * (pos + 1) / steps_per_epoch, perplexity(nll, tok), lr,
                     tps, eta / 60)
        norms = {**jax.device_get(norms), "param": param_norm(state["params"])}
        writer.write(kind="train", step=step, epoch=epoch, lr=lr, train_ppl=perplexity(nll, tok),
                     tokens_per_s=tps, **{f"norm/{k}": float(v) for k, v in norms.items()})
      if end_of_epoch:
        nll, tok = epoch_sums()
        t0 = time.time()
        valid = evaluate(model, eval_window, state["params"], corpus.valid, config.eval_batch_size, T,
                         drop_remainder=True, dp=dp)
        record = {"epoch": epoch, "step": step, "train_ppl": perplexity(nll, tok), "valid_ppl": valid["ppl"],
                  "lr": optim.epoch_lr(epoch, config.learning_rate, config.lr_decay,
                                       config.decay_after_epoch)}
        logging.info("epoch %d done: train ppl %.2f valid ppl %.2f (eval %.1fs)", epoch,
                     record["train_ppl"], valid["ppl"], time.time() - t0)
        writer.write(kind="epoch", **record)
        meta["history"].append(record)
        is_best = meta["best_valid_ppl"] is None or valid["ppl"] < meta["best_valid_ppl"]
        if is_best:
          meta.update(best_valid_ppl=valid["ppl"], best_epoch=epoch)
        save("last")
        if is_best:
          save("best")
        restart_clock()
      elif config.checkpoint_every_steps and step % config.checkpoint_every_steps == 0:
        tick()
        save("last")
        restart_clock()

  # Final numbers with the final parameters, as the reference reports them.
  history = meta["history"]
  if history and history[-1]["step"] == step:
    train_ppl, valid_ppl = history[-1]["train_ppl"], history[-1]["valid_ppl"]
  else:  # stopped mid-epoch (max_steps): evaluate here
    nll, tok = epoch_sums()
    train_ppl = perplexity(nll, tok) if tok else float("nan")
    valid_ppl = evaluate(model, eval_window, state["params"], corpus.valid, config.eval_batch_size, T,
                         drop_remainder=True, dp=dp)["ppl"]
    if ckpts.latest_step() != step:  # (a mid-epoch checkpoint may have just been written at this step)
      save("last")
  test_params, test_params_kind = state["params"], config.test_params
  if test_params_kind == "best" and ckpts.latest_step("best") is not None:
    test_params = ckpts.restore("best", {**state, "carry": carry})[0]["params"]
    test_params_kind = f"best (epoch {meta['best_epoch']})"
  elif test_params_kind == "best":
    test_params_kind = "final (test_params='best', but no epoch has ended yet)"
  test_batched = evaluate(model, eval_window, test_params, corpus.test, config.eval_batch_size, T,
                          drop_remainder=True, dp=dp)
  test_single = evaluate(model, eval_window, test_params, corpus.test, 1, config.test_window,
                         drop_remainder=False, dp=dp)
  mc_samples = config.eval_mc_samples
  test_mc = (evaluate_mc(model, test_params, corpus.test, 1, config.test_window, mc_samples,
                         jax.random.fold_in(dropout_key, 2**31 - 1), dp) if mc_samples else None)
  results = {
      "config": config.name,
      "dataset": config.get("dataset", "ptb"),
      "model": config.model,
      "tying": config.tying,
      "num_params": num_params,
      "train_ppl": train_ppl,
      "valid_ppl": valid_ppl,
      "test_ppl": test_single["ppl"],
      "test_ppl_batched": test_batched["ppl"],
      "test_protocol": ("test_ppl: one stream (batch 1), all N-1 targets, as the reference reports it "
                        "(the README's tables use it); test_ppl_batched: "
                        f"{config.eval_batch_size} streams x {T}-step windows, tail dropped"),
      "eval_max_tokens": config.eval_max_tokens or None,  # None: the whole valid and test sets
      "train_max_tokens": config.get("train_max_tokens", 0) or None,  # None: the whole training set
      "test_params": test_params_kind,  # 'final' parameters (Zaremba/Press & Wolf) or 'best' by valid (RHN)
      "eval_dropout": "off (deterministic)" + (f"; test_ppl_mc: MC dropout, {mc_samples} samples, batch 1"
                                               if mc_samples else ""),
      **({"test_ppl_mc": test_mc["ppl"]} if test_mc else {}),
      "best_valid_ppl": meta["best_valid_ppl"],
      "best_epoch": meta["best_epoch"],
      "epochs": step / steps_per_epoch,
      "steps": step,
      "steps_per_epoch": steps_per_epoch,
      "wall_s": wall_before + time.time() - t_start,
      "train_s": meta["train_s"],
      "train_tokens_per_s": step * B * T / max(meta["train_s"], 1e-9),
      "resumed_from_step": resumed_from,
      "seed": config.seed,
      "history": history,
      "versions": versions,
      "devices": [str(d) for d in jax.devices()],
      "num_devices": dp.num_devices,
      "num_processes": jax.process_count(),
      "host": _host(),
  }
  if not parallel.is_writer():
    return results
  (workdir / "results.json").write_text(json.dumps(results, indent=2))
  if config.plot:
    metrics_lib.plot_curves(workdir / "metrics.jsonl", workdir / "curves.png", title=config.name)
  ckpts.close()
  logging.info("results: train %.2f valid %.2f test %.2f (batched %.2f); %s",
               train_ppl, valid_ppl, test_single["ppl"], test_batched["ppl"], workdir / "results.json")
  return results
