"""TPU memory per chip of every paper config, from experiments.compile's AOT records (not a paper table)."""
from __future__ import annotations

import json
import logging
from pathlib import Path

from experiments.reports.pages import splice_readme, write_page
from experiments.reports.records import ReportError, json_record, runs_folder

log = logging.getLogger(__name__)

AOT_PREFIX = "AOT_JSON "  # experiments.compile's machine-readable line
AOT_ORDER = ("small", "small_tied", "medium", "medium_tied", "large", "large_tied", "large_bd_wd",
             "large_bd_wd_tied", "rhn", "rhn_tied", "nmt_multi30k_none", "nmt_multi30k_three_way")


def import_compiles(src: Path, dest: Path) -> list[str]:
  """Each file of `src` holding an `AOT_JSON` line (experiments.compile's stdout) → dest/<config>_<topology>.json."""
  staged = []
  for f in sorted(runs_folder(src).iterdir()):
    lines = [l for l in f.read_text(errors="replace").splitlines() if l.startswith(AOT_PREFIX)] if f.is_file() else []
    if lines:
      rec = json_record(lines[-1][len(AOT_PREFIX):], f"{f}'s last {AOT_PREFIX.strip()} line",
                        ("config", "topology", "chips", "fits", "programs"))
      if "train_step" not in rec["programs"] or len(rec["programs"]) < 2:
        raise ReportError(f"{f}'s last {AOT_PREFIX.strip()} line lacks the train step or the other program.")
      name = f"{rec['config']}_{rec['topology'].replace(':', '_')}" + ("_members" if "max_members" in rec else "")
      staged.append((name, rec))
  for name, rec in staged:  # (written only when every record is whole)
    (dest / f"{name}.json").write_text(json.dumps(rec, indent=1) + "\n")
  return [name for name, _ in staged]


def tpu_memory_table(records: list[dict]) -> str:
  mib = lambda b: f"{b / 2**20:,.1f}"
  order = {c: i for i, c in enumerate(AOT_ORDER)}
  rows = ["| config | topology | batch (global) | train step total / chip (temporaries), MiB | eval / beam search "
          "total / chip, MiB | fits | compile s (train, eval) | largest batch per chip (global; smallest refused) |",
          "|---|---|---|---|---|---|---|---|"]
  for r in sorted(records, key=lambda r: (order.get(r["config"], len(order)), r["chips"], r["config"])):
    train = r["programs"]["train_step"]
    other = next(p for n, p in r["programs"].items() if n != "train_step")
    if "max_batch" in r:
      refused = f"{r['smallest_not_fitting']:,}" if r.get("smallest_not_fitting") else "—"
      largest = (f"{r['max_batch_per_chip']:,} ({r['max_batch']:,}; {refused})"
                 + (" (search cap)" if r.get("max_batch_capped") else ""))
    else:
      largest = "not searched"
    rows.append(f"| {r['config']} | {r['topology']} | {train['batch_size']} | {mib(train['total_bytes'])} "
                f"({mib(train['temp_bytes'])}) | {mib(other['total_bytes'])} | {'yes' if r['fits'] else 'no'} | "
                f"{train['compile_s']}, {other['compile_s']} | {largest} |")
  return "\n".join(rows)


def members_table(records: list[dict]) -> str:
  """The `--find_max_members` records: how many seeds of a config fit one chip in one program."""
  mib = lambda b: f"{b / 2**20:,.1f}"
  rows = ["| config | topology | batch per member | members that fit per chip (smallest refused) "
          "| train step total / chip at 1 member, at the largest, MiB |", "|---|---|---|---|---|"]
  for r in sorted(records, key=lambda r: (r["config"], r["chips"])):
    tried = {int(k): v for k, v in r["members_tried"].items()}
    refused = f"{r['members_not_fitting']:,}" if r.get("members_not_fitting") else "—"
    rows.append(f"| {r['config']} | {r['topology']} | {r['programs']['train_step']['batch_size']} "
                f"| {r['max_members_per_chip']:,} ({refused}){' (search cap)' if r.get('max_members_capped') else ''} "
                f"| {mib(tried[min(tried)])}, {mib(tried[r['max_members']])} |")
  return "\n".join(rows)


def build_tpu_memory(name: str, out_root: Path, runs_dir: Path | None = None, readme: Path | None = None) -> str:
  """results/tpu_memory/: the compile records (imported from `runs_dir`'s compile outputs), the table."""
  report_dir = out_root / name
  report_dir.mkdir(parents=True, exist_ok=True)
  if runs_dir is not None:
    log.info("imported %s", import_compiles(runs_dir, report_dir))
  every = [json.loads(f.read_text()) for f in sorted(report_dir.glob("*.json"))]
  if not every:
    raise ReportError(f"no compile records in {report_dir}; pass --runs=DIR of experiments.compile outputs")
  records = [r for r in every if "max_members" not in r]
  member_records = [r for r in every if "max_members" in r]
  tab = tpu_memory_table(records)
  vers = sorted({f"jax {r['versions']['jax']} / libtpu {r['versions']['libtpu']}" for r in records if "versions" in r})
  unversioned = sum("versions" not in r for r in records)
  vers.append(f"{unversioned} of the {len(records)} records name no versions" if unversioned else "")
  intro = ("TPU v5e memory per chip (16 GiB HBM) from `python -m experiments.compile --config=configs/<config>.py "
           "--topology=<topology> --find_max_batch --batch_rel_tol=0.25 [--batch_start=<a guess>]` on a CPU-only "
           f"machine ({'; '.join(v for v in vers if v) or 'versions not recorded'}; the start of each search, which "
           "can move its answer within the tolerance, is not recorded). \"total\" is arguments + outputs − donated + "
           "temporaries; the largest batch is the largest global batch the search compiled that fits (within 25% "
           "of the smallest that does not), divided by the chip count. Compile times are this 2-core machine's, "
           "with other jobs running; the NMT rows use the longest training bucket and the BPE vocabulary size "
           "as an upper bound for both sides; `nmt_multi30k_none` is `configs/nmt_multi30k_baseline.py`.")
  title = "Compile for a TPU before you rent one: memory per chip of the paper configs"
  members = ""
  if member_records:
    members = ("\n\nMembers (`wt_jax.members`: K seeds of a config trained in one program, each chip holding its "
               "own members and the whole batch): the largest K whose train step fits, from `python -m "
               "experiments.compile --config=configs/<config>.py --topology=<topology> --find_max_members "
               "--batch_rel_tol=0.05` (within 5% of the smallest K that does not).\n\n" + members_table(member_records))
  write_page(report_dir / "README.md", name, title,
             f"{intro}\n\n{tab}{members}\n\nRebuild: `python -m experiments.report {name}`")
  if readme is not None and not splice_readme(readme, name, f"{intro}\n\n{tab}"):
    log.warning("%s has no <!-- report:%s:begin/end --> markers; README not updated", readme, name)
  return tab
