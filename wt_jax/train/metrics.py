"""Metrics as JSON lines (and TensorBoard scalars), and the learning-curve plot drawn from them."""
from __future__ import annotations

import json
import math
from pathlib import Path


def quiet_library_logs() -> None:
  """Drop orbax's INFO chatter from the absl log (warnings and errors still pass)."""
  import logging as std_logging

  class _Filter(std_logging.Filter):
    def filter(self, record):
      return record.levelno >= std_logging.WARNING or "orbax" not in record.pathname

  std_logging.getLogger("absl").addFilter(_Filter())


class MetricsWriter:
  """Appends one JSON object per line to `path` (safe across resumes: never truncates) and, with
  `tensorboard_dir`, writes the same numbers as TensorBoard scalars (tensorboardX: no TensorFlow needed)
  named `<kind>/<field>` at the record's step, for a live view: `tensorboard --logdir runs/`."""

  def __init__(self, path: str | Path, tensorboard_dir: str | Path | None = None):
    self.path = Path(path)
    self.path.parent.mkdir(parents=True, exist_ok=True)
    self._tb = None
    if tensorboard_dir is not None:
      from tensorboardX import SummaryWriter
      self._tb = SummaryWriter(str(tensorboard_dir), flush_secs=30)

  def write(self, **record) -> None:
    with open(self.path, "a") as f:
      f.write(json.dumps(finite(record), allow_nan=False) + "\n")
    if self._tb is not None:
      kind, step = record.get("kind", "metrics"), int(record.get("step", 0))
      for key, value in record.items():
        if key not in ("kind", "step") and isinstance(value, (int, float)) and not isinstance(value, bool):
          self._tb.add_scalar(f"{kind}/{key}", value, step)

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()


def finite(value):
  """`value` with every NaN/±inf float replaced by None (JSON has no such numbers)."""
  if isinstance(value, float):
    return value if math.isfinite(value) else None
  if isinstance(value, dict):
    return {k: finite(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [finite(v) for v in value]
  return value


def read(path: str | Path) -> list[dict]:
  path = Path(path)
  if not path.exists():
    return []
  return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_curves(metrics_path: str | Path, png_path: str | Path, title: str = "") -> Path | None:
  """Train and valid perplexity per epoch (from the 'epoch' records) → PNG. Returns the path, or None."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  epochs = {}
  for r in read(metrics_path):
    if r.get("kind") == "epoch":
      epochs[r["epoch"]] = r  # a resumed run may repeat an epoch: keep the last record
  if not epochs:
    return None
  xs = sorted(epochs)
  fig, ax = plt.subplots(figsize=(6, 4))
  for key, label in (("train_ppl", "train"), ("valid_ppl", "valid")):
    ys = [epochs[e].get(key, math.nan) for e in xs]
    ax.plot(xs, ys, marker="o", label=label)
  ax.set_xlabel("epoch")
  ax.set_ylabel("perplexity")
  ax.set_yscale("log")
  ax.grid(True, which="both", alpha=0.3)
  ax.legend()
  ax.set_title(title)
  fig.tight_layout()
  fig.savefig(png_path, dpi=100)
  plt.close(fig)
  return Path(png_path)
