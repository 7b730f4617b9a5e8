"""What the trainer (`wt_jax.train.trainer.run`) knows of a task: `LMTask`, `NMTTask` and `SkipGramTask` implement
this, and a new task is one more class with these members — the loop itself never changes."""
from __future__ import annotations

from typing import Any, Iterator, Protocol

from etils import epath


class Task(Protocol):
  """What the skeleton knows of a task. `state` is a dict with at least 'params' and 'step'. A members task's
  numbers (sums, progress and validation numbers) are [K] arrays, member k's in place k (`lm.MembersTask`)."""

  config: Any  # the run's config (what `run` records)
  num_epochs: int
  steps_per_epoch: int  # nominal (progress lines); an epoch ends when `batches` ends
  max_steps: int  # > 0: stop after this many steps (smoke runs)
  tokens_per_step: int | None  # for the tokens/s of progress lines (None: steps/s only)
  selection: tuple[str, str] | None  # (validation metric, 'min' | 'max') that picks `best`; None: no best
  num_devices: int  # the data-parallel devices the step runs on
  member_runs: tuple  # a members run's (folder, config) of each member (`members_run`); () for one model

  def init_state(self) -> Any: ...
  def start_epoch(self, state: Any, epoch: int) -> Any: ...  # e.g. reset a recurrent carry
  def batches(self, epoch: int, start: int) -> Iterator[tuple[Any, int]]: ...  # (batch, steps it takes)
  def train_step(self, state: Any, *batch: Any) -> tuple[Any, dict]: ...  # → (state, sums: a scalar per key)
  def train_metrics(self, sums: dict, step: int) -> dict: ...  # the epoch's sums so far → progress numbers
  def validate(self, state: Any, epoch: int) -> dict: ...  # the epoch's validation numbers
  def final(self, state: Any, best_state: Any, meta: dict, sums: dict) -> dict: ...  # the task's results
  def write_run_files(self, folder: epath.Path, resumed: bool) -> None: ...  # e.g. vocab.txt (checked at a resume)
