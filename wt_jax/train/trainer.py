"""The trainer every task shares (language models, NMT, skip-gram): run(task, config, workdir) → results.

One state trained: epochs of the task's steps (`task.batches`, `task.train_step`), validated at each epoch's end;
checkpoints `last` (cadence: `_save_due`) and `best` by the task's validation metric; resume mid-epoch from the
newest readable checkpoint; SIGINT/SIGTERM finish the step, save `last` and stop (`deferred`); progress lines at
least every `LOG_EVERY_S` (`_progress`). The folder, its record and the model's history are a
`run_folder.RunFolder` (its `check_or_stop`: the non-finite policy); a members run brings its own folder object.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import signal
import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from wt_jax.data import paths
from wt_jax.errors import InputError
from wt_jax.train import metrics as metrics_lib
from wt_jax.train.checkpoint import CheckpointMismatchError, CheckpointUnreadableError, Checkpoints
from wt_jax.train.run_folder import NonFiniteLossError, RunFolder
from wt_jax.train.run_record import ConfigChangedError, versions
from wt_jax.train.workdir_lock import WorkdirBusyError
from wt_jax.train.task import Task

log = logging.getLogger(__name__)

LOG_EVERY_S = 30.0  # a progress line at least this often, whatever log_every is


class Interrupted(KeyboardInterrupt):
  """SIGINT or SIGTERM arrived (`deferred`); `last` was saved at the step reached."""


# What stops a run for a reason its user acts on; the entry points print the message as one line and exit 1.
STOPS = (Interrupted, NonFiniteLossError, ConfigChangedError, WorkdirBusyError, CheckpointMismatchError,
         CheckpointUnreadableError, paths.DataUnavailableError, InputError)


@dataclasses.dataclass
class Run:
  """What a run holds between steps; the loop's functions read and update it."""

  task: Task
  config: Any
  folder: Any  # a `RunFolder` (a members run: `members_run.MembersFolder`)
  ckpts: Checkpoints
  state: Any
  profiler: metrics_lib.Profiler | None  # with `profile_steps` only
  versions: dict  # the code and libraries this process runs
  epoch: int = 1
  pos: int = 0  # steps taken in the epoch
  step: int = 0
  clock: metrics_lib.Clock = None  # seconds in training steps (all processes), progress lines
  t_start: float = dataclasses.field(default_factory=time.time)  # less the wall seconds of earlier processes
  best_state: Any = None  # the best state so far, on the devices
  best_unsaved: bool = False  # `best_state` changed since checkpoint `best` was written
  sums: Any = None  # the epoch's step sums on device since this process started (or resumed) it
  resumed_from: int | None = None
  written: int | None = None  # the step of the last 'train' record


def run_keys(seed: int) -> tuple[jax.Array, jax.Array]:
  """(init key, step key) of a seed: the initial parameters from the first; each step's randomness from the second."""
  return tuple(jax.random.split(jax.random.key(seed)))


@contextlib.contextmanager
def deferred(signums=(signal.SIGINT, signal.SIGTERM)):
  """Within the block the first of `signums` is noted in the yielded list (the loop saves `last` and stops) and the
  handler before it is put back for a second: Python's default (SIGINT raises KeyboardInterrupt, SIGTERM ends the
  process; a save cut short is never restored, `checkpoint.Checkpoints`). Off the main thread no signal comes."""
  caught: list[int] = []
  if threading.current_thread() is not threading.main_thread():
    yield caught
    return
  previous = {s: signal.getsignal(s) for s in signums}

  def handler(signum, frame):
    caught.append(signum)
    signal.signal(signum, previous[signum])

  for s in signums:
    signal.signal(s, handler)
  try:
    yield caught
  finally:
    for s in signums:
      signal.signal(s, previous[s])


_add = jax.jit(functools.partial(jax.tree_util.tree_map, jnp.add), donate_argnums=(0,))  # sums += step's sums


