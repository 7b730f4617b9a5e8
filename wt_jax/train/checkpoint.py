"""Checkpoints with orbax: the latest state (every epoch, and every N steps if asked) and the best by
validation perplexity, each in its own CheckpointManager under `<workdir>/checkpoints/{last,best}`.

A checkpoint holds the task's state pytree (e.g. `{'params', 'opt_state', 'step', 'carry'}`) and a JSON
`meta` dict (progress, history, the config). Restoring into a model whose parameter tree differs (a tied
checkpoint into an untied model, or the reverse) raises `CheckpointMismatchError` naming the differing
parameters. The two newest `last` steps are kept: when the newest cannot be read (a machine lost mid-write, a
damaged disk), `restore_intact` says so in one line, moves it aside (`<step>.unreadable`, never deleted) and
falls back to the previous step, then to `best`; a `best` step newer than the one resumed from is moved aside
too (`<step>.superseded`), since the run replays that step and saves it again. A step this process may not read
(a file or folder of another user's, without read permission) is not damage: `CheckpointUnreadableError` names the
path and nothing is moved, so the run does not start over from an older step while its newest is intact. Each step
saved by one process on a local disk lists its files as saved (`MANIFEST`: bytes and CRC-32 of each), and a step
that no longer matches its list is found damaged before orbax reads it: orbax's reads of a damaged step fail part
way and leave the others running, which report themselves later as unraisable exceptions (BUILD_NOTES §70). A save
the full disk refuses is one line too (`Checkpoints.save`); orbax's own reports of it (its writers' tracebacks,
abandoned writes) may come before or after that line and are left as orbax prints them.
"""
from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import zlib
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp
from etils import epath

import wt_jax.files as files

log = logging.getLogger(__name__)

KEEP = {"last": 2, "best": 1}  # steps kept per kind: the previous `last` survives a damaged newest one
MANIFEST = "wt_jax_files.json"  # in a step's folder: {path in the step: [bytes, CRC-32]} of every file as saved


class CheckpointMismatchError(ValueError):
  """The checkpoint's tree does not match the tree the current config builds."""


class CheckpointUnreadableError(PermissionError):
  """A checkpoint's files exist but this process is not permitted to read them."""


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
    The manager is closed and opened again first (`CheckpointManager.close` waits for its writers: a process
    that exits while they still run can wait for them at shutdown)."""
    mngr = self._managers[kind]
    try:
      mngr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)),
                force=True)
      mngr.wait_until_finished()
      if files.is_local(self.directory) and jax.process_count() == 1:
        self._list_files(self.directory / kind / str(step))
    except Exception as e:
      if not disk_full(e):
        raise
      with contextlib.suppress(Exception):  # (it raises the writers' errors again)
        mngr.close()
      mngr = self._managers[kind] = self._manager(kind)
      kept = [s for s in mngr.all_steps() if s != step]
      raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (checkpoint {kind} step {step} not written; "
                    + (f"step {max(kept)} is kept, and the same command resumes from it)" if kept
                       else "no step of it had been saved)"), str(self.directory / kind)) from None

  @staticmethod
  def _list_files(folder) -> None:
    """`folder`/MANIFEST: its files as saved. A step saved without one (a full disk here) is read by orbax alone."""
    try:
      files.write_json(folder / MANIFEST, _files_of(Path(os.fspath(folder))))
    except OSError as e:
      log.warning("Could not list the files of %s (%s); a damage to it will be found by orbax's read.", folder, e)

  def _not_as_saved(self, kind: str, step: int) -> str | None:
    """How `<kind>/<step>` differs from its MANIFEST (a file missing, shorter or longer, other bytes), or None: it
    matches, or has no list (saved before lists were kept, on a bucket, by several processes), or a file of it is
    one this process may not read (`restore` names that)."""
    folder = Path(os.fspath(self.directory / kind / str(step)))
    if not files.is_local(self.directory) or not (folder / MANIFEST).is_file():
      return None
    try:
      saved, now = json.loads((folder / MANIFEST).read_text()), _files_of(folder)
    except PermissionError:
      return None
    except (OSError, ValueError) as e:
      return f"its file list {MANIFEST} cannot be read ({type(e).__name__})"
    for name, (size, crc) in saved.items():
      if name not in now:
        return f"{name} is missing"
      if now[name][0] != size:
        return f"{name} holds {now[name][0]:,} bytes, saved with {size:,}"
      if now[name][1] != crc:
        return f"{name} holds other bytes than were saved (CRC-32)"
    return None

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
    if set(_shapes(saved)) != set(_shapes(target)):
      raise CheckpointMismatchError(
          f"The checkpoint in {self.directory / kind} (step {step}) has a different training-state tree "
          f"(optimizer or recurrent state) from this config's; use the config that wrote it or a new "
          f"--workdir.")
    return self._read(mngr, kind, step, jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, target))

  def _read(self, mngr: ocp.CheckpointManager, kind: str, step: int, abstract: Any) -> tuple[Any, dict]:
    """(state, meta) of `kind`'s `step`, the state read into `abstract` (shapes, dtypes and shardings)."""
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
      forbidden = files.first_unreadable(self.directory / kind / str(step))
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
          damage = self._not_as_saved(kind, step)
          if damage:
            raise ValueError(damage)  # (found before orbax reads it)
          state, meta = self.restore(kind, target, step)
        except (CheckpointMismatchError, CheckpointUnreadableError):
          raise
        except Exception as e:  # noqa: BLE001 (whatever orbax or TensorStore raise for damaged files)
          first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
          log.warning("Checkpoint %s (step %d) cannot be read: %s — moved to %s.unreadable; falling back "
                          "to an older checkpoint.", self.directory / kind / str(step), step, first, step)
          self._set_aside(kind, step, "unreadable")
          fell_back = True
          continue
        if fell_back:  # the run replays the steps after `step`: a `best` saved among them is saved again
          for newer in [s for s in self.steps("best") if s > step]:
            log.warning("Checkpoint %s (step %d) is newer than the step the run resumes from — moved to "
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
    the parameters of a finished run (`experiments.embeddings`). Every array is read whole onto one device, so a
    run saved from several devices reads in a process with another number of them."""
    mngr, step, saved = self._saved_metadata(kind, step)
    one = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    state, meta = self._read(mngr, kind, step, jax.tree_util.tree_map(
        lambda m: jax.ShapeDtypeStruct(tuple(m.shape), m.dtype, sharding=one), saved))
    return jax.device_get(state), meta

  def close(self) -> None:
    for m in self._managers.values():
      m.close()


def _files_of(folder: Path) -> dict:
  """{path in `folder`: [bytes, CRC-32]} of every file under `folder` but MANIFEST."""
  out = {}
  for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST):
    crc = 0
    with open(path, "rb") as f:
      while chunk := f.read(1 << 24):
        crc = zlib.crc32(chunk, crc)
    out[path.relative_to(folder).as_posix()] = [path.stat().st_size, crc]
  return out


def disk_full(error: BaseException) -> bool:
  """Whether `error`, or an error it was raised from, says the disk or quota is full: an OSError ENOSPC or EDQUOT,
  or TensorStore's RESOURCE_EXHAUSTED for a failed write (what orbax raises, in a ValueError)."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
      return True
    if "RESOURCE_EXHAUSTED" in str(error) and "writ" in str(error).lower():
      return True
    error = error.__cause__ or error.__context__
  return False
