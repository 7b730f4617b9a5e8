"""What a members run keeps per member around the trainer (`wt_jax.members`: K models as one stacked state; the
task is `lm.MembersTask`, `lm.fit` trains it with this folder).

    MembersFolder(workdir, task)     `trainer.run`'s folder for the K members: the run's lock, member k's
                                     `RunFolder` in <workdir>/members/<k>/ (run.json, metrics.jsonl, results.json,
                                     vocab.txt and, at the end, its checkpoints: `save_member`)
    <workdir>/summary.json           `members_summary`: each number per member, mean and sd

The members' non-finite policy (`MembersFolder.freeze`): a member whose numbers are not finite is frozen at its
last finite state (`members.guarded` inside the step, `members.mark_diverged` outside) while the others train on;
the run stops (`NonFiniteLossError`) when none trains. Each member's best state is kept by `members.select`.
"""
from __future__ import annotations

import logging
import statistics

import jax
import jax.numpy as jnp
import numpy as np
from etils import epath

import wt_jax.files as files
import wt_jax.parallel as parallel
import wt_jax.members as members_lib
from wt_jax.train.checkpoint import Checkpoints
from wt_jax.train.run_folder import Folder, NonFiniteLossError, RunFolder
from wt_jax.train.run_record import record_run

log = logging.getLogger(__name__)

MEMBERS_DIR = "members"  # <workdir>/members/<k>/: member k's run folder
SUMMARY_FILE = "summary.json"  # <workdir>/summary.json: the members' numbers, mean and standard deviation


class MembersFolder(Folder):
  """What the trainer keeps of a members run (`trainer.run`'s folder): the run's lock on `path`, and each member's
  `RunFolder` in <path>/members/<k>/, its numbers the k-th of the lists (see the module docstring)."""

  def __init__(self, path, task):  # (task: `lm.MembersTask`)
    super().__init__()
    self.path, self.task = epath.Path(path), task
    configs = task.group.configs
    self.each = [RunFolder(self.path / MEMBERS_DIR / str(k), task, c, lambda s, step, c=c: task.train_metrics(
        s, step, c), lock=False) for k, c in enumerate(configs)]

  def _open(self) -> None:
    for folder in self.each:
      self.enter_context(folder)

  def start(self, run_config, run_versions: dict, resumed_from, saved_config) -> None:
    """The run's run.json and each member's (its own config), written or checked; each member's vocab.txt."""
    if parallel.is_writer():
      record_run(self.path, run_config, run_versions, [(f.path, f.config) for f in self.each], resumed_from,
                 saved_config)
      for f in self.each:
        self.task.write_run_files(f.path, resumed=resumed_from is not None)

  def meta(self, totals: list) -> dict:
    return {"members": [f.meta(t) for f, t in zip(self.each, totals)]}

  def restore(self, meta: dict) -> None:
    for f, m in zip(self.each, meta["members"]):
      f.restore(m)

  def forget_best(self) -> None:
    for f in self.each:
      f.forget_best()

  def new_epoch(self) -> None:
    for f in self.each:
      f.new_epoch()

  def flush(self) -> None:
    for f in self.each:
      f.flush()

  def freeze(self, state, k: int, step: int, epoch: int, why: str):
    """Member k frozen at its last finite state, its divergence recorded (once); NonFiniteLossError when none of
    the members trains any more."""
    folder = self.each[k]
    if folder.diverged is not None:
      return state
    folder.diverged = {"step": step, "epoch": epoch, "reason": why}
    if all(f.diverged is not None for f in self.each):
      raise NonFiniteLossError(f"All {len(self.each)} members diverged (the last: {why})", why)
    log.warning("Member %d (seed %s) diverged: %s; frozen at its last finite state, the others train on.",
                    k, folder.config.seed, why)
    return members_lib.mark_diverged(state, k, step)

  def progress(self, state, sums, step: int, epoch: int):
    """(state, each member's epoch sums on the host, each one's progress numbers), the members whose numbers are
    not finite — or whose step froze them (`members.guarded`) — frozen."""
    for k, at in enumerate(np.asarray(jax.device_get(state[members_lib.DIVERGED]))):
      if at >= 0:
        state = self.freeze(state, k, step, epoch, f"a non-finite training loss or gradient at step {int(at)}")
    now = jax.device_get(sums) or {}
    totals, shown = [], []
    for k, f in enumerate(self.each):
      mine = {key: np.reshape(v, (len(self.each),))[k] for key, v in now.items()}
      try:
        _, t, s = f.progress(state, mine, step, epoch)
      except NonFiniteLossError as e:
        state = self.freeze(state, k, step, epoch, e.why)
        t = f.totals(mine)
        s = f.train_metrics(t, step)
      totals.append(t)
      shown.append(s)
    return state, totals, shown

  def line(self, shown: list, values: list | None = None) -> str:
    rows = [{**s, **v} for s, v in zip(shown, values or [{}] * len(shown))]
    return summary_line(rows, [f.diverged is None for f in self.each], [f.config.name for f in self.each])

  def write_train(self, shown: list, **common) -> None:
    for f, s in zip(self.each, shown):
      f.write_train(s, **common)

  def add_epoch(self, state, best_state, head: dict, shown: list, values: list, train_s: float):
    """Each member's record of the epoch; (state, best state, whether it changed): the members that improved get
    a copy of their part of `state` (`members.select`)."""
    improved = []
    for k, (f, s, v) in enumerate(zip(self.each, shown, values)):
      try:
        improved.append(f.add_record(head, s, v, train_s))
      except NonFiniteLossError as e:
        state = self.freeze(state, k, head["step"], head["epoch"], e.why)
        improved.append(f.add_record(head, s, v, train_s, check=False))
    if not any(improved):
      return state, best_state, False
    copy = jax.tree_util.tree_map(jnp.copy, state)
    return state, copy if best_state is None else members_lib.select(np.asarray(improved), copy, best_state), True

  def finish(self, state, best_state, meta: dict, totals: list, run_info: dict) -> dict:
    """Each member's results.json and checkpoints (`save_member`), and the members' summary."""
    metas = [{**meta, **f.meta(t)} for f, t in zip(self.each, totals)]
    finals = self.task.final(state, best_state, metas, totals)
    num_params = sum(x.size for x in jax.tree_util.tree_leaves(state["params"])) // len(self.each)  # (each)
    per_member = []
    for k, (f, m, final) in enumerate(zip(self.each, metas, finals)):
      out = {**f.results(meta, final, num_params, **run_info),
             "member": {"index": k, "of": len(self.each), "run": str(self.path), "diverged": f.diverged}}
      f.write_results(out)
      save_member(f.path, k, meta["step"], state, best_state, m, f.config)
      per_member.append(out)
    return members_summary(self.path, per_member, self.task.config.name)


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


def summary_line(shown: list[dict], live: list[bool], names: list[str] | None = None) -> str:
  """A progress line's metrics: the members' mean and range over those training (`live`). When the members are of
  different configs (`names[k]`, member k's config name), each config's members are summarised apart
  ("| vd: train_ppl …  | al: train_ppl …"): a mean over different settings says nothing about either."""
  K = len(shown)
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
