"""A run's records per lane (`wt_jax.train.trainer`: one lane for a plain run, K for a members run): what the
trainer keeps per model while it trains (checkpointed with the state), and what it writes at the end.

    new_lane()                             {'history', 'epoch_sums', 'best', 'best_epoch', 'diverged'}
    lane_totals(bases, sums, K)            each lane's epoch sums on the host
    <folder>/results.json                  lane_results(...): the keys every task has + the task's own
    <workdir>/members/<k>/                 member k's run folder (MEMBERS_DIR), checkpoints by save_member
    <workdir>/summary.json                 members_summary(...): each number per member, mean and sd (SUMMARY_FILE)
"""
from __future__ import annotations

import statistics

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from wt_jax import files, parallel
from wt_jax import members as members_lib
from wt_jax.train import metrics as metrics_lib
from wt_jax.train.checkpoint import Checkpoints
from wt_jax.train.record import host

MEMBERS_DIR = "members"  # <workdir>/members/<k>/: member k's run folder
SUMMARY_FILE = "summary.json"  # <workdir>/summary.json: the members' numbers, mean and standard deviation


# What a run writes again at a resume, in each lane's folder: files rewritten or appended to, folders written in.
RUN_OUTPUTS = ("run.json", "metrics.jsonl", "results.json", "summary.json", "curves.png", "vocab.txt")
RUN_FOLDERS = ("", "checkpoints", "checkpoints/last", "checkpoints/best")


def lane_folders(workdir, members: int) -> list:
  """Each lane's folder — the workdir itself, or a members run's `<workdir>/members/<k>/` — made (process 0), with
  what the run would write again in them refused before any work if it could not be (`files.check_writable`)."""
  folders = [workdir] if not members else [workdir / MEMBERS_DIR / str(k) for k in range(members)]
  if parallel.is_writer():
    for folder in dict.fromkeys([workdir, *folders]):
      folder.mkdir(parents=True, exist_ok=True)
      files.check_writable(folder, RUN_OUTPUTS, RUN_FOLDERS)
  return folders


def new_lane() -> dict:
  """A lane's record before its first step: per-epoch history, the epoch's sums so far (host), its best validation
  metric and epoch, and why and when it diverged (None: it trains)."""
  return {"history": [], "epoch_sums": None, "best": None, "best_epoch": None, "diverged": None}


def lanes_of(meta: dict, members: int) -> list[dict]:
  """The lanes' records in a checkpoint's `meta` (a plain run's at its top level, a members run's under 'members')."""
  return [{key: lane.get(key) for key in new_lane()} for lane in (meta["members"] if members else [meta])]


def with_lanes(meta: dict, lanes: list[dict], members: int) -> dict:
  """`meta` with the lanes' records, as `lanes_of` reads them (a plain run's folder reads like any single run's)."""
  return {**meta, "members": lanes} if members else {**meta, **lanes[0]}


def lane_totals(bases: list, sums, K: int) -> list[dict]:
  """Each lane's epoch sums on the host: `bases[k]` (from before a resume) plus this process's device `sums`, a
  scalar per key for a plain run (K = 1) and a [K] vector for members."""
  now = {} if sums is None else jax.device_get(sums)
  totals = []
  for k, before in enumerate(bases):
    mine = {key: float(np.reshape(v, (K,))[k]) for key, v in now.items()}
    before = before or {}
    totals.append({key: before.get(key, 0.0) + mine.get(key, 0.0) for key in {**before, **mine}})
  return totals


def improves(selection, lane: dict, record: dict) -> bool:
  """Whether the epoch's `record` is the lane's best so far by `selection` (metric, 'min' | 'max'), updating the
  lane if it is. A diverged lane keeps the best it had."""
  if selection is None or lane["diverged"] is not None:
    return False
  metric, mode = selection
  value, best = record[metric], lane["best"]
  if best is not None and not (value < best if mode == "min" else value > best):
    return False
  lane.update(best=value, best_epoch=record["epoch"])
  return True


def keep_best(state, best_state, improved: list[bool]):
  """Each lane's best state on the devices: a copy of `state` in the lanes that improved, `best_state` elsewhere."""
  copy = jax.tree_util.tree_map(jnp.copy, state)
  return copy if best_state is None or all(improved) else members_lib.select(np.asarray(improved), copy, best_state)


def summary_line(shown: list[dict], lanes: list[dict], K: int, names: list[str] | None = None) -> str:
  """A progress line's metrics: one model's values, or the members' mean and range over those training. When
  the members are of different configs (`names[k]`, member k's config name), each config's members are
  summarised apart ("| vd: train_ppl …  | al: train_ppl …"): a mean over different settings says nothing about
  either."""
  if not K:
    return "  ".join(f"{k} {v:.4g}" for k, v in shown[0].items())
  live = [lane["diverged"] is None for lane in lanes]
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


