"""A run's folder (`wt_jax.train.trainer`): what the trainer meets before its first step and after its last.

    with RunFolder(workdir, task) as folder:   the lock taken (`workdir_lock`: run.lock, one live run per folder),
                                               the folder checked writable, the metrics writer opened
    folder.start(...)                          run.json written, or checked at a resume (`run_record.record_run`),
                                               and the task's own files (vocab.txt)
    folder.records, best, best_epoch           the model's epochs, its best validation number and epoch
    folder.finish(...)                         results.json (the keys every task has, then the task's own)

The non-finite policy is `check_or_stop`. A members run (`wt_jax.train.members_run`) keeps a folder per member.
"""
from __future__ import annotations

import contextlib
import math

import jax
import jax.numpy as jnp
from etils import epath

import wt_jax.files as files
import wt_jax.parallel as parallel
from wt_jax.train import metrics as metrics_lib
from wt_jax.train.run_record import host, record_run
from wt_jax.train.workdir_lock import workdir_lock

# What a run writes again at a resume, in its folder: files rewritten or appended to, folders written in.
RUN_OUTPUTS = ("run.json", "metrics.jsonl", "results.json", "summary.json", "curves.png", "vocab.txt")
RUN_FOLDERS = ("", "checkpoints", "checkpoints/last", "checkpoints/best")
META_KEYS = ("history", "epoch_sums", "best", "best_epoch", "diverged")  # a model's record in a checkpoint's meta


class NonFiniteLossError(FloatingPointError):
  """The training loss (or a validation metric) became NaN or infinite; `why` says which, and when."""

  def __init__(self, message: str, why: str = ""):
    super().__init__(message)
    self.why = why or message


def check_or_stop(values: dict, why: str) -> None:
  """The non-finite policy: `NonFiniteLossError` if a float of `values` is NaN or infinite (`why` names it with
  {key} and {value})."""
  bad = next((key for key, v in values.items() if isinstance(v, float) and not math.isfinite(v)), None)
  if bad is not None:
    why = why.format(key=bad, value=values[bad])
    raise NonFiniteLossError(f"{why[0].upper()}{why[1:]}: the model diverged", why)


class Folder(contextlib.ExitStack):
  """A run's folder as a context: entering makes `path`, takes its lock (unless `lock` is False: a member's folder,
  under its run's lock), refuses before any work what a run could not write again there (process 0:
  `files.check_writable`), then `_open`s what the folder needs. A refusal releases what was taken (`with` calls no
  __exit__ for an __enter__ that raised)."""

  path: epath.Path
  lock: bool = True

  def __enter__(self):
    try:
      self.path.mkdir(parents=True, exist_ok=True)
      if self.lock:
        self.enter_context(workdir_lock(self.path))
      if parallel.is_writer():
        files.check_writable(self.path, RUN_OUTPUTS, RUN_FOLDERS)
      self._open()
    except BaseException:
      self.close()
      raise
    return self

  def _open(self) -> None:
    """What the folder opens once it is locked and checked (a writer, members' folders)."""


