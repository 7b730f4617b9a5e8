"""A members run's folders (`wt_jax.members`: K models as one stacked state; the task is `lm.MembersTask`, whose
numbers are [K] arrays in the run's own metrics.jsonl, checkpoints and results.json):

    <workdir>/members/<k>/     member k's run folder: run.json and vocab.txt at the run's start
                               (`trainer._start`: `record_run` of `task.member_runs`, the task's files), then at its
                               end metrics.jsonl, results.json and checkpoints, as a run of its config alone would
                               (`write_members`)
    <workdir>/summary.json     `members_summary`: each number per member, mean and sd

A member whose numbers are not finite is marked diverged by the trainer's policy and left out of the summary; the
step's guard (`members.guarded`) freezes it at its last finite state when its loss or gradient is not finite.
"""
from __future__ import annotations

import json
import logging
import statistics

import jax

import wt_jax.models as models

import wt_jax.files as files
import wt_jax.parallel as parallel
import wt_jax.members as members_lib
from wt_jax.train import metrics as metrics_lib
from wt_jax.train import run_record
from wt_jax.train.checkpoint import Checkpoints

log = logging.getLogger(__name__)

MEMBERS_DIR = "members"  # <workdir>/members/<k>/: member k's run folder
SUMMARY_FILE = "summary.json"  # <workdir>/summary.json: the members' numbers, mean and standard deviation


def state_sharding(dp: parallel.DataParallel) -> dict:
  """Where a members run's stacked LM state lives: parameters, optimiser state and carry split along the member
  axis (the carry also along the batch), the step counters replicated (every process reads them)."""
  rep, split = dp.replicated, dp.member_sharding()
  return {"params": split, "opt_state": split, "step": rep, "carry": dp.member_sharding(models.CARRY_BATCH_AXIS),
          members_lib.DIVERGED: rep}


def _pick(record: dict, k: int) -> dict:
  """Member k's part of a record of the run (its [K] lists: the k-th value; the run's own numbers as they are)."""
  return {key: v[k] if isinstance(v, list) else v for key, v in record.items()}


def member_meta(meta: dict, k: int) -> dict:
  """Member k's part of the trainer's record of the run (`trainer._meta`): its epochs, sums, best, divergence."""
  at = lambda v: v[k] if isinstance(v, list) else v
  return {**meta, "history": [_pick(h, k) for h in meta["history"]], "epoch_sums": _pick(meta["epoch_sums"], k),
          "best": at(meta["best"]), "best_epoch": at(meta["best_epoch"]), "diverged": at(meta["diverged"])}


def write_members(task, state, best_state, metas: list, finals: list) -> dict:
  """Each member's folder at the run's end (`task.member_runs`, `metas` and `finals` member k's record and
  results): its metrics.jsonl (its part of the run's), results.json, curves.png (with `plot`) and checkpoints
  (`save_member`); then the members' summary (`members_summary`)."""
  workdir = task.member_runs[0][0].parent.parent
  records, _ = files.read_jsonl(workdir / "metrics.jsonl") if parallel.is_writer() else ([], 0)
  num_params = sum(x.size for x in jax.tree_util.tree_leaves(state["params"])) // task.size  # (each)
  per_member = []
  for k, ((folder, config), meta, final) in enumerate(zip(task.member_runs, metas, finals)):
    out = {**run_record.results(config, task, meta, num_params), **final,
           "member": {"index": k, "of": task.size, "run": str(workdir), "diverged": meta["diverged"]}}
    if parallel.is_writer():
      files.write_whole(folder / "metrics.jsonl", "".join(json.dumps(files.finite(_pick(r, k)), allow_nan=False)
                                                          + "\n" for r in records))
      files.write_json(folder / "results.json", out)
      if config.get("plot", False):
        metrics_lib.plot_curves(folder / "metrics.jsonl", folder / "curves.png", title=out["config"])
    save_member(folder, k, meta["step"], state, best_state, meta, config)
    per_member.append(out)
  return members_summary(workdir, per_member, task.config.name)


def save_member(folder, k: int, step: int, state, best_state, meta: dict, config) -> None:
  """Member k's final state (and its best, if any) as the checkpoints of a plain run of its config; `meta` is its
  record with the run's progress."""
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
  log.info("%s", summary["line"])
  return summary
