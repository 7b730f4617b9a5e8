"""Checkpoints with orbax: the latest state (every epoch, and every N steps if asked) and the best by
validation perplexity, each in its own CheckpointManager under `<workdir>/checkpoints/{last,best}`.

A checkpoint holds the task's state pytree (e.g. `{'params', 'opt_state', 'step', 'carry'}`) and a JSON
`meta` dict (progress, history, the config). Restoring into a model whose parameter tree differs (a tied
checkpoint into an untied model, or the reverse) raises `CheckpointMismatchError` naming the differing
parameters. The two newest `last` steps are kept: when the newest cannot be read (a machine lost mid-write, a
damaged disk), `restore_intact` says so in one line, moves it aside (`<step>.unreadable`, never deleted) and
falls back to the previous step, then to `best`; a `best` step newer than the one resumed from is moved aside
too (`<step>.superseded`), since the run replays that step and saves it again. The reads orbax leaves behind
when a step fails are silenced (`_abandoned_reads_silenced`), so that the damage is reported in that one line.
A step this process may not read (a file or folder of another user's, without read permission) is not damage:
`CheckpointUnreadableError` names the path and nothing is moved, so the run does not start over from an older
step while its newest is intact. A save the full disk refuses is one line too (`Checkpoints.save`), with orbax's
own reports of it shortened (`_DiskFullReportsShortened`) and its abandoned writes silenced.
"""
from __future__ import annotations

import contextlib
import errno
import logging as std_logging
import os
import sys
import threading
import time
from typing import Any

import jax
import orbax.checkpoint as ocp
from absl import logging
from etils import epath

KEEP = {"last": 2, "best": 1}  # steps kept per kind: the previous `last` survives a damaged newest one


def _loop_closed(error: BaseException) -> bool:
  """A TensorStore read or write that completed after orbax's event loop closed."""
  return isinstance(error, RuntimeError) and str(error) == "Event loop is closed"


@contextlib.contextmanager
def _unraisable_dropped(drop, stays):
  """While the body runs, drop the unraisable exceptions `drop` accepts; every other one reaches the hook
  installed before. If the body raises an error `stays` accepts, the filter stays (what it drops may be
  reported at any later moment, whenever the garbage collector reaches it); otherwise that hook is put back."""
  previous = sys.unraisablehook

  def hook(unraisable):
    if not drop(unraisable.exc_value):
      previous(unraisable)

  sys.unraisablehook = hook
  failed = False
  try:
    yield
  except Exception as e:
    failed = stays(e)
    raise
  finally:
    if not failed and sys.unraisablehook is hook:
      sys.unraisablehook = previous


def _abandoned_reads_silenced(step_dir):
  """While orbax reads the step `step_dir`, and from then on if the read fails, drop Python's reports of the
  reads it abandons there.

  orbax reads a step's arrays as concurrent coroutines (`asyncio.gather`); when one fails the others are left
  unfinished. Each is reported as an unraisable exception — while the failure is still propagating or later,
  whenever the garbage collector reaches it: a coroutine that raised "Encountered error while reading array
  index" (naming the step's files) while being closed, or a TensorStore read that completed after orbax's event
  loop closed ("Event loop is closed"). That is dozens of traceback lines, at a random moment, repeating the
  damage reported in one line. Every other unraisable exception still reaches the hook installed before; after
  a read that succeeds (or a checkpoint of another model) that hook is put back."""
  where = "/".join(str(step_dir).rstrip("/").split("/")[-3:]) + "/"  # `checkpoints/last/<step>/`: a bucket's
  # TensorStore spec names the path inside the bucket, a local one the whole path
  drop = lambda e: (where in str(e) and "error while reading" in str(e)) or _loop_closed(e)
  return _unraisable_dropped(drop, stays=lambda e: not isinstance(e, CheckpointMismatchError))


class CheckpointMismatchError(ValueError):
  """The checkpoint's tree does not match the tree the current config builds."""