def run(task: Task, config, workdir, folder=None) -> dict:
  """Train `task` in `workdir` (local or a bucket), resuming from its last checkpoint; evaluate → results.json's
  dict. `folder`: the run's folder object (default: a `RunFolder` of `workdir`)."""
  with folder or RunFolder(workdir, task) as folder:
    r = _start(task, config, folder)
    try:
      with deferred() as interrupted:
        while not _done(r):  # epochs until the run is done (or `max_steps` ends one early)
          if r.pos == 0:
            r.state, r.sums = r.task.start_epoch(r.state, r.epoch), None
            r.folder.new_epoch()
          if not _train_epoch(r, interrupted):
            break
          _end_epoch(r)
        if r.profiler:
          r.profiler.close()
      return _finish(r)
    except NonFiniteLossError as e:  # (the newest checkpoint is the last finite state: nothing is saved)
      step = r.ckpts.latest_step()
      kept = (f"the last good checkpoint (step {step}) is kept in {r.ckpts.directory}" if step is not None
              else "no checkpoint had been saved yet")
      raise NonFiniteLossError(f"{e}. Stopped without saving; {kept}. Try a lower learning rate or clip norm.",
                               e.why) from None


def _start(task: Task, config, folder) -> Run:
  """The run before its first step: fresh, or restored from its newest readable checkpoint (a damaged one moved
  aside); its record written (or checked against the config, at a resume)."""
  ckpts = Checkpoints(folder.path / "checkpoints")
  r = Run(task=task, config=config, folder=folder, ckpts=ckpts, state=task.init_state(),
          profiler=metrics_lib.Profiler(folder.path / "profile", config.profile_steps)
          if config.get("profile_steps", 0) else None, versions=versions())
  restored = ckpts.restore_intact(r.state, kinds=("last",))
  saved_config, train_s = None, 0.0
  if restored is not None:
    r.state, meta, kind, r.resumed_from = restored
    saved_config = meta["config"]
    r.epoch, r.pos, train_s, r.t_start = meta["epoch"], meta["pos"], meta["train_s"], r.t_start - meta["wall_s"]
    folder.restore(meta)
    had_best = ckpts.latest_step("best") is not None
    best = ckpts.restore_intact(r.state, kinds=("best",)) if had_best else None  # (damage: moved aside)
    if best is not None:
      r.best_state = best[0]
    elif had_best:
      folder.forget_best()
      log.warning("No readable best checkpoint: the best is chosen again from the next epoch validated on.")
    log.info("Resumed from %s at step %d (epoch %d).", ckpts.directory / kind, r.resumed_from, r.epoch)
  folder.start(config, r.versions, r.resumed_from, saved_config)
  r.step = int(np.max(jax.device_get(r.state["step"])))
  r.clock = metrics_lib.Clock(train_s, r.step, LOG_EVERY_S)
  return r


def _done(r: Run) -> bool:
  return r.epoch > r.task.num_epochs or bool(r.task.max_steps and r.step >= r.task.max_steps)


def _train_epoch(r: Run, interrupted: list) -> bool:
  """The rest of the epoch's steps; False when `max_steps` stopped it first. A signal saves `last` and stops."""
  every_line = r.config.log_every
  for batch, k in r.task.batches(r.epoch, r.pos):
    r.state, step_sums = r.task.train_step(r.state, *batch)
    if r.profiler:
      r.profiler.after_step(r.state)
    r.sums = step_sums if r.sums is None else _add(r.sums, step_sums)
    before, r.step, r.pos = r.step, r.step + k, r.pos + k
    if interrupted:  # keep what was trained since the last checkpoint, then stop
      r.clock.tick(r.step)
      _save(r)
      raise Interrupted(f"Interrupted at step {r.step} by {signal.Signals(interrupted[0]).name}; saved a "
                        f"checkpoint in {r.ckpts.directory / 'last'}. Re-run the same command to resume.")
    crossed = before // every_line != r.step // every_line
    if crossed or r.clock.line_due():
      _progress(r, write=crossed)  # (the first line shows that the step compiled; then by steps or time)
    if r.task.max_steps and r.step >= r.task.max_steps:
      if r.written != r.step:
        _progress(r, write=True)
      return False
    if _save_due(r, before):
      r.clock.tick(r.step)
      _save(r)
      r.clock.restart(r.step)
  return True