class RunFolder(Folder):
  """The folder of one model's run: its lock (`lock=False`: a member's folder, under its run's lock), metrics
  writer and record — `records` (one per epoch), `best` and `best_epoch` by `task.selection` (metric, 'min' |
  'max'; None: no best), `epoch_sums` (the epoch's train sums from before a resume, on the host) and `diverged`
  (None while it trains). `config`: the model's (the task's by default); `train_metrics(sums, step)`: its
  progress numbers (the task's by default)."""

  def __init__(self, path, task, config=None, train_metrics=None, lock: bool = True):
    super().__init__()
    self.path, self.task, self.lock = epath.Path(path), task, lock
    self.config, self.train_metrics = config or task.config, train_metrics or task.train_metrics
    self.records, self.epoch_sums, self.best, self.best_epoch, self.diverged = [], None, None, None, None

  def _open(self) -> None:
    self.writer = (metrics_lib.MetricsWriter(self.path / "metrics.jsonl", self.path) if parallel.is_writer()
                   else metrics_lib.NoWriter())
    self.callback(self.writer.close)  # however the run ends, TensorBoard's queued events reach the disk

  def start(self, run_config, run_versions: dict, resumed_from, saved_config) -> None:
    """run.json and the task's files (vocab.txt), written, or checked at a resume (`record.record_run`)."""
    if parallel.is_writer():
      record_run(self.path, run_config, run_versions, [], resumed_from, saved_config)
      self.task.write_run_files(self.path, resumed=resumed_from is not None)

  def meta(self, totals: dict) -> dict:
    """The record for a checkpoint's meta, with the epoch's train sums so far (`totals`)."""
    return dict(zip(META_KEYS, (self.records, totals, self.best, self.best_epoch, self.diverged)))

  def restore(self, meta: dict) -> None:
    self.records, self.epoch_sums, self.best, self.best_epoch, self.diverged = (meta.get(k) for k in META_KEYS)
    self.records = self.records or []

  def forget_best(self) -> None:
    self.best = self.best_epoch = None

  def new_epoch(self) -> None:
    self.epoch_sums = None

  def totals(self, sums) -> dict:
    """The epoch's train sums on the host: `epoch_sums` (from before a resume) plus this process's `sums`."""
    now, before = jax.device_get(sums) or {}, self.epoch_sums or {}
    return {key: before.get(key, 0.0) + float(now.get(key, 0.0)) for key in {**before, **now}}

  def progress(self, state, sums, step: int, epoch: int):
    """(state, the epoch's train sums on the host, their progress numbers) for the device `sums`;
    NonFiniteLossError if the sums or the numbers are not finite (a perplexity may overflow where its NLL sum does
    not). `state` comes back as it went in (a members run may freeze a member in it: `MembersFolder.progress`)."""
    totals = self.totals(sums)
    check_or_stop(totals, f"the training {{key}} became non-finite before step {step} (epoch {epoch})")
    shown = self.train_metrics(totals, step)
    check_or_stop(shown, f"the training {{key}} is {{value}} at step {step} (epoch {epoch})")
    return state, totals, shown

  def line(self, shown: dict, values: dict | None = None) -> str:
    """A progress line's numbers: the progress numbers `shown`, and an epoch's validation `values`."""
    return "  ".join(f"{k} {v:.4g}" for k, v in {**shown, **(values or {})}.items() if isinstance(v, float))

  def write_train(self, shown: dict, **common) -> None:
    self.writer.write(kind="train", **common, **shown)

  def flush(self) -> None:
    self.writer.flush()

  def add_epoch(self, state, best_state, head: dict, shown: dict, values: dict, train_s: float):
    """`add_record`, then (state, best state, whether it changed): a copy of `state` when the epoch is the best."""
    if not self.add_record(head, shown, values, train_s):
      return state, best_state, False
    return state, jax.tree_util.tree_map(jnp.copy, state), True

  def add_record(self, head: dict, shown: dict, values: dict, train_s: float, check: bool = True) -> bool:
    """The epoch's record ({epoch, step} `head`, the progress numbers `shown`, the task's validation `values`)
    appended and written, after `check_or_stop` (if `check`) → whether it is the best so far by `task.selection`."""
    record = {**head, **shown, **values}
    if check:
      check_or_stop(record, f"{{key}} is {{value}} after epoch {record['epoch']}")
    record["train_s"] = train_s
    self.writer.write(kind="epoch", **record)
    self.records.append(record)
    return self.task.selection is not None and self._improves(record)

  def _improves(self, record: dict) -> bool:
    """Whether `record` is the best so far (a diverged model keeps the best it had), noting it if so."""
    metric, mode = self.task.selection
    value = record[metric]
    if self.diverged is not None or (self.best is not None and not (value < self.best if mode == "min" else
                                                                     value > self.best)):
      return False
    self.best, self.best_epoch = value, record["epoch"]
    return True

  def results(self, meta: dict, final: dict, num_params: int, wall_s: float, resumed_from, run_versions: dict):
    """A results.json: the keys every task's has (`meta`: the run's progress), then the task's own (`final`)."""
    task = self.task
    return {
        "config": self.config.name, "num_params": num_params, "steps": meta["step"],
        "steps_per_epoch": task.steps_per_epoch,
        "epochs": len(self.records) + meta["pos"] / task.steps_per_epoch,  # finished + the fraction begun
        "history": self.records, "best_metric": task.selection[0] if task.selection else None,
        "best_epoch": self.best_epoch, "train_s": meta["train_s"], "wall_s": wall_s,
        "resumed_from_step": resumed_from, "seed": self.config.seed, "versions": run_versions, "host": host(),
        "devices": [str(d) for d in jax.devices()],
        "device_kind": jax.devices()[0].device_kind,  # e.g. "NVIDIA H100 80GB HBM3", "TPU v5 lite", "cpu"
        "num_devices": task.num_devices, "num_processes": jax.process_count(), **final}

  def write_results(self, out: dict) -> None:
    """results.json (process 0), and the learning curves (curves.png) if the config's `plot`."""
    if parallel.is_writer():
      files.write_json(self.path / "results.json", out)
      if self.config.get("plot", False):
        metrics_lib.plot_curves(self.path / "metrics.jsonl", self.path / "curves.png", title=out["config"])

  def finish(self, state, best_state, meta: dict, totals: dict, run_info: dict) -> dict:
    """The task's final evaluation (`task.final`) → results.json's dict, written."""
    final = self.task.final(state, best_state, {**meta, **self.meta(totals)}, totals)
    num_params = sum(x.size for x in jax.tree_util.tree_leaves(state["params"]))
    out = self.results(meta, final, num_params, **run_info)
    self.write_results(out)
    return out
