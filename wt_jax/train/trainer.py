"""The trainer skeleton every task shares (language models, NMT, skip-gram): run(task, config, workdir) → results.

A run trains a list of *lanes*: one model, or the K members of a members run (`wt_jax.members`: one stacked state,
every leaf with a leading member axis). Each lane has its folder (the workdir, or `<workdir>/members/<k>/`), config,
metrics writer and record (`run_results.new_lane`). The task (`Task`) says what is trained, lane by lane; the
skeleton runs the loop over epochs and steps; checkpoints `last` (epoch ends, every `checkpoint_every_epochs`-th,
and every `checkpoint_every_steps`) and each lane's `best` by the task's validation metric (held on the devices);
resume mid-epoch from the newest readable checkpoint; the non-finite policy (`_diverge`); SIGINT/SIGTERM (finish the
step, save `last`, stop: `signals.deferred`); progress lines, metrics.jsonl and TensorBoard per lane (process 0);
profiles; the folder's record (`record.record_run`), a lock (`lock.workdir_lock`) and the results (`run_results`).
"""
from __future__ import annotations

import dataclasses
import math
import signal
import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from etils import epath

from wt_jax import parallel
from wt_jax import members as members_lib
from wt_jax.data import paths
from wt_jax.errors import InputError
from wt_jax.train import metrics as metrics_lib
from wt_jax.train import run_results, signals
from wt_jax.train.checkpoint import CheckpointMismatchError, CheckpointUnreadableError, Checkpoints
from wt_jax.train.lock import WorkdirBusyError, workdir_lock
from wt_jax.train.record import ConfigChangedError, record_run, versions
from wt_jax.train.task import Task, run_keys  # noqa: F401  (run_keys: the tasks' and tests' seeds)

LOG_EVERY_S = 30.0  # a progress line at least this often, whatever log_every is


class NonFiniteLossError(FloatingPointError):
  """The training loss (or a validation metric) became NaN or infinite."""


class Interrupted(KeyboardInterrupt):
  """SIGINT or SIGTERM arrived; `last` was saved at the step reached."""


# What stops a run for a reason its user acts on; the entry points print the message as one line and exit 1.
STOPS = (Interrupted, NonFiniteLossError, ConfigChangedError, WorkdirBusyError, CheckpointMismatchError,
         CheckpointUnreadableError, paths.DataUnavailableError, InputError)


@dataclasses.dataclass
class Run:
  """What a run holds between steps; the loop's functions read and update it."""

  task: Task
  config: Any
  workdir: epath.Path
  folders: list  # each lane's
  writers: list  # each lane's
  ckpts: Checkpoints
  state: Any
  lanes: list  # each lane's record (`run_results.new_lane`), checkpointed with the state
  profiler: Any
  versions: dict  # the code and libraries this process runs
  epoch: int = 1
  pos: int = 0  # steps taken in the epoch
  step: int = 0
  clock: metrics_lib.Clock = None  # seconds in training steps (all processes), progress lines
  wall_before: float = 0.0  # wall seconds of the processes before this one
  t_start: float = dataclasses.field(default_factory=time.time)
  best_state: Any = None  # each lane's best state so far, on the devices
  best_unsaved: bool = False  # `best_state` changed since checkpoint `best` was written
  sums: Any = None  # the epoch's step sums on device since this process started (or resumed) it; before: `bases`
  bases: list = None
  resumed_from: int | None = None
  written: int | None = None  # the step of the last 'train' record


_add = jax.jit(lambda a, b: jax.tree_util.tree_map(jnp.add, a, b), donate_argnums=(0,))


def run(task: Task, config, workdir) -> dict:
  """Train `task` under `workdir` (resuming from its last checkpoint), then evaluate; see the module doc. Returns
  results.json's dict (members: summary.json's). `workdir` is a local folder or a bucket (`etils.epath`)."""
  workdir = epath.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  with workdir_lock(workdir):
    folders = run_results.lane_folders(workdir, task.members)
    writers = [metrics_lib.MetricsWriter(d / "metrics.jsonl", d) if parallel.is_writer() else metrics_lib.NoWriter()
               for d in folders]
    try:
      r = _start(task, config, workdir, folders, writers)
      with signals.deferred() as interrupted:
        _train(r, interrupted)
      return _finish(r)
    finally:  # however the run ends, TensorBoard's queued events reach the disk
      for w in writers:
        w.close()