class CheckpointUnreadableError(PermissionError):
  """A checkpoint's files exist but this process is not permitted to read them."""


def _disk_full(error: BaseException) -> bool:
  """Whether `error`, or an error it was raised from, says the disk or quota is full: an OSError ENOSPC or
  EDQUOT, or TensorStore's RESOURCE_EXHAUSTED for a failed write (what orbax raises, in a ValueError)."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
      return True
    if "RESOURCE_EXHAUSTED" in str(error) and "writ" in str(error).lower():
      return True
    error = error.__cause__ or error.__context__
  return False


class _DiskFullReportsShortened:
  """A logging filter for orbax's own reports of a save the full disk refused, which `Checkpoints.save` reports
  in one line. orbax's background writers each log that error with its traceback, and asyncio logs each write
  orbax abandoned ("Task exception was never retrieved") when it is collected, after the run's line: hundreds
  of lines in all. The writers' records keep their message (what failed, and where) without the traceback;
  asyncio's records of orbax's abandoned writes are dropped. Every other record passes unchanged."""

  def filter(self, record) -> bool:
    if not record.exc_info or not _disk_full(record.exc_info[1]):
      return True
    if record.name == "asyncio":
      return "orbax" not in record.getMessage()
    if f"{os.sep}orbax{os.sep}" in (record.pathname or ""):
      record.exc_info, record.exc_text = None, None
    return True


_SHORTEN = _DiskFullReportsShortened()


SETTLE_S = 30.0  # seconds a failed save waits for orbax's threads to end


def _orbax_threads_joined(timeout: float = SETTLE_S) -> None:
  """Wait (at most `timeout` seconds in all) for orbax's own threads of a failed save to end. A save that
  failed leaves them running for a few milliseconds; if the interpreter shuts down meanwhile, one that starts
  a thread then fails ("can't create new thread at interpreter shutdown") and the others wait 300 s for a signal
  it never sends: the process then exits five minutes after its one-line report (orbax 0.12.4, a race: the
  interpreter's shutdown against the threads' last few milliseconds)."""
  end = time.monotonic() + timeout
  for thread in threading.enumerate():
    if thread is not threading.current_thread() and type(thread).__module__.startswith("orbax."):
      threading.Thread.join(thread, max(0.0, end - time.monotonic()))  # (orbax's join raises their errors)


def _forbidden(step_dir) -> str | None:
  """The first path under the local folder `step_dir` (itself included) that this process may not read — a
  folder it cannot list or enter, a file it cannot open — or None (also for a bucket, whose access is not a
  file mode). (`os.access` checks the process's real user, which is the user its reads run as unless the
  interpreter runs setuid.)"""
  top = str(step_dir)
  if "://" in top:
    return None
  if not os.access(top, os.R_OK | os.X_OK):
    return top
  for folder, dirs, files in os.walk(top):
    for name in dirs:
      if not os.access(os.path.join(folder, name), os.R_OK | os.X_OK):
        return os.path.join(folder, name)
    for name in files:
      if not os.access(os.path.join(folder, name), os.R_OK):
        return os.path.join(folder, name)
  return None


def _paths(tree) -> set[str]:
  return {jax.tree_util.keystr(p, simple=True, separator="/")
          for p, _ in jax.tree_util.tree_leaves_with_path(tree)}


def _shapes(tree) -> dict[str, tuple]:
  return {jax.tree_util.keystr(p, simple=True, separator="/"): tuple(getattr(x, "shape", ()))
          for p, x in jax.tree_util.tree_leaves_with_path(tree)}


class Checkpoints:
  """The `last` and `best` checkpoints of one run."""

  def __init__(self, directory, read_only: bool = False):
    """`read_only` for readers (analyses of a finished or running run): they never write, create folders or
    touch a training run's unfinished save. A writer (the training loops) removes the debris of a save that
    was killed half-way, `<step>.orbax-checkpoint-tmp`, which orbax never restores; the complete steps
    beside it are kept."""
    directory = epath.Path(directory)  # a local folder or a bucket (orbax writes both)
    self.directory = directory.absolute() if "://" not in str(directory) else directory
    self.read_only = read_only
    self._managers = {kind: self._manager(kind) for kind in ("last", "best")}
    if not read_only:
      for logger in (logging.get_absl_logger(), std_logging.getLogger("asyncio")):  # (orbax logs through absl)
        if _SHORTEN not in logger.filters:
          logger.addFilter(_SHORTEN)

  def _manager(self, kind: str) -> ocp.CheckpointManager:
    opts = ocp.CheckpointManagerOptions(max_to_keep=KEEP[kind], create=not self.read_only,
                                        read_only=self.read_only, cleanup_tmp_directories=not self.read_only)
    return ocp.CheckpointManager(
        self.directory / kind, options=opts,
        item_handlers={"state": ocp.StandardCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()})

  def steps(self, kind: str = "last") -> list[int]:
    return sorted(self._managers[kind].all_steps())

  def latest_step(self, kind: str = "last") -> int | None:
    return self._managers[kind].latest_step()

  def save(self, kind: str, step: int, state: Any, meta: dict) -> None:
    """Write a checkpoint and wait for it (a run killed right after still has it). A save that fails because
    the disk or quota is full raises OSError(ENOSPC) naming the folder (orbax reports it as TensorStore's
    RESOURCE_EXHAUSTED in a ValueError): the entry points print it as one line. The step's unfinished folder
    is orbax's temporary one; the steps saved before it are kept, and the same command resumes from them.
    (orbax's own reports of that error are shortened to their messages: `_DiskFullReportsShortened`.)"""
    mngr = self._managers[kind]
    try:
      with _unraisable_dropped(_loop_closed, stays=_disk_full):  # (writes orbax abandoned: reported once, below)
        mngr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                meta=ocp.args.JsonSave(meta)), force=True)
        mngr.wait_until_finished()
    except Exception as e:
      if not _disk_full(e):
        raise
      _orbax_threads_joined()
      kept = [s for s in mngr.all_steps() if s != step]
      raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (checkpoint {kind} step {step} not written; "
                    + (f"step {max(kept)} is kept, and the same command resumes from it)" if kept
                       else "no step of it had been saved)"), str(self.directory / kind)) from None

  def restore(self, kind: str, target: Any, step: int | None = None) -> tuple[Any, dict]:
    """Restore (state, meta) into the structure of `target`; raises CheckpointMismatchError if trees differ."""
    mngr, step, saved = self._saved_metadata(kind, step)
    saved_params, want_params = _shapes(saved["params"]), _shapes(target["params"])
    if saved_params != want_params:
      only_saved = sorted(set(saved_params) - set(want_params))
      only_want = sorted(set(want_params) - set(saved_params))
      reshaped = sorted(k for k in set(saved_params) & set(want_params)
                        if saved_params[k] != want_params[k])
      raise CheckpointMismatchError(
          f"The checkpoint in {self.directory / kind} (step {step}) does not fit the model this config "
          f"builds: parameters only in the checkpoint: {only_saved or 'none'}; only in the model: "
          f"{only_want or 'none'}; different shapes: {reshaped or 'none'}. A tied checkpoint cannot be "
          f"restored into an untied model or the reverse: use the config that wrote it, or a new --workdir.")
    if _paths(saved) != _paths(target):
      raise CheckpointMismatchError(
          f"The checkpoint in {self.directory / kind} (step {step}) has a different training-state tree "
          f"(optimizer or recurrent state) from this config's; use the config that wrote it or a new "
          f"--workdir.")
    abstract = jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, target)
    with self._permission_named(kind, step):
      restored = mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                                            meta=ocp.args.JsonRestore()))
    return restored["state"], restored["meta"]

  def _saved_metadata(self, kind: str, step: int | None) -> tuple[ocp.CheckpointManager, int, Any]:
    """(`kind`'s manager, `step` or the latest, the saved state's tree of array metadata) for a restore;
    FileNotFoundError if `kind` has no step."""
    mngr = self._managers[kind]
    step = mngr.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f"No {kind!r} checkpoint in {self.directory}.")
    with self._permission_named(kind, step):
      return mngr, step, mngr.item_metadata(step)["state"]

  @contextlib.contextmanager
  def _permission_named(self, kind: str, step: int):
    """Reading `<kind>/<step>`: if the read fails and a file or folder of the step is one this process may not
    read, raise `CheckpointUnreadableError` naming it (orbax reports a missing permission as a missing item or
    a TensorStore error); any other failure propagates unchanged."""
    try:
      yield
    except Exception as e:
      forbidden = _forbidden(self.directory / kind / str(step))
      if forbidden is None:
        raise
      raise CheckpointUnreadableError(
          f"Checkpoint {self.directory / kind / str(step)} (step {step}) is not readable by this user (permission "
          f"denied: {forbidden}); nothing was moved. Give this user read access and run the same command "
          f"again.") from e

  def restore_intact(self, target: Any, kinds: tuple[str, ...] = ("last", "best")) -> tuple[Any, dict, str, int] | None:
    """(state, meta, kind, step) of the newest readable checkpoint of `kinds` — `last` steps newest first, then
    `best` — or None when there is none. A step that cannot be read is reported in one line and moved aside to
    `<step>.unreadable` (so that training can write that step again); a checkpoint of another model
    (`CheckpointMismatchError`) or one whose files this process may not read (`CheckpointUnreadableError`:
    a permission, which the user can fix; the step stays where it is) is an error, not damage."""
    fell_back = False
    for kind in kinds:
      for step in reversed(self.steps(kind)):
        try:
          with _abandoned_reads_silenced(self.directory / kind / str(step)):
            state, meta = self.restore(kind, target, step)
        except (CheckpointMismatchError, CheckpointUnreadableError):
          raise
        except Exception as e:  # noqa: BLE001 (whatever orbax or TensorStore raise for damaged files)
          first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
          logging.warning("Checkpoint %s (step %d) cannot be read: %s — moved to %s.unreadable; falling back "
                          "to an older checkpoint.", self.directory / kind / str(step), step, first, step)
          self._set_aside(kind, step, "unreadable")
          fell_back = True
          continue
        if fell_back:  # the run replays the steps after `step`: a `best` saved among them is saved again
          for newer in [s for s in self.steps("best") if s > step]:
            logging.warning("Checkpoint %s (step %d) is newer than the step the run resumes from — moved to "
                            "%d.superseded; the run saves that step again.", self.directory / "best" / str(newer),
                            newer, newer)
            self._set_aside("best", newer, "superseded")
        return state, meta, kind, step
    return None

  def _set_aside(self, kind: str, step: int, suffix: str) -> None:
    """Rename `<kind>/<step>` to `<step>.<suffix>` (kept, never deleted; orbax no longer lists it) and reopen
    that kind's manager, which would otherwise still count the step as saved."""
    path = self.directory / kind / str(step)
    self._managers[kind].close()
    path.rename(path.with_name(f"{step}.{suffix}"))
    self._managers[kind] = self._manager(kind)

  def restore_saved(self, kind: str = "last", step: int | None = None) -> tuple[Any, dict]:
    """(state, meta) exactly as saved, as host arrays, without a target tree: for analyses that only read
    the parameters of a finished run (`experiments.embeddings`)."""
    mngr, step, saved = self._saved_metadata(kind, step)
    abstract = jax.tree_util.tree_map(lambda m: jax.ShapeDtypeStruct(tuple(m.shape), m.dtype), saved)
    with self._permission_named(kind, step):
      restored = mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                                            meta=ocp.args.JsonRestore()))
    return jax.device_get(restored["state"]), restored["meta"]

  def close(self) -> None:
    for m in self._managers.values():
      m.close()
