"""Checkpoints with orbax: the latest state (every epoch, and every N steps if asked) and the best by
validation perplexity, each in its own CheckpointManager under `<workdir>/checkpoints/{last,best}`.

A checkpoint holds a pytree `{'params', 'opt_state', 'carry', 'step'}` and a JSON `meta` dict (progress,
history, the config). Restoring into a model whose parameter tree differs (a tied checkpoint into an untied
model, or the reverse) raises `CheckpointMismatchError` naming the differing parameters.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp


class CheckpointMismatchError(ValueError):
  """The checkpoint's tree does not match the tree the current config builds."""


def _paths(tree) -> set[str]:
  return {jax.tree_util.keystr(p, simple=True, separator="/")
          for p, _ in jax.tree_util.tree_leaves_with_path(tree)}


def _shapes(tree) -> dict[str, tuple]:
  return {jax.tree_util.keystr(p, simple=True, separator="/"): tuple(getattr(x, "shape", ()))
          for p, x in jax.tree_util.tree_leaves_with_path(tree)}


class Checkpoints:
  """The `last` and `best` checkpoints of one run."""

  def __init__(self, directory: str | Path, read_only: bool = False):
    """`read_only` for readers (analyses of a finished or running run): they never write, create folders or
    touch a training run's unfinished save. A writer (the training loops) removes the debris of a save that
    was killed half-way, `<step>.orbax-checkpoint-tmp`, which orbax never restores; the complete steps
    beside it are kept."""
    self.directory = Path(directory).absolute()
    opts = ocp.CheckpointManagerOptions(max_to_keep=1, create=not read_only, read_only=read_only,
                                        cleanup_tmp_directories=not read_only)
    self._managers = {
        kind: ocp.CheckpointManager(
            self.directory / kind, options=opts,
            item_handlers={"state": ocp.StandardCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()})
        for kind in ("last", "best")
    }

  def latest_step(self, kind: str = "last") -> int | None:
    return self._managers[kind].latest_step()

  def save(self, kind: str, step: int, state: Any, meta: dict) -> None:
    """Write a checkpoint and wait for it (a run killed right after still has it)."""
    mngr = self._managers[kind]
    mngr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                            meta=ocp.args.JsonSave(meta)), force=True)
    mngr.wait_until_finished()

  def restore(self, kind: str, target: Any, step: int | None = None) -> tuple[Any, dict]:
    """Restore (state, meta) into the structure of `target`; raises CheckpointMismatchError if trees differ."""
    mngr = self._managers[kind]
    step = mngr.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f"No {kind!r} checkpoint in {self.directory}.")
    saved = mngr.item_metadata(step)["state"]
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
    restored = mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                                          meta=ocp.args.JsonRestore()))
    return restored["state"], restored["meta"]

  def restore_saved(self, kind: str = "last", step: int | None = None) -> tuple[Any, dict]:
    """(state, meta) exactly as saved, as host arrays, without a target tree: for analyses that only read
    the parameters of a finished run (`experiments.embeddings`)."""
    mngr = self._managers[kind]
    step = mngr.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f"No {kind!r} checkpoint in {self.directory}.")
    saved = mngr.item_metadata(step)["state"]
    abstract = jax.tree_util.tree_map(lambda m: jax.ShapeDtypeStruct(tuple(m.shape), m.dtype), saved)
    restored = mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                                          meta=ocp.args.JsonRestore()))
    return jax.device_get(restored["state"]), restored["meta"]

  def close(self) -> None:
    for m in self._managers.values():
      m.close()
