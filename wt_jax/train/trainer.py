"""The trainer every task shares (language models, NMT, skip-gram): run(task, config, workdir) → results.

One state trained: epochs of the task's steps (`task.batches`, `task.train_step`), validated at each epoch's end;
checkpoints `last` (cadence: `_save_due`) and `best` by the task's validation metric; resume mid-epoch from the
newest readable checkpoint; SIGINT/SIGTERM finish the step, save `last` and stop (`deferred`); progress lines at
least every `LOG_EVERY_S` (`_progress`). The loop keeps the model's history, its best epoch and the non-finite
policy itself (`Run`, `_check`). A number is a float for one model, a [K] array for the K members of a members
run (`lm.MembersTask`: the members' state stacked, each member's numbers in its place; `members_run` writes each
member's folder at the run's start and end).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import signal
import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from etils import epath

import wt_jax.files as files
import wt_jax.members as members_lib
import wt_jax.parallel as parallel
from wt_jax.data import paths
from wt_jax.errors import InputError
from wt_jax.train import metrics as metrics_lib
from wt_jax.train import run_record
from wt_jax.train.checkpoint import CheckpointMismatchError, CheckpointUnreadableError, Checkpoints
from wt_jax.train.run_record import ConfigChangedError
from wt_jax.train.workdir_lock import WorkdirBusyError, workdir_lock
from wt_jax.train.task import Task

log = logging.getLogger(__name__)

LOG_EVERY_S = 30.0  # a progress line at least this often, whatever log_every is

# What a run writes again at a resume, in its folder: files rewritten or appended to, folders written in.
RUN_OUTPUTS = ("run.json", "metrics.jsonl", "results.json", "summary.json", "curves.png", "vocab.txt")
RUN_FOLDERS = ("", "checkpoints", "checkpoints/last", "checkpoints/best")
META_KEYS = ("history", "epoch_sums", "best", "best_epoch", "diverged")  # the loop's record in a checkpoint's meta


class Interrupted(KeyboardInterrupt):
  """SIGINT or SIGTERM arrived (`deferred`); `last` was saved at the step reached."""


class NonFiniteLossError(FloatingPointError):
  """The training loss (or a validation metric) became NaN or infinite; `why` says which, and when."""

  def __init__(self, message: str, why: str = ""):
    super().__init__(message)
    self.why = why or message


# What stops a run for a reason its user acts on; the entry points print the message as one line and exit 1.
STOPS = (Interrupted, NonFiniteLossError, ConfigChangedError, WorkdirBusyError, CheckpointMismatchError,
         CheckpointUnreadableError, paths.DataUnavailableError, InputError)


@dataclasses.dataclass
class Run:
  """What a run holds between steps; the loop's functions read and update it."""

  task: Task
  config: Any
  path: epath.Path  # the run's folder
  writer: Any  # metrics.jsonl and TensorBoard (`metrics.MetricsWriter`; `NoWriter` in processes other than 0)
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
  # The model's record (a checkpoint's meta, `META_KEYS`): its epochs; the epoch's train sums from before a resume
  # (on the host); the best validation number and its epoch by `task.selection`; members that diverged (a members
  # run: [K] of None or {step, epoch, reason}; a plain run stops instead).
  history: list = dataclasses.field(default_factory=list)
  epoch_sums: dict | None = None
  best: Any = None
  best_epoch: Any = None
  diverged: list | None = None


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


def run(task: Task, config, workdir) -> dict:
  """Train `task` in `workdir` (local or a bucket), resuming from its last checkpoint; evaluate → results.json's
  dict. The folder is locked while it runs (`workdir_lock`: one live run per folder) and checked writable first."""
  path = epath.Path(workdir)
  path.mkdir(parents=True, exist_ok=True)
  with contextlib.ExitStack() as folder:  # (a refusal on entry releases what was taken)
    folder.enter_context(workdir_lock(path))
    writer = metrics_lib.NoWriter()
    if parallel.is_writer():
      files.check_writable(path, RUN_OUTPUTS, RUN_FOLDERS)
      writer = metrics_lib.MetricsWriter(path / "metrics.jsonl", path)
    folder.callback(writer.close)  # however the run ends, TensorBoard's queued events reach the disk
    r = _start(task, config, path, writer)
    try:
      with deferred() as interrupted:
        while not _done(r):  # epochs until the run is done (or `max_steps` ends one early)
          if r.pos == 0:
            r.state, r.sums, r.epoch_sums = r.task.start_epoch(r.state, r.epoch), None, None
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


