"""What K members cost against one model (`wt_jax.members`), from `experiments.bench --members_sweep` records.

    python -m experiments.report members --runs=DIR    # DIR: files of bench JSON lines (one sweep a line)

Each `members_sweep` line of the files in DIR is copied into results/members/<device>.jsonl (one file per device
kind); the page's table has, per config and device, the median ms per step of one model alone (K = 0) and,
for each K, "K models in X times the time of one" with the ms of each round.
"""
from __future__ import annotations

import json
from pathlib import Path

from absl import logging

from experiments.reports.pages import write_page


def import_sweeps(src: Path, dest: Path) -> int:
  """The members_sweep lines of every file in `src` → dest/<device kind>.jsonl (appended, duplicates skipped)."""
  count = 0
  for f in sorted(p for p in src.iterdir() if p.is_file()):
    for line in f.read_text(errors="replace").splitlines():
      if not line.startswith("{"):
        continue
      record = json.loads(line)
      record = record.get("result", record)  # (gpu_bench.sh wraps each line: {"name", "wall_s", "result"})
      if record.get("bench") != "members_sweep":
        continue
      out = dest / f"{record['device_kind'].replace(' ', '_')}.jsonl"
      kept = out.read_text().splitlines() if out.exists() else []
      text = json.dumps(record)
      if text not in kept:
        out.write_text("".join(l + "\n" for l in [*kept, text]))
        count += 1
  return count


def members_table(records: list[dict]) -> str:
  rows = ["| config | device | jax | rounds | one model alone, ms/step | K = 1 | K = 2 | K = 4 | K = 8 |",
          "|---|---|---|---|---|---|---|---|---|"]
  for r in records:
    ks = [str(k) for k in (1, 2, 4, 8)]
    each = lambda k: ", ".join(f"{x['train_ms_per_step']:,.0f}" for x in r["runs"][k])

    def cell(k):
      if k not in r["time_of_one"]:
        return "—"
      return f"{r['time_of_one'][k]:.2f}× ({each(k)} ms)"

    rows.append(f"| {r['config']} | {r['device_kind']} | {r['jax']} | {r['rounds']} "
                f"| {r['train_ms_per_step_median']['0']:,.0f} ({each('0')}) | " + " | ".join(cell(k) for k in ks) + " |")
  return "\n".join(rows)


def build_members_speed(name: str, out_root: Path, runs_dir: Path | None = None, readme: Path | None = None) -> str:
  report_dir = out_root / name
  report_dir.mkdir(parents=True, exist_ok=True)
  if runs_dir is not None:
    logging.info("imported %d sweeps", import_sweeps(runs_dir, report_dir))
  records = [json.loads(l) for f in sorted(report_dir.glob("*.jsonl")) for l in f.read_text().splitlines() if l]
  if not records:
    raise FileNotFoundError(f"no members_sweep records in {report_dir}; pass --runs=DIR of bench outputs")
  tab = members_table(records)
  intro = ("K members trained in one program against one model trained alone, by `python -m experiments.bench "
           "--config=<config> --members_sweep=0,1,2,4,8` (each K in its own process, `rounds` interleaved rounds; "
           "the median ms per train step of all K members, divided by one model's: \"K models in X times the "
           "time of one\"; each round's ms in brackets). Steps and repeats per record are in its JSON line.")
  write_page(report_dir / "README.md", name, "Many models in one program: what K members cost",
             f"{intro}\n\n{tab}\n\nRebuild: `python -m experiments.report {name}`")
  return tab
