"""A study's run records: import finished runs into results/<report>/ (results.json and curve.jsonl, the
per-epoch records), read them back grouped by config, and format a cell of several seeds."""
from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

from absl import logging

from wt_jax.train import metrics

CURVE = "curve.jsonl"  # a run's per-epoch records (the 'epoch' lines of its metrics.jsonl)


def epoch_records(metrics_path) -> list[dict]:
  """The 'epoch' records of a metrics.jsonl, one per epoch (a resumed run may repeat one: the last wins)."""
  epochs = {}
  for rec in metrics.read(metrics_path):
    if rec.get("kind") == "epoch":
      epochs[rec["epoch"]] = rec
  return [epochs[e] for e in sorted(epochs)]



def import_runs(runs_dir: Path, dest: Path) -> list[str]:
  """Copy the small outputs of every finished run in `runs_dir` into `dest`; returns the run names."""
  imported = []
  for run in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
    if not (run / "results.json").exists():
      logging.info("skipping %s: no results.json (unfinished)", run)
      continue
    target = dest / run.name
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(run / "results.json", target / "results.json")
    # a run's workdir holds metrics.jsonl; a record collected by experiments.gpu_table5 holds curve.jsonl
    source = run / "metrics.jsonl" if (run / "metrics.jsonl").exists() else run / CURVE
    records = epoch_records(source)
    if not records:
      logging.warning("%s: no epoch records in metrics.jsonl or %s; its curve will be empty", run, CURVE)
    (target / CURVE).write_text("".join(json.dumps(r) + "\n" for r in records))
    imported.append(run.name)
  return imported


def load_runs(report_dir: Path, dataset: str = "ptb") -> dict[str, list[dict]]:
  """config name → the results.json of its runs (sorted by seed), each with its epoch history. Every run
  must be on `dataset` (runs from before results.json recorded it were all on PTB)."""
  by_config: dict[str, list[dict]] = {}
  for path in sorted(report_dir.glob("*/results.json")):
    r = json.loads(path.read_text())
    if r.get("dataset", "ptb") != dataset:
      raise ValueError(f"{path} is a run on {r.get('dataset', 'ptb')!r}, but this report is for {dataset!r}.")
    r["_dir"] = path.parent.name
    r["_valid_curve"] = [(rec["epoch"], rec["valid_ppl"]) for rec in metrics.read(path.parent / CURVE)]
    by_config.setdefault(r["config"], []).append(r)
  for runs in by_config.values():
    runs.sort(key=lambda r: r["seed"])
  return by_config


def _cell(values: list[float]) -> str:
  if not values:
    return "—"
  if len(values) == 1:
    return f"{values[0]:.1f}"
  return f"{statistics.mean(values):.1f} ({', '.join(f'{v:.1f}' for v in values)})"
