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



class ReportError(ValueError):
  """Input a page cannot be built from: a missing folder or record, a run that belongs to another page or
  corpus. `python -m experiments.report` prints it as one line."""

def epoch_records(metrics_path) -> list[dict]:
  """The 'epoch' records of a metrics.jsonl, one per epoch (a resumed run may repeat one: the last wins)."""
  epochs = {}
  for rec in metrics.read(metrics_path):
    if rec.get("kind") == "epoch":
      epochs[rec["epoch"]] = rec
  return [epochs[e] for e in sorted(epochs)]



def finished_runs(runs_dir: Path) -> list[tuple[str, Path]]:
  """(name, folder) of every finished run in `runs_dir`: a folder with a results.json, and each member of a
  members run (`wt_jax.members`: <run>/members/<k>/) as `<run>_m<k>`, except members that diverged."""
  found = []
  for run in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
    member_dirs = sorted((run / "members").glob("*/results.json"), key=lambda p: int(p.parent.name))
    if member_dirs:
      for path in member_dirs:
        diverged = (json.loads(path.read_text()).get("member") or {}).get("diverged")
        if diverged:
          logging.warning("skipping %s: the member diverged (%s)", path.parent, diverged.get("reason"))
          continue
        found.append((f"{run.name}_m{path.parent.name}", path.parent))
    elif (run / "results.json").exists():
      found.append((run.name, run))
    else:
      logging.info("skipping %s: no results.json (unfinished)", run)
  return found


def import_runs(runs_dir: Path, dest: Path) -> list[str]:
  """Copy the small outputs of every finished run in `runs_dir` (`finished_runs`) into `dest`; returns the
  run names."""
  imported = []
  for name, run in finished_runs(runs_dir):
    target = dest / name
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(run / "results.json", target / "results.json")
    # a run's workdir holds metrics.jsonl; a record collected by experiments.gpu_queue holds curve.jsonl
    source = run / "metrics.jsonl" if (run / "metrics.jsonl").exists() else run / CURVE
    records = epoch_records(source)
    if not records:
      logging.warning("%s: no epoch records in metrics.jsonl or %s; its curve will be empty", run, CURVE)
    (target / CURVE).write_text("".join(json.dumps(r) + "\n" for r in records))
    imported.append(name)
  return imported


def load_runs(report_dir: Path, dataset: str | None = "ptb", check=None) -> dict[str, list[dict]]:
  """config name → the results.json of its runs (sorted by seed), each with its epoch history (`_dir`, its
  folder's name; `_valid_curve`, (epoch, valid_ppl) pairs). Every run must be on `dataset` (runs from before
  results.json recorded it were all on PTB), or, with `dataset=None`, pass `check(path, results)`, which
  raises ValueError for a run that does not belong."""
  by_config: dict[str, list[dict]] = {}
  for path in sorted(report_dir.glob("*/results.json")):
    r = json.loads(path.read_text())
    if dataset is not None and r.get("dataset", "ptb") != dataset:
      raise ReportError(f"{path} is a run on {r.get('dataset', 'ptb')!r}, but this report is for {dataset!r}.")
    if check is not None:
      check(path, r)
    r["_dir"] = path.parent.name
    r["_valid_curve"] = [(rec["epoch"], rec["valid_ppl"]) for rec in metrics.read(path.parent / CURVE)]
    by_config.setdefault(r["config"], []).append(r)
  for runs in by_config.values():
    runs.sort(key=lambda r: r["seed"])
  return by_config


def seeds_cell(values: list[float]) -> str:
  """One run: its value; several (seeds, or the members of a run): mean ± the sample standard deviation over
  them, then each (seed order)."""
  if not values:
    return "—"
  if len(values) == 1:
    return f"{values[0]:.1f}"
  return (f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f} "
          f"({', '.join(f'{v:.1f}' for v in values)})")
