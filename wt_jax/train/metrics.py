"""Metrics as JSON lines, and the learning-curve plot drawn from them."""
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
  """Appends one JSON object per line to `path` (safe across resumes: never truncates)."""

  def __init__(self, path: str | Path):
    self.path = Path(path)
    self.path.parent.mkdir(parents=True, exist_ok=True)

  def write(self, **record) -> None:
    with open(self.path, "a") as f:
      f.write(json.dumps(record) + "\n")


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