def _start(task: Task, config, path: epath.Path, writer) -> Run:
  """The run before its first step: fresh, or restored from its newest readable checkpoint (a damaged one moved
  aside); its record written (or checked against the config, at a resume), with the task's files (vocab.txt)."""
  ckpts = Checkpoints(path / "checkpoints")
  r = Run(task=task, config=config, path=path, writer=writer, ckpts=ckpts, state=task.init_state(),
          profiler=metrics_lib.Profiler(path / "profile", config.profile_steps)
          if config.get("profile_steps", 0) else None, versions=run_record.versions())
  restored = ckpts.restore_intact(r.state, kinds=("last",))
  saved_config, train_s = None, 0.0
  if restored is not None:
    r.state, meta, kind, r.resumed_from = restored
    if "members" in meta:  # (each member's record in a list: a members run saved before BUILD_NOTES §77)
      raise InputError(f"{ckpts.directory / kind} was saved by an older wt_jax's members run; finish it with that "
                       "version (its run.json names the commit) or start it again in a new --workdir.")
    saved_config = meta["config"]
    r.epoch, r.pos, train_s, r.t_start = meta["epoch"], meta["pos"], meta["train_s"], r.t_start - meta["wall_s"]
    r.history, r.epoch_sums, r.best, r.best_epoch, r.diverged = (meta.get(k) for k in META_KEYS)
    r.history = r.history or []
    had_best = ckpts.latest_step("best") is not None
    best = ckpts.restore_intact(r.state, kinds=("best",)) if had_best else None  # (damage: moved aside)
    if best is not None:
      r.best_state = best[0]
    elif had_best:
      r.best = r.best_epoch = None
      log.warning("No readable best checkpoint: the best is chosen again from the next epoch validated on.")
    log.info("Resumed from %s at step %d (epoch %d).", ckpts.directory / kind, r.resumed_from, r.epoch)
  if parallel.is_writer():
    run_record.record_run(path, config, r.versions, task.member_runs, r.resumed_from, saved_config)
    task.write_run_files(path, resumed=r.resumed_from is not None)
  r.step = int(np.max(jax.device_get(r.state["step"])))
  r.clock = metrics_lib.Clock(train_s, r.step)
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
    if crossed or r.clock.last_line is None or time.time() - r.clock.last_line > LOG_EVERY_S:
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


def _numbers(r: Run) -> tuple[dict, dict]:
  """(the epoch's train sums on the host — `epoch_sums` from before a resume plus this process's — and their
  progress numbers `task.train_metrics`), both seen by the non-finite policy (`_check`)."""
  now, before = jax.device_get(r.sums) or {}, r.epoch_sums or {}
  totals = {key: np.add(before.get(key, 0.0), np.asarray(now.get(key, 0.0), np.float64)) for key in {**before, **now}}
  _check(r, totals, f"the training {{key}} became non-finite before step {r.step} (epoch {r.epoch})")
  shown = r.task.train_metrics(totals, r.step)
  _check(r, shown, f"the training {{key}} is {{value}} at step {r.step} (epoch {r.epoch})")
  return totals, shown


def _check(r: Run, values: dict, why: str) -> None:
  """The non-finite policy: a number of `values` that is NaN or infinite stops a plain run (`NonFiniteLossError`,
  `why` naming it with {key} and {value}); in a members run it marks that member diverged (`r.diverged`: left out
  of the progress lines, its best and the summary) and stops the run only when every member has."""
  numbers = {key: np.asarray(v, np.float64) for key, v in values.items() if isinstance(v, (float, np.ndarray))}
  shape = max((v.shape for v in numbers.values()), key=len, default=())
  for k in np.ndindex(shape):  # (one model: the one index ())
    key = next((key for key, v in numbers.items() if not math.isfinite(np.broadcast_to(v, shape)[k])), None)
    if key is None or (r.diverged and r.diverged[k[0]]):
      continue
    reason = why.format(key=key, value=float(np.broadcast_to(numbers[key], shape)[k]))
    if not k:
      raise NonFiniteLossError(f"{reason[0].upper()}{reason[1:]}: the model diverged", reason)
    r.diverged = r.diverged or [None] * shape[0]
    r.diverged[k[0]] = {"step": r.step, "epoch": r.epoch, "reason": reason}
    if all(r.diverged):
      raise NonFiniteLossError(f"All {shape[0]} members diverged (the last: {reason})", reason)
    log.warning("Member %d diverged: %s; left out of the summary, the others train on.", k[0], reason)


def _improved(r: Run, record: dict) -> np.ndarray:
  """Whether the epoch's `record` is the best so far by `task.selection` (a members run: per member, a diverged
  member keeping the best it had), noted in `r.best` and `r.best_epoch`."""
  metric, mode = r.task.selection
  value = record[metric]
  values, one = np.ravel(value).tolist(), not np.ndim(value)
  bests = [r.best] if one else r.best or [None] * len(values)
  epochs = [r.best_epoch] if one else r.best_epoch or [None] * len(values)
  live = [not d for d in r.diverged or [None] * len(values)]
  improved = [ok and (b is None or (v < b if mode == "min" else v > b)) for v, b, ok in zip(values, bests, live)]
  bests = [v if i else b for v, b, i in zip(values, bests, improved)]
  epochs = [record["epoch"] if i else e for e, i in zip(epochs, improved)]
  r.best, r.best_epoch = (bests[0], epochs[0]) if one else (bests, epochs)
  return np.reshape(improved, np.shape(value))


