"""Metrics as JSON lines (and TensorBoard scalars), the learning-curve plot drawn from them, and profiles of
chosen train steps."""
from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import socket
import statistics
import time

import jax
from etils import epath
from tensorboardX import record_writer, summary
from tensorboardX.proto import event_pb2

import wt_jax.files as files

log = logging.getLogger(__name__)


class MetricsWriter:
  """Appends one JSON object per line to `path` (never truncates: safe across resumes) and, with
  `tensorboard_dir`, writes the same numbers as TensorBoard scalars (`Events`) named `<kind>/<field>` at the
  record's step, for a live view: `tensorboard --logdir runs/`.

  `path` is any `etils.epath` path. A bucket has no append: there the lines are kept in memory and the file
  is rewritten by `flush()` (the trainer flushes at every checkpoint and at the end). A local file whose last
  line was cut mid-write is mended first (`files.mend_cut_line`). metrics.jsonl is the record; the events are a
  view beside it, so a failure to write them (a full disk) is one warning, and the run goes on without them."""

  def __init__(self, path, tensorboard_dir=None):
    self.path = epath.Path(path)
    self.path.parent.mkdir(parents=True, exist_ok=True)
    self._local = files.is_local(self.path)
    if self._local:
      files.mend_cut_line(self.path)
    self._lines = None if self._local else (self.path.read_text().splitlines(True) if self.path.exists() else [])
    self._tb = None
    if tensorboard_dir is not None:
      try:
        self._tb = Events(str(tensorboard_dir))
      except Exception as e:  # noqa: BLE001 (e.g. a bucket without google-cloud-storage installed)
        log.warning("No TensorBoard events for %s (%s); metrics.jsonl is still written.",
                        tensorboard_dir, str(e).splitlines()[0] if str(e) else type(e).__name__)

  def write(self, **record) -> None:
    line = json.dumps(files.finite(record), allow_nan=False) + "\n"
    if self._local:
      try:
        with open(self.path, "a") as f:
          f.write(line)
      except OSError as e:  # (a failed write() names no file: a full disk's message would say no path)
        raise (e if e.filename else OSError(e.errno, e.strerror, str(self.path))) from None
    else:
      self._lines.append(line)
    kind, step = record.get("kind", "metrics"), int(record.get("step", 0))
    scalars = {}  # (a members run's [K] list: `kind/key/k`, one per member)
    for key, value in record.items():
      for k, v in (enumerate(value) if isinstance(value, list) else [(None, value)]):
        if key not in ("kind", "step") and isinstance(v, (int, float)) and not isinstance(v, bool):
          scalars[f"{kind}/{key}" + ("" if k is None else f"/{k}")] = v
    self._tensorboard(lambda tb: tb.scalars(scalars, step))

  def flush(self) -> None:
    if not self._local:
      self.path.write_text("".join(self._lines))
    self._tensorboard(lambda tb: tb.flush())

  def close(self) -> None:
    self.flush()
    self._tensorboard(lambda tb: tb.close())
    self._tb = None

  def _tensorboard(self, do) -> None:
    """`do(events)`; an OSError (a full disk) is a warning, after which no more events are written and the
    event file is closed (its unwritten events are lost): it never hides the error that ended the run, nor ends
    a run itself."""
    if self._tb is None:
      return
    try:
      do(self._tb)
    except OSError as e:
      log.warning("TensorBoard events could not be written (%s); metrics.jsonl holds the same numbers.", e)
      events, self._tb = self._tb, None
      with contextlib.suppress(OSError):  # (closing flushes again, fails again, and closes the file all the same)
        events.close()


class Events:
  """One TensorBoard event file in `folder` (a local folder or a bucket), written in the calling thread through
  tensorboardX's record writer: no writer thread, so a full disk is an OSError here (at a write or a flush).
  tensorboardX's `SummaryWriter` writes from a thread that dies on that error, after which its bounded queue blocks
  the training loop for good (BUILD_NOTES §64). Flushed at least every `FLUSH_S` seconds of writes, for the
  live view, and whenever the trainer flushes metrics.jsonl. `records`: the file's tensorboardX `RecordWriter`."""

  FLUSH_S = 30.0

  def __init__(self, folder: str):
    if "://" in folder:  # tensorboardX writes buckets itself, through google-cloud-storage (the `gcs` extra)
      import google.cloud.storage  # noqa: F401
    epath.Path(folder).mkdir(parents=True, exist_ok=True)
    name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}"
    self.records = record_writer.RecordWriter(f"{folder.rstrip('/')}/{name}")
    self.records.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
    self.flush()

  def scalars(self, values: dict, step: int) -> None:
    for tag, value in values.items():
      self.records.write(event_pb2.Event(wall_time=time.time(), step=step,
                                         summary=summary.scalar(tag, value)).SerializeToString())
    if time.monotonic() - self._flushed >= self.FLUSH_S:
      self.flush()

  def flush(self) -> None:
    self.records.flush()
    self._flushed = time.monotonic()

  def close(self) -> None:
    self.records.close()