def _start(task: Task, config, workdir: epath.Path, folders: list, writers: list) -> Run:
  """The run before its first step: fresh, or restored from its newest readable checkpoint; its record written
  (or checked against the config, at a resume)."""
  ckpts = Checkpoints(workdir / "checkpoints")
  r = Run(task=task, config=config, workdir=workdir, folders=folders, writers=writers, ckpts=ckpts,
          state=task.init_state(), lanes=[run_results.new_lane() for _ in folders],
          profiler=metrics_lib.Profiler(workdir / "profile", config.profile_steps), versions=versions())
  # (a members run resumes from `last` only: its `best` mixes the members' best epochs)
  restored = ckpts.restore_intact(r.state, kinds=("last",) if task.members else ("last", "best"))
  saved_config, train_s = None, 0.0
  if restored is not None:
    r.state, meta, kind, r.resumed_from = restored
    saved_config = meta["config"]
    r.epoch, r.pos, train_s, r.wall_before = meta["epoch"], meta["pos"], meta["train_s"], meta["wall_s"]
    r.lanes = run_results.lanes_of(meta, task.members)
    had_best = ckpts.latest_step("best") is not None
    best = ckpts.restore_intact(r.state, kinds=("best",)) if had_best else None  # (damage: moved aside)
    if best is not None:
      r.best_state = best[0]
    elif had_best:  # the next epoch validated becomes the best
      for lane in r.lanes:
        lane.update(best=None, best_epoch=None)
      logging.warning("No readable best checkpoint: the best is chosen again from the next epoch validated on.")
    logging.info("Resumed from %s at step %d (epoch %d).", ckpts.directory / kind, r.resumed_from, r.epoch)
  if parallel.is_writer():
    members = list(zip(folders, task.lane_configs)) if task.members else []
    record_run(workdir, config, r.versions, members, r.resumed_from, saved_config)
    for d in folders:
      task.write_run_files(d, resumed=restored is not None)
  r.step = int(np.max(jax.device_get(r.state["step"])))
  r.clock = metrics_lib.Clock(train_s, r.step, LOG_EVERY_S)
  r.bases = [lane["epoch_sums"] for lane in r.lanes]
  return r


def _done(r: Run) -> bool:
  return r.epoch > r.task.num_epochs or bool(r.task.max_steps and r.step >= r.task.max_steps)


def _train(r: Run, interrupted: threading.Event) -> None:
  """Epochs until the run is done (or `max_steps` ends one early)."""
  while not _done(r):
    if r.pos == 0:
      r.state, r.sums, r.bases = r.task.start_epoch(r.state, r.epoch), None, [None] * len(r.lanes)
    if not _train_epoch(r, interrupted):
      break
    _end_epoch(r)
  r.profiler.close()


def _train_epoch(r: Run, interrupted: threading.Event) -> bool:
  """The rest of the epoch's steps; False when `max_steps` stopped it first. A signal saves `last` and stops."""
  every_line, every_save = r.config.log_every, r.config.checkpoint_every_steps
  for batch, k in r.task.batches(r.epoch, r.pos):
    r.state, step_sums = r.task.train_step(r.state, batch)
    r.profiler.after_step(r.state)
    r.sums = step_sums if r.sums is None else _add(r.sums, step_sums)
    before, r.step, r.pos = r.step, r.step + k, r.pos + k
    if interrupted.is_set():  # keep what was trained since the last checkpoint, then stop
      r.clock.tick(r.step)
      _save(r)
      raise Interrupted(f"Interrupted at step {r.step} by {signal.Signals(interrupted.signum).name}; saved a "
                        f"checkpoint in {r.ckpts.directory / 'last'}. Re-run the same command to resume.")
    crossed = before // every_line != r.step // every_line
    if crossed or r.clock.line_due():
      _progress(r, write=crossed)  # (the first line shows that the step compiled; then by steps or time)
    if r.task.max_steps and r.step >= r.task.max_steps:
      if r.written != r.step:
        _progress(r, write=True)
      return False
    if every_save and before // every_save != r.step // every_save:
      r.clock.tick(r.step)
      _save(r)
      r.clock.restart(r.step)
  return True