def _end_epoch(r: Run) -> None:
  """Validate, record the epoch (`history`, metrics.jsonl), keep the best state, checkpoint."""
  if r.written != r.step:
    _progress(r, write=True)
  _, shown = _numbers(r)
  t0, values = time.time(), r.task.validate(r.state, r.epoch)
  record = {"epoch": r.epoch, "step": r.step, **shown, **values}
  log.info("epoch %d done: %s (eval %.1fs)", r.epoch, _line(r, record), time.time() - t0)
  _check(r, record, f"{{key}} is {{value}} after epoch {r.epoch}")
  record = {key: np.asarray(v).tolist() for key, v in {**record, "train_s": r.clock.train_s}.items()}
  r.writer.write(kind="epoch", **record)
  r.history.append(record)
  improved = _improved(r, record) if r.task.selection else np.False_
  if improved.any():  # (a copy: the state is donated to the next step)
    copy = jax.tree_util.tree_map(jnp.copy, r.state)
    r.best_state = copy if r.best_state is None or improved.all() else members_lib.select(improved, copy,
                                                                                          r.best_state)
    r.best_unsaved = True
  r.epoch, r.pos = r.epoch + 1, 0
  if _save_due(r, r.step, epoch_end=True):
    _save(r)
  r.clock.restart(r.step)


def _line(r: Run, numbers: dict) -> str:
  """A progress line's numbers; a members run's as their mean and range over the members that train on, each
  config's apart (`metrics.summary_line`)."""
  if not r.task.member_runs:
    return "  ".join(f"{k} {v:.4g}" for k, v in numbers.items() if isinstance(v, float))
  K = len(r.task.member_runs)
  rows = [{k: float(np.ravel(v)[m]) for k, v in numbers.items() if np.size(v) == K and isinstance(v, np.ndarray)}
          for m in range(K)]
  return metrics_lib.summary_line(rows, [not d for d in r.diverged or [None] * K],
                                  [c.name for _, c in r.task.member_runs])


def _progress(r: Run, write: bool) -> None:
  """A progress line (and, if `write`, a 'train' record), once the non-finite policy has seen the numbers."""
  _, shown = _numbers(r)
  rate = r.clock.tick(r.step)
  speed = {"steps_per_s": rate, **({"tokens_per_s": rate * r.task.tokens_per_step} if r.task.tokens_per_step else {})}
  eta = ((r.task.max_steps or r.task.num_epochs * r.task.steps_per_epoch) - r.step) / max(rate, 1e-9)
  log.info("epoch %d step %d (%.0f%% of epoch) %s  %s  ETA %.1f min", r.epoch, r.step,
           100 * r.pos / r.task.steps_per_epoch, _line(r, shown),
           "  ".join(f"{v:.3g} {k.replace('_per_s', '/s')}" for k, v in speed.items()), eta / 60)
  r.clock.last_line = time.time()
  if write:
    r.written = r.step
    r.writer.write(kind="train", step=r.step, epoch=r.epoch, **speed,
                   **{k: np.asarray(v).tolist() for k, v in shown.items()})


def _meta(r: Run, totals: dict) -> dict:
  """A checkpoint's meta: the run's progress and the loop's record (`META_KEYS`)."""
  return {"config": r.config.to_dict(), "epoch": r.epoch, "pos": r.pos, "step": r.step, "train_s": r.clock.train_s,
          "wall_s": time.time() - r.t_start, **dict(zip(META_KEYS, (r.history, {k: np.asarray(v).tolist() for k, v in
                                                                             totals.items()}, r.best, r.best_epoch,
                                                                  r.diverged)))}


def _save(r: Run) -> None:
  """Checkpoint `last` and, when it changed since it was written, `best` (the state `test_params='best'` tests and
  a resume restores), once the non-finite policy has passed the numbers."""
  meta = _meta(r, _numbers(r)[0])
  r.ckpts.save("last", r.step, r.state, meta)
  if r.best_unsaved:
    r.ckpts.save("best", r.step, r.best_state, meta)
    r.best_unsaved = False
  r.writer.flush()


def _finish(r: Run) -> dict:
  """The final checkpoint, then the task's final evaluation → results.json (the keys every run has,
  `run_record.results`, then the task's), and the learning curves (curves.png) if the config's `plot`."""
  totals, _ = _numbers(r)
  if r.ckpts.latest_step() != r.step:  # stopped mid-epoch: keep the final state too
    _save(r)
  meta = {**_meta(r, totals), "resumed_from": r.resumed_from, "versions": r.versions}
  num_params = sum(x.size for x in jax.tree_util.tree_leaves(r.state["params"]))
  out = {**run_record.results(r.config, r.task, meta, num_params),
         **r.task.final(r.state, r.best_state, meta, meta["epoch_sums"])}
  if parallel.is_writer():
    files.write_json(r.path / "results.json", out)
    if r.config.get("plot", False):
      metrics_lib.plot_curves(r.path / "metrics.jsonl", r.path / "curves.png", title=out["config"])
  r.ckpts.close()
  return out
