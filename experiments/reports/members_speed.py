"""What K members cost against one model (`wt_jax.members`), from `experiments.bench --members_sweep` records,
and where their step's time goes, from `experiments.bench_helpers.members_profile` records.

    python -m experiments.report members --runs=DIR    # DIR: files of bench JSON lines (one sweep a line)

Each `members_sweep` line of the files in DIR is copied into results/members/<device>.jsonl and each
`members_profile` line (and each run's `members_profile_ratios` line, which holds its steps and host) into
results/members/profile_<device>.jsonl (one file per device kind). The page's
first table has, per config and device, the median ms per step of one model alone (K = 0) and, for each K, "K
models in X times the time of one" with the ms of each round; its profile table (between the markers
`<!-- report:members:profile:begin/end -->`) has, per config and K, the medians over rounds of the step's
untraced ms and of its traced op time, split into products and the other ops, each with its ratio to K = 0,
then the costliest ops of the largest K's last round.
"""
from __future__ import annotations

import json
import logging
import statistics
from pathlib import Path

from experiments.reports.pages import splice_readme, write_page
from experiments.reports.records import ReportError, json_record, runs_folder

log = logging.getLogger(__name__)

KINDS = {"members_sweep": "", "members_profile": "profile_", "members_profile_ratios": "profile_"}  # → file prefix


def import_sweeps(src: Path, dest: Path) -> int:
  """The members_sweep lines of every file in `src` → dest/<device kind>.jsonl, its members_profile and
  members_profile_ratios lines → dest/profile_<device kind>.jsonl (appended, duplicates skipped)."""
  count = 0
  for f in sorted(p for p in runs_folder(src).iterdir() if p.is_file()):
    for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
      if not line.startswith("{"):
        continue
      record = json_record(line, f"{f} line {n}")
      record = record.get("result", record)  # (experiments/gpu/bench.sh wraps each line: {"name", "wall_s", "result"})
      if not isinstance(record, dict) or record.get("bench") not in KINDS:
        continue
      if "device_kind" not in record:
        raise ReportError(f"{f} line {n} is a {record['bench']} record without 'device_kind'.")
      out = dest / f"{KINDS[record['bench']]}{record['device_kind'].replace(' ', '_')}.jsonl"
      kept = out.read_text().splitlines() if out.exists() else []
      text = json.dumps(record)
      if text not in kept:
        out.write_text("".join(l + "\n" for l in [*kept, text]))
        count += 1
  return count


def code(record: dict) -> str:
  """The commit a record's code came from, short ("+dirty" kept), or "not recorded" (records before it was)."""
  commit = record.get("wt_jax_commit")
  return f"{commit[:7]}{'+dirty' if commit.endswith('+dirty') else ''}" if commit else "not recorded"


def members_table(records: list[dict]) -> str:
  rows = ["| config | device | jax | code | rounds | one model alone, ms/step | K = 1 | K = 2 | K = 4 | K = 8 |",
          "|---|---|---|---|---|---|---|---|---|---|"]
  for r in records:
    ks = [str(k) for k in (1, 2, 4, 8)]
    each = lambda k: ", ".join(f"{x['train_ms_per_step']:,.0f}" for x in r["runs"][k])

    def cell(k):
      if k not in r["time_of_one"]:
        return "—"
      return f"{r['time_of_one'][k]:.2f}× ({each(k)} ms)"

    rows.append(f"| {r['config']} | {r['device_kind']} | {r['jax']} | {code(r)} | {r['rounds']} "
                f"| {r['train_ms_per_step_median']['0']:,.0f} ({each('0')}) | " + " | ".join(cell(k) for k in ks) + " |")
  return "\n".join(rows)


