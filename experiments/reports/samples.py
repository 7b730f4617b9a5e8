"""What trained language models write and how likely they find a text: samples (`experiments.generate`) and
scores (`experiments.score`) of finished runs, from the records `experiments/studies/sampling_study.sh` leaves in each.

    python -m experiments.report sampling --runs=runs/sampling

Each finished run of RUNS is imported into results/sampling/<run>/ (results.json and curve.jsonl, as every
report does) with its samples/*.jsonl (one object per sample, as `generate --output` writes them) and
scores/*.json (the JSON line `score` prints last). The page's tables are built from those files alone: per
run, the perplexities of its results.json beside the ones `score` computed again from the run folder; per config,
the scores over its seeds, and untied → tied read against their spread; per prompt and training seed, each run's
greedy continuation and samples side by side.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from experiments.reports.pages import write_page
from experiments.reports.records import (ReportError, differences, import_runs, json_record, read_results,
                                        runs_folder, seeds_cell)

USES = {"samples": ".jsonl", "scores": ".json"}  # a run folder's subfolder → the suffix of its records
COMPARE = ("small", "small_tied")  # the page's comparison: untied → tied (Press & Wolf's Table 6 small rows)


def import_uses(runs_dir: Path, report_dir: Path, names: list[str]) -> None:
  """Copy each run's samples/ and scores/ records into report_dir/<run>/; every record is read first, and a
  damaged one (or a run without them) raises `ReportError` before anything is copied."""
  staged = []
  for name in names:
    for kind, suffix in USES.items():
      found = sorted((runs_dir / name / kind).glob(f"*{suffix}"))
      if not found:
        raise ReportError(f"{runs_dir / name / kind}: no {kind} records; run experiments/studies/sampling_study.sh.")
      for f in found:
        lines = f.read_text(errors="replace").splitlines()
        if not lines or (kind == "scores" and len(lines) != 1):
          raise ReportError(f"{f} holds {len(lines)} records; a score file holds one, a samples file at least one.")
        for n, line in enumerate(lines, 1):
          json_record(line, f"{f} line {n}", ("text", "log_prob") if kind == "samples" else ("ppl", "tokens"))
        staged.append((f, report_dir / name / kind / f.name))
  for src, dest in staged:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dest)


def _runs(report_dir: Path) -> list[tuple[str, dict]]:
  return [(p.parent.name, read_results(p, ("config", "test_ppl", "valid_ppl", "test_params")))
          for p in sorted(report_dir.glob("*/results.json"))]


def _score(report_dir: Path, run: str, what: str) -> dict:
  path = report_dir / run / "scores" / f"{what}.json"
  if not path.exists():
    raise ReportError(f"{path} is missing; run experiments/studies/sampling_study.sh (or score the run) and import "
                      "again.")
  return json_record(path.read_text(), path, ("ppl", "tokens", "oov", "checkpoint", "step"))


def scores_table(report_dir: Path, runs: list[tuple[str, dict]]) -> str:
  rows = ["| run | config | trained | valid ppl | test ppl (results.json) | `score --split=test` | "
          "`score --text=text.txt` |", "|---|---|---|---|---|---|---|"]
  for run, r in runs:
    test, text = _score(report_dir, run, "test"), _score(report_dir, run, "text")
    oov = f", {text['oov']} OOV: {', '.join(text['oov_words'])}" if text["oov"] else ", no OOV"
    rows.append(f"| `{run}` | {r['config']} | {r['epochs']:.0f} epochs, {r['steps']:,} steps | {r['valid_ppl']:.2f} | "
                f"{r['test_ppl']:.4f} ({r['test_params']}) | {test['ppl']:.4f} ({test['checkpoint']}, step "
                f"{test['step']:,}; {test['tokens']:,} tokens) | {text['ppl']:.1f} ({text['tokens']} tokens{oov}) |")
  return "\n".join(rows)


def seeds_table(report_dir: Path, runs: list[tuple[str, dict]]) -> str:
  """Per config, `score`'s test and text.txt perplexities over its seeds (`records.seeds_cell`); then COMPARE's
  tied minus untied, each read against twice the larger seed sd (`records.differences`)."""
  by_config: dict[str, dict[str, list[float]]] = {}
  for run, r in sorted(runs, key=lambda item: item[1]["seed"]):
    scores = by_config.setdefault(r["config"], {"test": [], "text.txt": [], "seeds": []})
    scores["test"].append(_score(report_dir, run, "test")["ppl"])
    scores["text.txt"].append(_score(report_dir, run, "text")["ppl"])
    scores["seeds"].append(r["seed"])
  rows = ["| config | seeds | `score --split=test` | `score --text=text.txt` |", "|---|---|---|---|"]
  rows += [f"| {config} | {', '.join(map(str, v['seeds']))} | {seeds_cell(v['test'], '.2f')} | "
           f"{seeds_cell(v['text.txt'])} |" for config, v in sorted(by_config.items())]
  if all(c in by_config for c in COMPARE):
    a, b = ({k: v for k, v in by_config[c].items() if k != "seeds"} for c in COMPARE)
    rows.append(f"\n{COMPARE[0]} → {COMPARE[1]} (tied minus untied): {differences(a, b)}.")
  return "\n".join(rows)


def _samples(report_dir: Path, run: str, prompt: int, kind: str) -> list[dict]:
  path = report_dir / run / "samples" / f"prompt{prompt}_{kind}.jsonl"
  if not path.exists():
    raise ReportError(f"{path} is missing; run experiments/studies/sampling_study.sh and import again.")
  return [json.loads(line) for line in path.read_text().splitlines()]


def _cell(s: dict) -> str:
  return f"{s['text'].replace(chr(10), ' ⏎ ').replace('|', '&#124;')} (log p {s['log_prob']:.1f})"


def samples_tables(report_dir: Path, runs: list[tuple[str, dict]]) -> str:
  """Per prompt and training seed, a table: a row per draw (greedy, then each sample), a column per run."""
  prompts = sorted({int(p.name.split("_")[0].removeprefix("prompt"))
                    for run, _ in runs for p in (report_dir / run / "samples").glob("prompt*_*.jsonl")})
  parts = []
  for i in prompts:
    for seed in sorted({r["seed"] for _, r in runs}):
      by_run = {run: _samples(report_dir, run, i, "greedy") + _samples(report_dir, run, i, "t1")
                for run, r in runs if r["seed"] == seed}
      first = next(iter(by_run.values()))
      settings = first[1] if len(first) > 1 else first[0]
      parts.append(f"**Prompt: “{first[0]['prompt']}”, models trained with seed {seed}** (greedy: temperature 0; "
                   f"samples: temperature {settings['temperature']:g}, seed {settings['seed']}, at most "
                   f"{first[0]['max_len']} tokens; ⏎ is `<eos>`)\n")
      parts.append("| draw | " + " | ".join(f"`{run}`" for run in by_run) + " |")
      parts.append("|---|" + "---|" * len(by_run))
      for k in range(max(len(v) for v in by_run.values())):
        label = "greedy" if k == 0 else f"sample {k - 1}"
        parts.append(f"| {label} | " + " | ".join(_cell(v[k]) if k < len(v) else "" for v in by_run.values()) + " |")
      parts.append("")
  return "\n".join(parts).rstrip()


def provenance(report_dir: Path, runs: list[tuple[str, dict]]) -> str:
  lines = []
  for run, r in runs:
    host, commit = r.get("host") or {}, (r.get("versions") or {}).get("wt_jax_commit") or "not recorded"
    first = _samples(report_dir, run, 0, "greedy")[0]
    lines.append(f"- `{run}`: `python -m experiments.ptb --config=configs/{r['config']}.py --config.seed={r['seed']} "
                 f"--workdir=runs/sampling/{run}` — commit `{commit}`, machine: {host.get('cpu', '?')}, "
                 f"{host.get('cpu_count', '?')} cores; {r['wall_s'] / 60:.0f} min wall; sampled from its checkpoint "
                 f"`{first['checkpoint']}` (step {first['step']:,}).")
  return "\n".join(lines)


def build_sampling(name: str, out_root: Path, runs_dir: Path | None = None, readme: Path | None = None) -> str:
  """Import (optionally), then write the page; returns the scores table."""
  report_dir = out_root / name
  report_dir.mkdir(parents=True, exist_ok=True)
  if runs_dir is not None:
    import_uses(runs_dir, report_dir, import_runs(runs_folder(runs_dir), report_dir))
  runs = _runs(report_dir)
  if not runs:
    raise ReportError(f"{report_dir} holds no runs; import them with --runs.")
  tab = scores_table(report_dir, runs)
  body = (f"{tab}\n\n{seeds_table(report_dir, runs)}\n\n{samples_tables(report_dir, runs)}\n\n"
          f"Rebuild: `python -m experiments.report {name}`")
  write_page(report_dir / "README.md", name, "Samples and scores of trained language models", body,
             f"## Runs\n\n{provenance(report_dir, runs)}")
  return tab
