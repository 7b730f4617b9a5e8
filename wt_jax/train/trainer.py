"""The trainer skeleton every task shares (language models, NMT, skip-gram).

    run(task, config, workdir) → results dict (also <workdir>/results.json)

A task (`Task`) says what is trained: its initial state, the batches of an epoch, its jit-compiled step, its
validation and its final evaluation. The skeleton does the rest, once for every task:

- the step loop over epochs, with checkpoints of the whole state at epoch ends (every
  `config.checkpoint_every_epochs`-th; 0: the final one only, the best state then held in device memory) and
  every `config.checkpoint_every_steps` (orbax, `<workdir>/checkpoints/last`), the best by the task's
  validation metric (`checkpoints/best`), and resume from the last checkpoint in the middle of an epoch;
- the running sums of the step's metrics (on device) and the non-finite policy: a NaN or infinite training
  sum or validation metric stops the run with `NonFiniteLossError` before anything is saved, so the last
  finite checkpoint survives;
- SIGINT and SIGTERM (a preempted machine, a scheduler, `timeout`) finish the current step, save `last` and
  stop with `Interrupted`: the same command resumes;
- progress lines every `config.log_every` steps and at least every `LOG_EVERY_S` seconds; metrics.jsonl
  (and TensorBoard events) written by process 0 only; `config.profile_steps` traced with jax.profiler;
- results.json with the keys every task shares (`common_results`) and the task's own; no NaN or inf in any
  JSON file (null instead);
- a lock on the workdir (`runtime.workdir_lock`), and a fall-back to the previous checkpoint when the newest
  cannot be read (`Checkpoints.restore_intact`). The workdir may be a bucket (`etils.epath`);
- a folder that describes itself: at the first start `run.json` (the whole config, command line, code commit,
  library versions, host) and the task's own files (`write_run_files`, e.g. an LM's vocab.txt); a resume
  with a config that differs outside the run-length and reporting keys stops with one line naming them
  (`runtime.check_resume`), and every resume is appended to run.json.
"""
from __future__ import annotations

import math
import os
import signal
import time
from typing import Any, Iterator, Protocol

import jax
import jax.numpy as jnp
from absl import logging
from etils import epath

from wt_jax import parallel
from wt_jax.train import metrics as metrics_lib
from wt_jax.train.checkpoint import Checkpoints
from wt_jax.train.runtime import WorkdirBusyError  # noqa: F401  (raised by `run`: part of its interface)
from wt_jax.train.runtime import ConfigChangedError  # noqa: F401  (raised by `run`: part of its interface)
from wt_jax.train.runtime import (check_resume, deferred_signals, describe_run, host, is_local, versions,
                                  workdir_lock, write_json)

LOG_EVERY_S = 30.0  # a progress line at least this often, whatever log_every is
RUN_FILE = "run.json"  # the run's config, command, code and machine (runtime.describe_run), and its resumes


class NonFiniteLossError(FloatingPointError):
  """The training loss (or a validation metric) became NaN or infinite."""


class Interrupted(KeyboardInterrupt):
  """SIGINT or SIGTERM arrived; `last` was saved at the step reached."""


class Task(Protocol):
  """What the skeleton needs to know about a task. `state` is a pytree with at least 'params' and 'step'."""

  num_epochs: int
  steps_per_epoch: int  # nominal (progress lines); an epoch ends when `batches` ends
  max_steps: int  # > 0: stop after this many steps (smoke runs)
  tokens_per_step: int | None  # for the tokens/s of progress lines (None: steps/s only)
  selection: tuple[str, str] | None  # (validation metric, 'min' | 'max') that picks `best`; None: no best

  def init_state(self) -> Any: ...
  def start_epoch(self, state: Any, epoch: int) -> Any: ...  # e.g. reset a recurrent carry
  def batches(self, epoch: int, start: int) -> Iterator[tuple[Any, int]]: ...  # (batch, steps it takes)
  def train_step(self, state: Any, batch: Any) -> tuple[Any, dict]: ...  # → (state, sums of this step)
  def train_metrics(self, sums: dict, step: int) -> dict: ...  # the epoch's sums after `step` → a progress line
  def validate(self, state: Any, epoch: int) -> dict: ...
  def final(self, state: Any, best_state: Any | None, meta: dict, sums: dict) -> dict: ...  # task results