def build_members_speed(name: str, out_root: Path, runs_dir: Path | None = None, readme: Path | None = None) -> str:
  report_dir = out_root / name
  report_dir.mkdir(parents=True, exist_ok=True)
  if runs_dir is not None:
    log.info("imported %d records", import_sweeps(runs_dir, report_dir))
  lines = [json.loads(l) for f in sorted(report_dir.glob("*.jsonl")) for l in f.read_text().splitlines() if l]
  records = [r for r in lines if r.get("bench") == "members_sweep"]  # (the folder holds other records too)
  if not records:
    raise ReportError(f"no members_sweep records in {report_dir}; pass --runs=DIR of bench outputs")
  tab = members_table(records)
  intro = ("K members trained in one program against one model trained alone, by `python -m experiments.bench "
           "--config=<config> --members_sweep=0,1,2,4,8` (each K in its own process, `rounds` interleaved rounds; "
           "the median ms per train step of all K members, divided by one model's: \"K models in X times the "
           "time of one\"; each round's ms in brackets). Steps and repeats per record are in its JSON line.")
  page = report_dir / "README.md"
  write_page(page, name, "Many models in one program: what K members cost",
             f"{intro}\n\n{tab}\n\nRebuild: `python -m experiments.report {name}`")
  profiles = [r for r in lines if r.get("bench") in ("members_profile", "members_profile_ratios")]
  if profiles:
    body = profile_table(profiles)
    if not splice_readme(page, f"{name}:profile", body):
      page.write_text(page.read_text() + f"\n<!-- report:{name}:profile:begin -->\n{body}\n"
                      f"<!-- report:{name}:profile:end -->\n")
  return tab


def profile_table(records: list[dict], top: int = 6) -> str:
  """The members_profile records as a table (medians over rounds, ratios to K = 0; the steps per round from each
  run's members_profile_ratios line) and, per config, the `top` costliest ops of its largest K's last round."""
  steps = {(r["config"], r["device_kind"], r["jax"], code(r)): r["steps"] for r in records
           if r["bench"] == "members_profile_ratios"}
  groups: dict[tuple, dict[int, list[dict]]] = {}  # (config, device, jax, code): the rounds of one code version
  for r in records:
    if r["bench"] == "members_profile":
      groups.setdefault((r["config"], r["device_kind"], r["jax"], code(r)), {}).setdefault(r["members"], []).append(r)
  keys = ("ms_per_step", "op_ms_per_step", "product_ms", "other_ms")
  rows = ["| config | device | jax | code | steps | rounds | K | step, ms | op time, ms | products, ms | other ops, ms |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
  costliest = []
  for group, by_k in groups.items():
    config, device, jax_version, version = group
    if 0 not in by_k:
      raise ReportError(f"the members_profile records of {config} on {device} have no K = 0 (one model) line")
    median = {k: {key: statistics.median(r[key] for r in runs) for key in keys} for k, runs in by_k.items()}
    for k in sorted(by_k):
      cells = [f"{median[k][key]:,.0f}" + (f" ({median[k][key] / median[0][key]:.2f}×)" if k else "")
               for key in keys]
      rows.append(f"| {config} | {device} | {jax_version} | {version} | {steps.get(group, '—')} | {len(by_k[k])} | {k} | "
                  + " | ".join(cells) + " |")
    largest = max(by_k)
    last = max(by_k[largest], key=lambda r: r["round"])
    ops = "; ".join(f"{op['ms']:,.1f} ms {'product' if op['product'] else 'other'} {op['shape']} "
                    f"`{op['source']}`" for op in last["top_ops"][:top])
    costliest.append(f"- {config} (code {version}), K = {largest}, round {last['round']}: {ops}")
  intro = ("Where the step's time goes (`python -m experiments.bench_helpers.members_profile --config=<config> "
           "--members=<Ks> --steps=<steps> --rounds=<rounds>`): per K, the medians over interleaved rounds of the "
           "step's ms (`steps` steps timed untraced) and of its op time (the same number of steps traced with "
           "jax.profiler), split into products (ops that hold a dot) and the other ops; the ratio to one model "
           "(K = 0) in brackets. Op times overlap when ops run at once and include the tracer's cost, so their "
           "sum is not the step's time.")
  return "\n".join([intro, "", *rows, "", "The costliest ops (ms per step, output shape, the JAX operation):", "",
                    *costliest])