def _save_due(r: Run, before: int, epoch_end: bool = False) -> bool:
  """The checkpoint cadence: at every `checkpoint_every_steps`-th step crossed since step `before`; at an epoch's
  end (`epoch_end`), every `checkpoint_every_epochs`-th (default 1) and the last."""
  every = r.config.get("checkpoint_every_epochs", 1) if epoch_end else r.config.checkpoint_every_steps
  if epoch_end:
    return bool(every) and ((r.epoch - 1) % every == 0 or _done(r))
  return bool(every) and before // every != r.step // every


def _end_epoch(r: Run) -> None:
  """Validate, record the epoch, keep the best state, checkpoint."""
  if r.written != r.step:
    _progress(r, write=True)
  r.state, _, shown = r.folder.progress(r.state, r.sums, r.step, r.epoch)
  t0, values = time.time(), r.task.validate(r.state, r.epoch)
  log.info("epoch %d done: %s (eval %.1fs)", r.epoch, r.folder.line(shown, values), time.time() - t0)
  r.state, r.best_state, improved = r.folder.add_epoch(r.state, r.best_state, {"epoch": r.epoch, "step": r.step},
                                                       shown, values, r.clock.train_s)
  r.best_unsaved |= improved
  r.epoch, r.pos = r.epoch + 1, 0
  if _save_due(r, r.step, epoch_end=True):
    _save(r)
  r.clock.restart(r.step)


def _progress(r: Run, write: bool) -> None:
  """A progress line (and, if `write`, a 'train' record), once the non-finite policy has seen the numbers."""
  r.state, _, shown = r.folder.progress(r.state, r.sums, r.step, r.epoch)
  rate = r.clock.tick(r.step)
  speed = {"steps_per_s": rate, **({"tokens_per_s": rate * r.task.tokens_per_step} if r.task.tokens_per_step else {})}
  eta = ((r.task.max_steps or r.task.num_epochs * r.task.steps_per_epoch) - r.step) / max(rate, 1e-9)
  log.info("epoch %d step %d (%.0f%% of epoch) %s  %s  ETA %.1f min", r.epoch, r.step,
               100 * r.pos / r.task.steps_per_epoch, r.folder.line(shown),
               "  ".join(f"{v:.3g} {k.replace('_per_s', '/s')}" for k, v in speed.items()), eta / 60)
  r.clock.last_line = time.time()
  if write:
    r.written = r.step
    r.folder.write_train(shown, step=r.step, epoch=r.epoch, **speed)


def _progress_meta(r: Run) -> dict:
  return {"config": r.config.to_dict(), "epoch": r.epoch, "pos": r.pos, "step": r.step, "train_s": r.clock.train_s,
          "wall_s": time.time() - r.t_start}


def _save(r: Run) -> None:
  """Checkpoint `last` and, when it changed since it was written, `best` (the state `test_params='best'` tests and
  a resume restores), with the folder's record, once the non-finite policy has passed it."""
  r.state, totals, _ = r.folder.progress(r.state, r.sums, r.step, r.epoch)
  meta = {**_progress_meta(r), **r.folder.meta(totals)}
  r.ckpts.save("last", r.step, r.state, meta)
  if r.best_unsaved:
    r.ckpts.save("best", r.step, r.best_state, meta)
    r.best_unsaved = False
  r.folder.flush()


def _finish(r: Run) -> dict:
  """The final checkpoint, then the task's final evaluation and results (`RunFolder.finish`)."""
  r.state, totals, _ = r.folder.progress(r.state, r.sums, r.step, r.epoch)
  if r.ckpts.latest_step() != r.step:  # stopped mid-epoch: keep the final state too
    _save(r)
  run_info = {"wall_s": time.time() - r.t_start, "resumed_from": r.resumed_from, "run_versions": r.versions}
  out = r.folder.finish(r.state, r.best_state, _progress_meta(r), totals, run_info)
  r.ckpts.close()
  return out
