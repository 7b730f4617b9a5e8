"""A study's run records: import finished runs into results/<report>/ (results.json, curve.jsonl, the
per-epoch records, and a study's measures.json where the run has one), read them back grouped by config, format a cell of several seeds and read a difference
against their spread."""
from __future__ import annotations

import json
import logging
import shutil
import statistics
from pathlib import Path

import wt_jax.files as files

log = logging.getLogger(__name__)

CURVE = "curve.jsonl"  # a run's per-epoch records (the 'epoch' lines of its metrics.jsonl)
MEASURES = "measures.json"  # a study's measures of a finished run, where it has some (tying_surface_measures)



class ReportError(ValueError):
  """Input a page cannot be built from: a missing folder or record, a run that belongs to another page or
  corpus. `python -m experiments.report` prints it as one line."""

def epoch_records(metrics_path) -> list[dict]:
  """The 'epoch' records of a metrics.jsonl, one per epoch (a resumed run may repeat one: the last wins)."""
  epochs = {}
  for rec in files.read_jsonl(metrics_path)[0]:
    if rec.get("kind") == "epoch":
      epochs[rec["epoch"]] = rec
  return [epochs[e] for e in sorted(epochs)]



def finished_runs(runs_dir: Path) -> list[tuple[str, Path]]:
  """(name, folder) of every finished run in `runs_dir`: a folder with a results.json, and each member of a
  members run (`wt_jax.members`: <run>/members/<k>/) as `<run>_m<k>`, except members that diverged."""
  found = []
  for run in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
    member_dirs = sorted((p for p in (run / "members").glob("*/results.json") if p.parent.name.isdigit()),
                         key=lambda p: int(p.parent.name))  # (members/<k>/; another folder there is not one)
    if member_dirs:
      for path in member_dirs:
        diverged = (read_results(path).get("member") or {}).get("diverged")
        if diverged:
          log.warning("skipping %s: the member diverged (%s)", path.parent, diverged.get("reason"))
          continue
        found.append((f"{run.name}_m{path.parent.name}", path.parent))
    elif (run / "results.json").exists():
      found.append((run.name, run))
    else:
      log.info("skipping %s: no results.json (unfinished)", run)
  return found


def json_record(text: str, where, keys: tuple[str, ...] = ()) -> dict:
  """One JSON object holding `keys` (a record line or file), else `ReportError` naming `where`."""
  try:
    r = json.loads(text)
  except json.JSONDecodeError as e:
    raise ReportError(f"{where} is not JSON ({e}); a damaged or half-written record.") from e
  if not isinstance(r, dict) or not set(keys) <= set(r):
    raise ReportError(f"{where} is not a complete record (an object with {', '.join(map(repr, keys))}).")
  return r


def runs_folder(runs_dir: Path) -> Path:
  """`--runs`, which must be a folder, else `ReportError`."""
  if not runs_dir.is_dir():
    raise ReportError(f"--runs={runs_dir} is not a directory")
  return runs_dir


def read_results(path: Path, keys: tuple[str, ...] = ("config",)) -> dict:
  """A run's results.json, which must be a JSON object holding `keys`; else `ReportError` naming the file and
  what is wrong with it."""
  return json_record(path.read_text(errors="replace"), path, keys)


