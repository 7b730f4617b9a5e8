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
- results.json with the keys every task shares (`run_results.common_results`) and the task's own; no NaN or
  inf in any JSON file (null instead);
- a lock on the workdir (`lock.workdir_lock`), and a fall-back to the previous checkpoint when the newest
  cannot be read (`Checkpoints.restore_intact`; a checkpoint this user may not read stops the run instead); a
  resumed run whose outputs this user may not write stops before its first step (`runtime.check_writable`).
  The workdir may be a bucket (`etils.epath`);
- a folder that describes itself: at the first start `run.json` (the whole config, command line, code commit,
  library versions, host; `runtime.record_run`) and the task's own files (`write_run_files`, e.g. an LM's
  vocab.txt, checked at each resume); a resume with a config that differs outside the run-length and reporting
  keys stops with one line naming them (`runtime.check_resume`), and every resume is appended to run.json (and
  to each member's);
- members (`wt_jax.members`; a task with `members` = K > 0): one stacked state, K models ("lanes") kept apart —
  each its history, sums, best epoch and folder `<workdir>/members/<k>/` (run.json, metrics, results.json, its
  final and best checkpoints), a member whose numbers turn non-finite frozen instead of the run stopped (it
  stops when all are), and `<workdir>/summary.json` with their mean and sd (`run_results`). A plain run is the
  one-lane case.
"""
from __future__ import annotations

import math
import os
import signal
import time
from typing import Any, Iterator, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from etils import epath

from wt_jax import members as members_lib
from wt_jax import parallel
from wt_jax.data import paths
from wt_jax.errors import InputError
from wt_jax.train import metrics as metrics_lib
from wt_jax.train import run_results
from wt_jax.train.checkpoint import CheckpointMismatchError, CheckpointUnreadableError, Checkpoints
from wt_jax.train.lock import WorkdirBusyError, workdir_lock
from wt_jax.train.runtime import ConfigChangedError  # noqa: F401  (raised by `run`: part of its interface)
from wt_jax.train.runtime import check_writable, deferred_signals, is_local, record_run, versions, write_json

LOG_EVERY_S = 30.0  # a progress line at least this often, whatever log_every is


class NonFiniteLossError(FloatingPointError):
  """The training loss (or a validation metric) became NaN or infinite."""


class Interrupted(KeyboardInterrupt):
  """SIGINT or SIGTERM arrived; `last` was saved at the step reached."""


# What stops a run for a reason its user acts on: bad input (no corpus, a value refused, a resume under another
# config, a checkpoint of another model or one this user may not read), a workdir in use, a diverged or an
# interrupted run (`last` saved: the same command resumes). The entry points print the message as one line and
# exit 1, with no traceback.
STOPS = (Interrupted, NonFiniteLossError, ConfigChangedError, WorkdirBusyError, CheckpointMismatchError,
         CheckpointUnreadableError, paths.DataUnavailableError, InputError)


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


def _add(a, b):
  return jax.tree_util.tree_map(jnp.add, a, b)


_add_jit = jax.jit(_add, donate_argnums=(0,))


def _kept(ckpts: Checkpoints) -> str:
  """What a stopped run leaves: its last good checkpoint, or that it had saved none yet."""
  step = ckpts.latest_step()
  return (f"the last good checkpoint (step {step}) is kept in {ckpts.directory}" if step is not None
          else "no checkpoint had been saved yet")


def _better(value: float, best: float | None, mode: str) -> bool:
  return best is None or (value < best if mode == "min" else value > best)


def run(task: Task, config, workdir: str | os.PathLike) -> dict:
  """Train `task` under `workdir` (resuming from its last checkpoint), then evaluate; see the module doc.
  Returns results.json's dict (members: summary.json's).
  `workdir` is any path `etils.epath` (orbax's path library) reads: a local folder or a bucket (gs://...)."""
  workdir = epath.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  with workdir_lock(workdir):
    lane_dirs = _lane_dirs(task, workdir)
    if parallel.is_writer():
      check_writable([workdir, *lane_dirs])
    writers = [metrics_lib.MetricsWriter(d / "metrics.jsonl", d) if parallel.is_writer() else metrics_lib.NoWriter()
               for d in lane_dirs]
    try:
      return _run(task, config, workdir, lane_dirs, writers)
    finally:  # however the run ends: TensorBoard's queued events reach the disk (left open, tensorboardX closes
      for w in writers:  # them at exit, which Python >= 3.12 refuses if its writer thread never started)
        w.close()


def _lane_dirs(task: Task, workdir: epath.Path) -> list[epath.Path]:
  """Each model's folder, made: the workdir itself, or a members run's `<workdir>/members/<k>/`."""
  K = getattr(task, "members", 0)
  lane_dirs = [workdir] if not K else [workdir / run_results.MEMBERS_DIR / str(k) for k in range(K)]
  if parallel.is_writer():
    for d in lane_dirs:
      d.mkdir(parents=True, exist_ok=True)
  return lane_dirs


def _lane_meta(members: int) -> dict:
  """What the skeleton keeps per model: its per-epoch history, the epoch's sums so far, its best validation
  metric and epoch (and, for a member, the step and reason it diverged)."""
  lane = {"history": [], "epoch_sums": None, "best": None, "best_epoch": None}
  return {**lane, "diverged": None} if members else lane


def _run(task: Task, config, workdir: epath.Path, lane_dirs: list[epath.Path], writers: list) -> dict:
  t_start = time.time()
  run_versions = versions()  # taken now: the code this process runs, even if the checkout changes later
  K = getattr(task, "members", 0)  # > 0: K models with a leading member axis on the state (wt_jax.members)
  ckpts = Checkpoints(workdir / "checkpoints")
  state = task.init_state()
  meta = {"config": config.to_dict(), "epoch": 1, "pos": 0, "train_s": 0.0, "wall_s": 0.0,
          **(_lane_meta(0) if not K else {"members": [_lane_meta(K) for _ in range(K)]})}
  lanes = lambda: [meta] if not K else meta["members"]  # each model's part of `meta`
  names = [task.member_config(k).name for k in range(K)]  # the members' config names (progress lines)
  resumed_from = None
  # (a members run resumes from `last` only: its `best` mixes the members' best epochs)
  restored = ckpts.restore_intact(state, kinds=("last",) if K else ("last", "best"))
  if restored is not None:
    state, meta, kind, resumed_from = restored
    logging.info("Resumed from %s at step %d (epoch %d).", ckpts.directory / kind, resumed_from, meta["epoch"])
  if parallel.is_writer():  # the folder (and each member's) describes itself; a resume is checked against it
    members = [(d, task.member_config(k)) for k, d in enumerate(lane_dirs if K else [])]
    record_run(workdir, config, run_versions, members, resumed_from, meta.get("config"))
    for d in lane_dirs if hasattr(task, "write_run_files") else []:  # (at a resume: checked; a lost one rewritten)
      task.write_run_files(d, resumed=restored is not None)
  step, max_steps = int(np.max(jax.device_get(state["step"]))), task.max_steps
  wall_before = meta["wall_s"]
  # The epoch's running sums: `sums` on device since this process started the epoch (or resumed), `bases`
  # on the host (per model) from before a resume.
  sums, bases = None, [lane["epoch_sums"] for lane in lanes()]
  clock = {"t0": time.time(), "step0": step, "last_line": None, "written": None}
  metric, mode = task.selection or (None, "min")
  profiler = metrics_lib.Profiler(workdir / "profile", config.profile_steps if is_local(workdir) else 0)
  if config.profile_steps and not is_local(workdir):
    logging.warning("profile_steps: traces are written to local folders only; give a local --workdir.")
  done = lambda: meta["epoch"] > task.num_epochs or (max_steps and step >= max_steps)
  every_epochs = config.get("checkpoint_every_epochs", 1)
  kept_best = None  # with checkpoint_every_epochs = 0, or members: the best state, on the devices
  if K and ckpts.latest_step("best") is not None and restored is not None:
    kept_best = ckpts.restore("best", state)[0]

  def diverge(k: int, why: str) -> None:
    """Member k is frozen from now on (members runs); the run stops when none trains any more."""
    nonlocal state
    lane = meta["members"][k]
    if lane["diverged"] is None:
      lane["diverged"] = {"step": step, "epoch": meta["epoch"], "reason": why}
      state = members_lib.mark_diverged(state, k, step)
      logging.warning("Member %d (seed %s) diverged: %s; frozen at its last finite state, the others train on.",
                      k, task.member_config(k).seed, why)
    if all(lane["diverged"] is not None for lane in meta["members"]):
      raise NonFiniteLossError(f"All {K} members diverged (the last: {why}); stopped without saving; "
                               f"{_kept(ckpts)}.")

  def sync_diverged() -> None:
    """Record the members the step itself froze (a non-finite sum: `members.guarded`)."""
    if not K:
      return
    at = np.asarray(jax.device_get(state[members_lib.DIVERGED]))
    for k, lane in enumerate(meta["members"]):
      if at[k] >= 0 and lane["diverged"] is None:
        diverge(k, f"a non-finite training loss or gradient at step {int(at[k])}")

  def epoch_sums() -> list[dict]:
    """Each model's epoch sums so far, on the host; for a plain run raises NonFiniteLossError if any is not
    finite (a member's step zeroes its sums once it diverges)."""
    now = {} if sums is None else jax.device_get(sums)
    totals = []
    for k, before in enumerate(bases):
      mine = {key: float(v[k] if K else v) for key, v in now.items()}
      before = before or {}
      total = {key: before.get(key, 0.0) + mine.get(key, 0.0) for key in {**before, **mine}}
      bad = [key for key, v in total.items() if not math.isfinite(v)]
      if bad and not K:
        raise NonFiniteLossError(
            f"The training {bad[0]} became non-finite before step {step} (epoch {meta['epoch']}); stopped "
            f"without saving; {_kept(ckpts)}. Try a lower learning rate or clip norm.")
      totals.append(total)
    return totals

  def lane_metrics(k: int, lane_sums: dict) -> dict:
    return task.train_metrics(lane_sums, step, member=k) if K else task.train_metrics(lane_sums, step)

  def tick() -> float:
    """Close the current stretch of training time; returns its steps/s."""
    now = time.time()
    dt = max(now - clock["t0"], 1e-9)
    meta["train_s"] += dt
    rate = (step - clock["step0"]) / dt
    clock.update(t0=now, step0=step)
    return rate

  def checked_metrics() -> tuple[list[dict], list[dict]]:
    """(each model's epoch sums, what they show), finite; a plain run raises NonFiniteLossError, a member
    whose numbers are not finite is frozen (`diverge`)."""
    sync_diverged()
    sums_now = epoch_sums()
    shown = [lane_metrics(k, s) for k, s in enumerate(sums_now)]
    for k, lane_shown in enumerate(shown):
      bad = [key for key, v in lane_shown.items() if not math.isfinite(v)]
      if bad and not K:  # e.g. a perplexity that overflowed although the summed NLL is still finite
        raise NonFiniteLossError(
            f"The training {bad[0]} is {lane_shown[bad[0]]} at step {step} (epoch {meta['epoch']}): the model "
            f"diverged. Stopped without saving; {_kept(ckpts)}.")
      if bad and meta["members"][k]["diverged"] is None:
        diverge(k, f"the training {bad[0]} is {lane_shown[bad[0]]} at step {step}")
    return sums_now, shown

  def save(kind: str) -> None:
    for lane, lane_sums in zip(lanes(), checked_metrics()[0]):
      lane["epoch_sums"] = lane_sums
    meta["wall_s"] = wall_before + time.time() - t_start
    ckpts.save(kind, step, kept_best if kind == "best" and K else state, meta)
    for w in writers:
      w.flush()

  def progress(write: bool) -> None:
    shown = checked_metrics()[1]
    rate = tick()
    speed = {"steps_per_s": rate}
    if task.tokens_per_step:
      speed["tokens_per_s"] = rate * task.tokens_per_step
    eta = ((max_steps or task.num_epochs * task.steps_per_epoch) - step) / max(rate, 1e-9)
    logging.info("epoch %d step %d (%.0f%% of epoch) %s  %s  ETA %.1f min", meta["epoch"], step,
                 100 * meta["pos"] / task.steps_per_epoch, run_results.summary_line(shown, lanes(), K, names),
                 "  ".join(f"{v:.3g} {k.replace('_per_s', '/s')}" for k, v in speed.items()), eta / 60)
    clock["last_line"] = time.time()
    if write:
      clock["written"] = step
      for w, lane_shown in zip(writers, shown):
        w.write(kind="train", step=step, epoch=meta["epoch"], **lane_shown, **speed)

  with deferred_signals() as interrupted:
    while not done():
      epoch = meta["epoch"]
      if meta["pos"] == 0:
        state, sums, bases = task.start_epoch(state, epoch), None, [None] * len(bases)
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
        records = [{"epoch": epoch, "step": step, **shown} for shown in checked_metrics()[1]]
        t0 = time.time()
        validation = task.validate(state, epoch)
        for record, values in zip(records, validation if K else [validation]):
          record.update(values)
        logging.info("epoch %d done: %s (eval %.1fs)", epoch, run_results.summary_line(
            [{k: v for k, v in r.items() if isinstance(v, float)} for r in records], lanes(), K, names),
            time.time() - t0)
        improved = []
        for k, (record, lane, writer) in enumerate(zip(records, lanes(), writers)):
          bad = [key for key, v in record.items() if isinstance(v, float) and not math.isfinite(v)]
          if bad and not K:
            raise NonFiniteLossError(
                f"{bad[0]} is {record[bad[0]]} after epoch {epoch}: the model diverged. Stopped without saving; "
                f"{_kept(ckpts)}.")
          if bad and lane["diverged"] is None:
            diverge(k, f"{bad[0]} is {record[bad[0]]} after epoch {epoch}")
          record["train_s"] = meta["train_s"]
          writer.write(kind="epoch", **record)
          lane["history"].append(record)
          better = (metric is not None and (not K or lane["diverged"] is None)
                    and _better(record[metric], lane["best"], mode))
          if better:
            lane.update(best=record[metric], best_epoch=epoch)
          improved.append(better)
        meta.update(epoch=epoch + 1, pos=0)
        if K and any(improved):  # each member's best state, gathered on the devices
          copy = jax.tree_util.tree_map(jnp.copy, state)
          kept_best = copy if kept_best is None else members_lib.select(np.asarray(improved), copy, kept_best)
        if every_epochs and (epoch % every_epochs == 0 or done()):
          save("last")
          if any(improved):
            save("best")
        elif any(improved) and not K:  # checkpoint_every_epochs = 0: the best state stays in device memory
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
  if not K:
    results = run_results.common_results(config, state, meta, task, t_start, wall_before, resumed_from, run_versions)
    results.update(task.final(state, best_state, meta, final_sums[0]))
    per_lane = [results]
  else:
    sync_diverged()
    finals = task.final(state, best_state, [{**meta, **lane} for lane in lanes()], final_sums)
    per_lane = []
    for k, (lane, final) in enumerate(zip(lanes(), finals)):
      mine = members_lib.member(state, k)
      results = run_results.common_results(task.member_config(k), mine, {**meta, **lane}, task, t_start, wall_before,
                               resumed_from, run_versions)
      results.update(final)
      results["member"] = {"index": k, "of": K, "run": str(workdir), "diverged": lane["diverged"]}
      per_lane.append(results)
  if parallel.is_writer():
    for d, results in zip(lane_dirs, per_lane):
      write_json(d / "results.json", results)
      if config.plot:
        metrics_lib.plot_curves(d / "metrics.jsonl", d / "curves.png", title=results["config"])
  if K:  # each member's folder holds its own final (and best) checkpoint: a run folder like a plain run's
    for k, d in enumerate(lane_dirs):
      run_results.save_member(d, k, step, state, best_state, meta, lanes()[k], task.member_config(k))
    summary = run_results.members_summary(per_lane, config.name)
    if parallel.is_writer():
      write_json(workdir / run_results.SUMMARY_FILE, summary)
    logging.info("%s", summary["line"])
  ckpts.close()
  return per_lane[0] if not K else summary