def save_member(folder, k: int, step: int, state, best_state, meta: dict, config) -> None:
  """Member k's final state (and its best, if any) as the checkpoints of a plain run of its config; `meta` is its
  lane's record with the run's progress."""
  strip = lambda tree: {key: v for key, v in members_lib.member(tree, k).items() if key != members_lib.DIVERGED}
  own = {**{key: v for key, v in meta.items() if key != "diverged"}, "config": config.to_dict()}
  ckpts = Checkpoints(folder / "checkpoints")
  ckpts.save("last", step, strip(state), own)
  if best_state is not None and meta["best_epoch"] is not None:
    ckpts.save("best", step, strip(best_state), own)
  ckpts.close()


def _stats(per_member: list[dict]) -> tuple[dict, str]:
  """For every number all of `per_member` report: each member's value, and the mean and sample sd over those
  that did not diverge; and the numbers shown in a log line ("test_ppl 80.12 ± 0.31; …")."""
  live = [r for r in per_member if r["member"]["diverged"] is None]
  numbers = [key for key, v in per_member[0].items()
             if isinstance(v, (int, float)) and not isinstance(v, bool)
             and all(isinstance(r.get(key), (int, float)) for r in per_member)]
  stats = {}
  for key in numbers:
    vals = [float(r[key]) for r in live]
    stats[key] = {"each": [r[key] for r in per_member],
                  "mean": statistics.fmean(vals) if vals else None,
                  "sd": statistics.stdev(vals) if len(vals) > 1 else None}
  shown = [key for key in ("test_ppl", "valid_ppl", "best_valid_ppl") if key in stats] or numbers[:2]
  line = "".join(f"; {key} {stats[key]['mean']:.2f}" +
                 (f" ± {stats[key]['sd']:.2f}" if stats[key]["sd"] is not None else "")
                 for key in shown if stats[key]["mean"] is not None)
  return stats, line


def members_summary(workdir, per_member: list[dict], run_config: str) -> dict:
  """The members' results side by side: for every number they all report, each member's value and the mean
  and standard deviation over the members that did not diverge; how many diverged; a closing log line. Members
  of different configs (`member_values` naming them, `wt_jax.members.combine`) are also summarised per config
  name under "by_config", since a mean over different settings says nothing about either. "config" is the
  run's config name. Written to <workdir>/summary.json (process 0) and logged."""
  live = [r for r in per_member if r["member"]["diverged"] is None]
  stats, line = _stats(per_member)
  summary = {"what": "the members of one run (wt_jax.members): each member's folder is members/<k>/",
             "config": run_config, "members": len(per_member),
             "seeds": [r["seed"] for r in per_member],
             "diverged": [r["member"]["index"] for r in per_member if r["member"]["diverged"] is not None],
             "stats": stats, "line": f"{len(per_member)} members, {len(per_member) - len(live)} diverged" + line}
  names = dict.fromkeys(r["config"] for r in per_member)
  groups = {name: [r for r in per_member if r["config"] == name] for name in names}
  if len(groups) > 1:
    summary["configs"] = [r["config"] for r in per_member]
    summary["by_config"] = {name: {"members": [r["member"]["index"] for r in mine], "seeds": [r["seed"] for r in mine],
                                   "stats": _stats(mine)[0]} for name, mine in groups.items()}
    summary["line"] = (f"{len(per_member)} members of {len(groups)} configs, {len(per_member) - len(live)} diverged: "
                       + " | ".join(f"{name} ({len(mine)}){_stats(mine)[1]}" for name, mine in groups.items()))
  if parallel.is_writer():
    files.write_json(workdir / SUMMARY_FILE, summary)
  logging.info("%s", summary["line"])
  return summary


def lane_results(task, lane_metas: list[dict], finals: list[dict], num_params: int, step: int, wall_s: float,
                 resumed_from, run_versions: dict, workdir) -> list[dict]:
  """Each lane's results.json: the keys every task's has, then the task's own (`finals`); a member's says which."""
  out = []
  for k, (meta, final) in enumerate(zip(lane_metas, finals)):
    config = task.lane_configs[k]
    out.append({
        "config": config.name, "num_params": num_params, "steps": step, "steps_per_epoch": task.steps_per_epoch,
        "epochs": len(meta["history"]) + meta["pos"] / task.steps_per_epoch,  # finished + the fraction begun
        "history": meta["history"], "best_metric": task.selection[0] if task.selection else None,
        "best_epoch": meta["best_epoch"], "train_s": meta["train_s"], "wall_s": wall_s,
        "resumed_from_step": resumed_from, "seed": config.seed, "versions": run_versions, "host": host(),
        "devices": [str(d) for d in jax.devices()],
        "device_kind": jax.devices()[0].device_kind,  # e.g. "NVIDIA H100 80GB HBM3", "TPU v5 lite", "cpu"
        "num_devices": task.num_devices, "num_processes": jax.process_count(), **final})
    if task.members:
      out[-1]["member"] = {"index": k, "of": len(finals), "run": str(workdir), "diverged": meta["diverged"]}
  return out


def write_results(folders: list, per_lane: list[dict], plot: bool) -> None:
  """results.json in each lane's folder, and its learning curves (curves.png) if `plot`."""
  for folder, results in zip(folders, per_lane):
    files.write_json(folder / "results.json", results)
    if plot:
      metrics_lib.plot_curves(folder / "metrics.jsonl", folder / "curves.png", title=results["config"])
