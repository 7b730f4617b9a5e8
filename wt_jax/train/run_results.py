"""What a finished run writes beside its checkpoints: the keys every task's results.json has, and for a
members run (`wt_jax.members`) each member's folder and checkpoints and the summary over the members.

    <workdir>/results.json                 common_results(...) + the task's own keys
    <workdir>/members/<k>/                 member k's run folder (MEMBERS_DIR), checkpoints by save_member
    <workdir>/summary.json                 members_summary(...): each number per member, mean and sd (SUMMARY_FILE)
"""
from __future__ import annotations

import statistics
import time

import jax

from wt_jax import members as members_lib
from wt_jax.train.checkpoint import Checkpoints
from wt_jax.train.runtime import host

MEMBERS_DIR = "members"  # <workdir>/members/<k>/: member k's run folder
SUMMARY_FILE = "summary.json"  # <workdir>/summary.json: the members' numbers, mean and standard deviation


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


def save_member(lane_dir, k: int, step: int, state, best_state, meta: dict, lane: dict, config) -> None:
  """Member k's final state (and its best, if any) as the checkpoints of a plain run of its config."""
  strip = lambda tree: {key: v for key, v in members_lib.member(tree, k).items() if key != members_lib.DIVERGED}
  own = {"config": config.to_dict(), "epoch": meta["epoch"], "pos": meta["pos"], "train_s": meta["train_s"],
         "wall_s": meta["wall_s"], **{key: v for key, v in lane.items() if key != "diverged"}}
  ckpts = Checkpoints(lane_dir / "checkpoints")
  ckpts.save("last", step, strip(state), own)
  if best_state is not None and lane["best_epoch"] is not None:
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


def members_summary(per_member: list[dict], run_config: str | None = None) -> dict:
  """The members' results side by side: for every number they all report, each member's value and the mean
  and standard deviation over the members that did not diverge; how many diverged; a closing log line. Members
  of different configs (`member_values` naming them, `wt_jax.members.combine`) are also summarised per config
  name under "by_config", since a mean over different settings says nothing about either. "config" is the
  run's config name (`run_config`; by default member 0's)."""
  live = [r for r in per_member if r["member"]["diverged"] is None]
  stats, line = _stats(per_member)
  summary = {"what": "the members of one run (wt_jax.members): each member's folder is members/<k>/",
             "config": run_config or per_member[0]["config"], "members": len(per_member),
             "seeds": [r["seed"] for r in per_member],
             "diverged": [r["member"]["index"] for r in per_member if r["member"]["diverged"] is not None],
             "stats": stats, "line": f"{len(per_member)} members, {len(per_member) - len(live)} diverged" + line}
  names = list(dict.fromkeys(r["config"] for r in per_member))
  if len(names) > 1:
    summary["configs"] = [r["config"] for r in per_member]
    summary["by_config"] = {}
    lines = []
    for name in names:
      mine = [r for r in per_member if r["config"] == name]
      own_stats, own_line = _stats(mine)
      summary["by_config"][name] = {"members": [r["member"]["index"] for r in mine],
                                    "seeds": [r["seed"] for r in mine], "stats": own_stats}
      lines.append(f"{name} ({len(mine)}){own_line}")
    summary["line"] = f"{len(per_member)} members of {len(names)} configs, " \
                      f"{len(per_member) - len(live)} diverged: " + " | ".join(lines)
  return summary


def common_results(config, state, meta, task, t_start, wall_before, resumed_from, run_versions) -> dict:
  """The keys every task's results.json has (the task adds its own)."""
  dp_devices = getattr(task, "num_devices", jax.device_count())
  return {
      "config": config.name,
      "num_params": int(sum(x.size for x in jax.tree_util.tree_leaves(state["params"]))),
      "steps": int(state["step"]),
      "steps_per_epoch": task.steps_per_epoch,
      "epochs": len(meta["history"]) + meta["pos"] / task.steps_per_epoch,  # finished + the fraction begun
      "history": meta["history"],
      "best_metric": task.selection[0] if task.selection else None,
      "best_epoch": meta["best_epoch"],
      "train_s": meta["train_s"],
      "wall_s": wall_before + time.time() - t_start,
      "resumed_from_step": resumed_from,
      "seed": config.seed,
      "versions": run_versions,
      "host": host(),
      "devices": [str(d) for d in jax.devices()],
      "device_kind": jax.devices()[0].device_kind,  # e.g. "NVIDIA H100 80GB HBM3", "TPU v5 lite", "cpu"
      "num_devices": dp_devices,
      "num_processes": jax.process_count(),
  }