def import_runs(runs_dir: Path, dest: Path) -> list[str]:
  """Copy the small outputs of every finished run in `runs_dir` (`finished_runs`) into `dest` (results.json, the
  curve, measures.json where there is one); returns the run names. Every run is read first, and nothing is copied unless each has a results.json that is a run's
  (`read_results`) and at least one epoch record (in metrics.jsonl, or curve.jsonl for a record collected by
  experiments.gpu.run_queue): a damaged record raises `ReportError` and never replaces one already in `dest`."""
  staged = []
  for name, run in finished_runs(runs_dir):
    read_results(run / "results.json")
    if (run / MEASURES).is_file():
      json_record((run / MEASURES).read_text(errors="replace"), run / MEASURES)
    source = run / "metrics.jsonl" if (run / "metrics.jsonl").exists() else run / CURVE
    try:
      records = epoch_records(source)
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, AttributeError) as e:
      raise ReportError(f"{source} holds a line that is not a metrics record ({type(e).__name__}: {e}); not "
                        f"imported.") from e
    if not records:
      raise ReportError(f"{run}: no epoch records in metrics.jsonl or {CURVE}; not imported (its curve would be "
                        f"empty).")
    staged.append((name, run, records))
  for name, run, records in staged:
    target = dest / name
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(run / "results.json", target / "results.json")
    if (run / MEASURES).is_file():
      shutil.copy2(run / MEASURES, target / MEASURES)
    (target / CURVE).write_text("".join(json.dumps(r) + "\n" for r in records))
  return [name for name, _, _ in staged]


def load_runs(report_dir: Path, dataset: str | None = "ptb", check=None) -> dict[str, list[dict]]:
  """config name → the results.json of its runs (sorted by seed), each with its epoch history (`_dir`, its
  folder's name; `_valid_curve`, (epoch, valid_ppl) pairs). Every run must be on `dataset` (runs from before
  results.json recorded it were all on PTB), or, with `dataset=None`, pass `check(path, results)`, which
  raises ValueError for a run that does not belong."""
  by_config: dict[str, list[dict]] = {}
  for path in sorted(report_dir.glob("*/results.json")):
    r = read_results(path, ("config", "seed"))
    if dataset is not None and r.get("dataset", "ptb") != dataset:
      raise ReportError(f"{path} is a run on {r.get('dataset', 'ptb')!r}, but this report is for {dataset!r}.")
    if check is not None:
      check(path, r)
    r["_dir"] = path.parent.name
    r["_valid_curve"] = [(rec["epoch"], rec["valid_ppl"]) for rec in files.read_jsonl(path.parent / CURVE)[0]]
    by_config.setdefault(r["config"], []).append(r)
  for runs in by_config.values():
    runs.sort(key=lambda r: r["seed"])
  return by_config


def seeds_cell(values: list[float], fmt: str = ".1f", sd_fmt: str = ".1f") -> str:
  """One run: its value; several (seeds, or the members of a run): mean ± the sample standard deviation over
  them, then each (seed order); `fmt` formats the values, `sd_fmt` the sd."""
  if not values:
    return "—"
  if len(values) == 1:
    return f"{values[0]:{fmt}}"
  return (f"{statistics.mean(values):{fmt}} ± {statistics.stdev(values):{sd_fmt}} "
          f"({', '.join(f'{v:{fmt}}' for v in values)})")


def against_spread(a: list[float], b: list[float], fmt: str = ".1f", unit: str = "") -> tuple[float, str]:
  """(mean(b) − mean(a), in words whether that exceeds twice the larger of the two sides' sample sds): the rule
  by which a page reads a difference against its seeds. A side of one seed has no sd: then no verdict."""
  diff = statistics.mean(b) - statistics.mean(a)
  if min(len(a), len(b)) < 2:
    return diff, "one seed on a side: no spread to read it against"
  spread = max(statistics.stdev(a), statistics.stdev(b))
  return diff, (f"{'beyond' if abs(diff) > 2 * spread else 'within'} twice the larger seed sd "
                f"({2 * spread:{fmt}}{unit})")


def differences(a: dict[str, list[float]], b: dict[str, list[float]]) -> str:
  """b's mean minus a's for each measure (`{"valid": [...], "test": [...]}`, a value a seed), each read by
  `against_spread`; one verdict for all when a side has one seed."""
  read = {key: against_spread(a[key], b[key]) for key in a}
  if min(len(v) for v in (*a.values(), *b.values())) < 2:
    return ", ".join(f"{key} {diff:+.1f}" for key, (diff, _) in read.items()) + f"; {next(iter(read.values()))[1]}"
  return "; ".join(f"{key} {diff:+.1f}, {verdict}" for key, (diff, verdict) in read.items())