def _end_epoch(r: Run) -> None:
  """Validate, record the epoch per lane, keep each lane's best state, checkpoint."""
  if r.written != r.step:
    _progress(r, write=True)
  records = [{"epoch": r.epoch, "step": r.step, **shown} for shown in _epoch_numbers_or_diverge(r)[1]]
  t0 = time.time()
  for record, values in zip(records, r.task.validate(r.state, r.epoch)):
    record.update(values)
  numbers = [{k: v for k, v in record.items() if isinstance(v, float)} for record in records]
  logging.info("epoch %d done: %s (eval %.1fs)", r.epoch, _summary(r, numbers), time.time() - t0)
  improved = []
  for k, (record, lane, writer) in enumerate(zip(records, r.lanes, r.writers)):
    _check(r, k, record, f"{{key}} is {{value}} after epoch {r.epoch}")
    record["train_s"] = r.clock.train_s
    writer.write(kind="epoch", **record)
    lane["history"].append(record)
    improved.append(run_results.improves(r.task.selection, lane, record))
  r.epoch, r.pos = r.epoch + 1, 0
  if any(improved):
    r.best_state, r.best_unsaved = run_results.keep_best(r.state, r.best_state, improved), True
  every = r.config.get("checkpoint_every_epochs", 1)
  if every and ((r.epoch - 1) % every == 0 or _done(r)):
    _save(r)
  r.clock.restart(r.step)


def _check(r: Run, k: int, values: dict, why: str) -> None:
  """Lane k diverges (`_diverge`) if one of its `values` is NaN or infinite; `why` says so ({key}, {value})."""
  bad = next((key for key, v in values.items() if isinstance(v, float) and not math.isfinite(v)), None)
  if bad is not None:
    _diverge(r, k, why.format(key=bad, value=values[bad]))


def _diverge(r: Run, k: int, why: str) -> None:
  """The non-finite policy: lane k is frozen at its last finite state; when no lane trains any more the run stops
  without saving (the last finite checkpoint stays): at once for a plain run's one model."""
  lane = r.lanes[k]
  if lane["diverged"] is not None:
    return
  lane["diverged"] = {"step": r.step, "epoch": r.epoch, "reason": why}
  if all(lane["diverged"] is not None for lane in r.lanes):
    step = r.ckpts.latest_step()
    kept = (f"the last good checkpoint (step {step}) is kept in {r.ckpts.directory}" if step is not None
            else "no checkpoint had been saved yet")
    raise NonFiniteLossError(
        f"All {len(r.lanes)} members diverged (the last: {why}); stopped without saving; {kept}." if r.task.members
        else f"{why[0].upper()}{why[1:]}: the model diverged. Stopped without saving; {kept}. Try a lower learning "
        "rate or clip norm.")
  r.state = members_lib.mark_diverged(r.state, k, r.step)
  logging.warning("Member %d (seed %s) diverged: %s; frozen at its last finite state, the others train on.",
                  k, r.task.lane_configs[k].seed, why)


def _epoch_numbers_or_diverge(r: Run) -> tuple[list[dict], list[dict]]:
  """(each lane's epoch sums so far, on the host; the progress numbers they give), once the non-finite policy
  (`_diverge`) has seen them and the lanes the step itself froze (`members.guarded`): raises NonFiniteLossError
  when no lane trains any more."""
  for k, at in enumerate(np.asarray(jax.device_get(r.state.get(members_lib.DIVERGED, [])))):
    if at >= 0:
      _diverge(r, k, f"a non-finite training loss or gradient at step {int(at)}")
  totals, shown = run_results.lane_totals(r.bases, r.sums, len(r.lanes)), []
  for k, total in enumerate(totals):
    _check(r, k, total, f"the training {{key}} became non-finite before step {r.step} (epoch {r.epoch})")
    shown.append(r.task.train_metrics(total, r.step, k))  # (a perplexity may overflow where its NLL sum does not)
    _check(r, k, shown[-1], f"the training {{key}} is {{value}} at step {r.step} (epoch {r.epoch})")
  return totals, shown