def plot_curves(metrics_path, png_path, title: str = "") -> epath.Path | None:
  """Train and valid perplexity per epoch (from the 'epoch' records) → PNG. Returns the path, or None. A line
  that is not a record (a damaged file) is left out of the picture with a warning: the curves are a glance,
  and the run's results are read from elsewhere."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  records, damaged = files.read_jsonl(metrics_path)
  # (a resumed run may repeat an epoch: the last record counts)
  epochs = {r["epoch"]: r for r in records if r.get("kind") == "epoch" and "epoch" in r}
  if damaged:
    log.warning("%s: %d line(s) are not JSON records; %s leaves them out.", metrics_path, damaged, png_path)
  if not epochs:
    return None
  xs = sorted(epochs)
  fig, ax = plt.subplots(figsize=(6, 4))
  for key, label in (("train_ppl", "train"), ("valid_ppl", "valid")):
    ys = [math.nan if epochs[e].get(key) is None else epochs[e][key] for e in xs]  # (null: not finite)
    ax.plot(xs, ys, marker="o", label=label)
  ax.set_xlabel("epoch")
  ax.set_ylabel("perplexity")
  ax.set_yscale("log")
  ax.grid(True, which="both", alpha=0.3)
  ax.legend()
  ax.set_title(title)
  fig.tight_layout()
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png", dpi=100)
  plt.close(fig)
  png_path = epath.Path(png_path)
  png_path.write_bytes(buffer.getvalue())
  return png_path


def summary_line(shown: list[dict], live: list[bool], names: list[str] | None = None) -> str:
  """A members run's progress numbers (`shown[k]`: member k's): their mean and range over the members training
  (`live`). When the members are of different configs (`names[k]`, member k's config name), each config's members
  are summarised apart ("| vd: train_ppl …  | al: train_ppl …"): a mean over different settings says nothing about
  either."""
  K = len(shown)
  parts = [f"members {K} ({K - sum(live)} diverged)"]
  groups = {}  # name → its members' indices, in the members' order
  for k, name in enumerate(names if names and len(set(names)) > 1 else [None] * K):
    groups.setdefault(name, []).append(k)
  for name, ks in groups.items():
    rows = [shown[k] for k in ks if live[k]] or [shown[k] for k in ks]
    stats = []
    for key in rows[0]:
      vals = [s[key] for s in rows if isinstance(s.get(key), float)]
      if vals:
        stats.append(f"{key} {statistics.fmean(vals):.4g}" +
                     (f" [{min(vals):.4g}–{max(vals):.4g}]" if len(vals) > 1 and min(vals) != max(vals) else ""))
    parts.append(("" if name is None else f"| {name}: ") + "  ".join(stats))
  return "  ".join(parts)


class Clock:
  """Seconds spent in training steps (`train_s`), counted in stretches that `tick` closes and `restart` opens (so
  evaluation and checkpoints are left out), and when the last progress line was shown (`last_line`)."""

  def __init__(self, train_s: float, step: int):
    self.train_s, self.t0, self.step0 = train_s, time.time(), step
    self.last_line = None

  def tick(self, step: int) -> float:
    """Close the current stretch at `step`; returns its steps/s."""
    now = time.time()
    dt = max(now - self.t0, 1e-9)
    rate = (step - self.step0) / dt
    self.train_s, self.t0, self.step0 = self.train_s + dt, now, step
    return rate

  def restart(self, step: int) -> None:
    self.t0, self.step0 = time.time(), step


class NoWriter:
  """Stands in for the metrics writer in processes other than 0: writes nothing."""

  write = flush = close = lambda self, **record: None


class Profiler:
  """Traces `steps` train steps with `jax.profiler` into `directory` (TensorBoard's profile plugin or
  Perfetto read it), starting after the first step of the process, so compilation is not in the trace."""

  def __init__(self, directory: epath.Path, steps: int):
    if steps and not files.is_local(directory):
      log.warning("profile_steps: traces are written to local folders only; give a local --workdir.")
      steps = 0
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
      self.close()
      log.info("Wrote a profile of %d steps to %s.", self.steps, self.directory)

  def close(self) -> None:
    if self.on:
      jax.profiler.stop_trace()
      self.on = False