def run_keys(seed: int) -> tuple[jax.Array, jax.Array]:
  """(init key, step key) of a run with this seed: the initial parameters come from the first, every
  step's randomness (dropout, negatives) from the second folded with the step number."""
  init_key, step_key = jax.random.split(jax.random.key(seed))
  return init_key, step_key


class _NoWriter:
  """Stands in for the metrics writer in processes other than 0."""

  def write(self, **record):
    pass

  def flush(self):
    pass

  def close(self):
    pass


class _Profiler:
  """Traces `steps` train steps with `jax.profiler` into `directory` (TensorBoard's profile plugin or
  Perfetto read it), starting after the first step of the process, so compilation is not in the trace."""

  def __init__(self, directory: epath.Path, steps: int):
    self.directory, self.steps, self.left, self.on = directory, steps, steps, False

  def after_step(self, state) -> None:
    if self.left <= 0:
      return
    if not self.on:
      jax.block_until_ready(state)
      jax.profiler.start_trace(str(self.directory))
      self.on = True
      return
    self.left -= 1
    if self.left == 0:
      jax.block_until_ready(state)
      jax.profiler.stop_trace()
      self.on = False
      logging.info("Wrote a profile of %d steps to %s.", self.steps, self.directory)

  def close(self) -> None:
    if self.on:
      jax.profiler.stop_trace()
      self.on = False


def _add(a, b):
  return jax.tree_util.tree_map(jnp.add, a, b)


_add_jit = jax.jit(_add, donate_argnums=(0,))


def _better(value: float, best: float | None, mode: str) -> bool:
  return best is None or (value < best if mode == "min" else value > best)


def run(task: Task, config, workdir: str | os.PathLike) -> dict:
  """Train `task` under `workdir` (resuming from its last checkpoint), then evaluate; see the module doc.
  `workdir` is any path `etils.epath` (orbax's path library) reads: a local folder or a bucket (gs://...)."""
  workdir = epath.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  with workdir_lock(workdir):
    return _run(task, config, workdir)