def _summary(r: Run, shown: list[dict]) -> str:
  return run_results.summary_line(shown, r.lanes, r.task.members, [c.name for c in r.task.lane_configs])


def _progress(r: Run, write: bool) -> None:
  shown = _epoch_numbers_or_diverge(r)[1]
  rate = r.clock.tick(r.step)
  speed = {"steps_per_s": rate, **({"tokens_per_s": rate * r.task.tokens_per_step} if r.task.tokens_per_step else {})}
  eta = ((r.task.max_steps or r.task.num_epochs * r.task.steps_per_epoch) - r.step) / max(rate, 1e-9)
  logging.info("epoch %d step %d (%.0f%% of epoch) %s  %s  ETA %.1f min", r.epoch, r.step,
               100 * r.pos / r.task.steps_per_epoch, _summary(r, shown),
               "  ".join(f"{v:.3g} {k.replace('_per_s', '/s')}" for k, v in speed.items()), eta / 60)
  r.clock.last_line = time.time()
  if write:
    r.written = r.step
    for w, lane_shown in zip(r.writers, shown):
      w.write(kind="train", step=r.step, epoch=r.epoch, **lane_shown, **speed)


def _progress_meta(r: Run) -> dict:
  return {"config": r.config.to_dict(), "epoch": r.epoch, "pos": r.pos, "train_s": r.clock.train_s,
          "wall_s": r.wall_before + time.time() - r.t_start}


def _save(r: Run) -> None:
  """Checkpoint `last` (the state) and, when it changed since it was written, `best` (each lane's best state), with
  the lanes' records, once the non-finite policy has passed them: the folder's `best` is always the one a test with
  `test_params='best'` uses, and a resume restores it."""
  for lane, total in zip(r.lanes, _epoch_numbers_or_diverge(r)[0]):
    lane["epoch_sums"] = total
  meta = run_results.with_lanes(_progress_meta(r), r.lanes, r.task.members)
  r.ckpts.save("last", r.step, r.state, meta)
  if r.best_unsaved:
    r.ckpts.save("best", r.step, r.best_state, meta)
    r.best_unsaved = False
  for w in r.writers:
    w.flush()


def _finish(r: Run) -> dict:
  """The final checkpoint, the task's final evaluation and each lane's results.json (members: their checkpoints
  and summary.json)."""
  totals = _epoch_numbers_or_diverge(r)[0]
  if r.ckpts.latest_step() != r.step:  # stopped mid-epoch: keep the final state too
    _save(r)
  lane_metas = [{**_progress_meta(r), **lane} for lane in r.lanes]
  finals = r.task.final(r.state, r.best_state, lane_metas, totals)
  num_params = sum(x.size for x in jax.tree_util.tree_leaves(r.state["params"])) // len(r.lanes)  # (per lane)
  per_lane = run_results.lane_results(r.task, lane_metas, finals, num_params, r.step,
                                      r.wall_before + time.time() - r.t_start, r.resumed_from, r.versions, r.workdir)
  if parallel.is_writer():
    run_results.write_results(r.folders, per_lane, r.config.plot)
  if r.task.members:  # each member's folder holds its own final (and best) checkpoint, as a plain run's does
    for k, (folder, meta) in enumerate(zip(r.folders, lane_metas)):
      run_results.save_member(folder, k, r.step, r.state, r.best_state, meta, r.task.lane_configs[k])
  r.ckpts.close()
  return run_results.members_summary(r.workdir, per_lane, r.config.name) if r.task.members else per_lane[0]