def _run(task: Task, config, workdir: epath.Path) -> dict:
  t_start = time.time()
  run_versions = versions()  # taken now: the code this process runs, even if the checkout changes later
  ckpts = Checkpoints(workdir / "checkpoints")
  writer = (metrics_lib.MetricsWriter(workdir / "metrics.jsonl", workdir) if parallel.is_writer()
            else _NoWriter())
  state = task.init_state()
  meta = {"config": config.to_dict(), "epoch": 1, "pos": 0, "history": [], "epoch_sums": None, "best": None,
          "best_epoch": None, "train_s": 0.0, "wall_s": 0.0}
  resumed_from = None
  restored = ckpts.restore_intact(state)
  if restored is not None:
    state, meta, kind, resumed_from = restored
    logging.info("Resumed from %s at step %d (epoch %d).", ckpts.directory / kind, resumed_from, meta["epoch"])
    if parallel.is_writer():
      check_resume(workdir / RUN_FILE, config, resumed_from)
  elif parallel.is_writer():  # a first start: the folder describes itself
    write_json(workdir / RUN_FILE, describe_run(config, run_versions))
    if hasattr(task, "write_run_files"):
      task.write_run_files(workdir)
  step, max_steps = int(state["step"]), task.max_steps
  wall_before = meta["wall_s"]
  # The epoch's running sums: `sums` on device since this process started the epoch (or resumed), `base`
  # on the host from before a resume.
  sums, base = None, meta["epoch_sums"]
  clock = {"t0": time.time(), "step0": step, "last_line": None, "written": None}
  metric, mode = task.selection or (None, "min")
  profiler = _Profiler(workdir / "profile", config.profile_steps if is_local(workdir) else 0)
  if config.profile_steps and not is_local(workdir):
    logging.warning("profile_steps: traces are written to local folders only; give a local --workdir.")
  done = lambda: meta["epoch"] > task.num_epochs or (max_steps and step >= max_steps)
  every_epochs = config.get("checkpoint_every_epochs", 1)
  kept_best = None  # with checkpoint_every_epochs = 0: the best state, on the devices

  def epoch_sums() -> dict:
    """The epoch's sums so far, on the host; raises NonFiniteLossError if any is not finite."""
    now = {} if sums is None else {k: float(v) for k, v in jax.device_get(sums).items()}
    before = base or {}
    total = {k: before.get(k, 0.0) + now.get(k, 0.0) for k in {**before, **now}}
    bad = [k for k, v in total.items() if not math.isfinite(v)]
    if bad:
      raise NonFiniteLossError(
          f"The training {bad[0]} became non-finite before step {step} (epoch {meta['epoch']}); stopped "
          f"without saving, the last good checkpoint (step {ckpts.latest_step()}) is kept in "
          f"{ckpts.directory}. Try a lower learning rate or clip norm.")
    return total

  def tick() -> float:
    """Close the current stretch of training time; returns its steps/s."""
    now = time.time()
    dt = max(now - clock["t0"], 1e-9)
    meta["train_s"] += dt
    rate = (step - clock["step0"]) / dt
    clock.update(t0=now, step0=step)
    return rate

  def checked_metrics() -> tuple[dict, dict]:
    """(the epoch's sums, what they show), both finite, or NonFiniteLossError."""
    sums_now = epoch_sums()
    shown = task.train_metrics(sums_now, step)
    bad = [k for k, v in shown.items() if not math.isfinite(v)]
    if bad:  # e.g. a perplexity that overflowed although the summed NLL is still finite
      raise NonFiniteLossError(
          f"The training {bad[0]} is {shown[bad[0]]} at step {step} (epoch {meta['epoch']}): the model "
          f"diverged. Stopped without saving; the last good checkpoint (step {ckpts.latest_step()}) is kept "
          f"in {ckpts.directory}.")
    return sums_now, shown

  def save(kind: str) -> None:
    meta.update(epoch_sums=checked_metrics()[0], wall_s=wall_before + time.time() - t_start)
    ckpts.save(kind, step, state, meta)
    writer.flush()

  def progress(write: bool) -> None:
    shown = checked_metrics()[1]
    rate = tick()
    speed = {"steps_per_s": rate}
    if task.tokens_per_step:
      speed["tokens_per_s"] = rate * task.tokens_per_step
    eta = ((max_steps or task.num_epochs * task.steps_per_epoch) - step) / max(rate, 1e-9)
    logging.info("epoch %d step %d (%.0f%% of epoch) %s  %s  ETA %.1f min", meta["epoch"], step,
                 100 * meta["pos"] / task.steps_per_epoch, "  ".join(f"{k} {v:.4g}" for k, v in shown.items()),
                 "  ".join(f"{v:.3g} {k.replace('_per_s', '/s')}" for k, v in speed.items()), eta / 60)
    clock["last_line"] = time.time()
    if write:
      clock["written"] = step
      writer.write(kind="train", step=step, epoch=meta["epoch"], **shown, **speed)

  with deferred_signals() as interrupted:
    while not done():
      epoch = meta["epoch"]
      if meta["pos"] == 0:
        state, sums, base = task.start_epoch(state, epoch), None, None
      for batch, k in task.batches(epoch, meta["pos"]):
        state, step_sums = task.train_step(state, batch)
        profiler.after_step(state)
        sums = step_sums if sums is None else _add_jit(sums, step_sums)
        before, step = step, step + k
        meta["pos"] += k
        if interrupted.is_set():  # keep what was trained since the last checkpoint, then stop
          tick()
          save("last")
          name = signal.Signals(getattr(interrupted, "signum", signal.SIGINT)).name
          raise Interrupted(f"Interrupted at step {step} by {name}; saved a checkpoint in "
                            f"{ckpts.directory / 'last'}. Re-run the same command to resume.")
        crossed = before // config.log_every != step // config.log_every
        if crossed or clock["last_line"] is None or time.time() - clock["last_line"] > LOG_EVERY_S:
          progress(write=crossed)  # (the first line shows that the step compiled; then by steps or time)
        if max_steps and step >= max_steps:
          if clock["written"] != step:
            progress(write=True)
          break
        every = config.checkpoint_every_steps
        if every and before // every != step // every:
          tick()
          save("last")
          clock.update(t0=time.time(), step0=step)
      else:  # the epoch's batches are done
        if clock["written"] != step:
          progress(write=True)
        record = {"epoch": epoch, "step": step, **task.train_metrics(epoch_sums(), step)}
        t0 = time.time()
        record.update(task.validate(state, epoch))
        logging.info("epoch %d done: %s (eval %.1fs)", epoch, ", ".join(
            f"{k} {v:.4g}" for k, v in record.items() if isinstance(v, float)), time.time() - t0)
        bad = [k for k, v in record.items() if isinstance(v, float) and not math.isfinite(v)]
        if bad:
          raise NonFiniteLossError(
              f"{bad[0]} is {record[bad[0]]} after epoch {epoch}: the model diverged. Stopped without saving; "
              f"the last good checkpoint (step {ckpts.latest_step()}) is kept in {ckpts.directory}.")
        record["train_s"] = meta["train_s"]
        writer.write(kind="epoch", **record)
        meta["history"].append(record)
        is_best = metric is not None and _better(record[metric], meta["best"], mode)
        if is_best:
          meta.update(best=record[metric], best_epoch=epoch)
        meta.update(epoch=epoch + 1, pos=0)
        if every_epochs and (epoch % every_epochs == 0 or done()):
          save("last")
          if is_best:
            save("best")
        elif is_best:  # checkpoint_every_epochs = 0: the best state stays in device memory
          kept_best = jax.tree_util.tree_map(jnp.copy, state)
        clock.update(t0=time.time(), step0=step)
        continue
      break  # max_steps inside an epoch

  profiler.close()
  final_sums = epoch_sums()
  if ckpts.latest_step() != step:  # stopped mid-epoch: keep the final state too
    save("last")
  best_state = kept_best
  if best_state is None and metric is not None and ckpts.latest_step("best") is not None:
    best_state = ckpts.restore("best", state)[0]
  results = common_results(config, state, meta, task, t_start, wall_before, resumed_from, run_versions)
  results.update(task.final(state, best_state, meta, final_sums))
  if parallel.is_writer():
    write_json(workdir / "results.json", results)
    if config.plot:
      metrics_lib.plot_curves(workdir / "metrics.jsonl", workdir / "curves.png", title=config.name)
  ckpts.close()
  writer.close()
  return results


def common_results(config, state, meta, task, t_start, wall_before, resumed_from, run_versions) -> dict:
  """The keys every task's results.json has (the task adds its own)."""
  dp_devices = getattr(task, "num_devices", jax.device_count())
  return {
      "config": config.name,
      "num_params": int(sum(x.size for x in jax.tree_util.tree_leaves(state["params"]))),
      "steps": int(state["step"]),
      "steps_per_epoch": task.steps_per_epoch,
      "epochs": len(meta["history"]) + meta["pos"] / task.steps_per_epoch,  # finished + the fraction begun
      "history": meta["history"],
      "best_metric": task.selection[0] if task.selection else None,
      "best_epoch": meta["best_epoch"],
      "train_s": meta["train_s"],
      "wall_s": wall_before + time.time() - t_start,
      "resumed_from_step": resumed_from,
      "seed": config.seed,
      "versions": run_versions,
      "host": host(),
      "devices": [str(d) for d in jax.devices()],
      "device_kind": jax.devices()[0].device_kind,  # e.g. "NVIDIA H100 80GB HBM3", "TPU v5 lite", "cpu"
      "num_devices": dp_devices,
      "num_processes": jax.process_count(),
  }
