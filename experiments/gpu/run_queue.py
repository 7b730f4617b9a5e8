"""Train a priority list of runs (any study's configs) on one accelerator inside a wall-clock budget, and keep a
record of each that a caller can collect at any moment.

    python -m experiments.gpu.run_queue --jobs=large_bd_wd,large_bd_wd_tied --budget_s=700 \
        --run_dir=/tmp/wt/runs --record_dir=/tmp/wt/records
    python -m experiments.gpu.run_queue --job_file=experiments/gpu/jobs_next.txt --budget_s=700 ...
    python -m experiments.gpu.run_queue --job=inan.py:medium,al --job=large_bd_wd_tied:seed=1 ...
    python -m experiments.gpu.run_queue --dry_run --jobs=small_tied --run_dir=/tmp/d/runs --record_dir=/tmp/d/records
    python -m experiments.gpu.run_queue --stamp=.gpu      # before a GPU call: the commit the records will name

Each job runs as its own `python -m experiments.ptb` process; the driver starts them in priority order while
budget is left, moves each down the precision ladder (`--precisions`) when its measured rate would miss the
deadline, stops every job with SIGTERM at the deadline (the trainer saves and exits), and writes every record
whole, so a caller may collect `--record_dir` at any moment. Job syntax, the ladder, the probe and the records'
layout: experiments/gpu/README.md.
"""
from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from absl import app, flags

from experiments import run_main
from experiments.gpu.jobs import (MEMBERS_DIR, REPO, SUMMARY_FILE, Job, job_config, job_members, parse_job,
                                  read_job_specs, record_mismatch, steps_of_job)
from experiments.gpu.provenance import environment, stamp
import wt_jax.files as files

_JOBS = flags.DEFINE_list("jobs", [], "Jobs by priority, comma-separated (CONFIG[:ARGUMENT][:key=value...]); a "
                          "job whose argument holds a comma goes in --job or --job_file.")
_JOB = flags.DEFINE_multi_string("job", [], "One job (repeatable), after --jobs.")
_JOB_FILE = flags.DEFINE_string("job_file", "", "A file of jobs, one a line (# comments), after --job.")
_CHECK_JOBS = flags.DEFINE_bool("check_jobs", False, "Build every job's config and read its corpus, print each "
                                "job's steps, and exit.")
_DETERMINISTIC = flags.DEFINE_bool("deterministic", False, "Every job with config.deterministic (XLA:GPU's "
                                   "deterministic kernels).")
_EXPECT_BACKEND = flags.DEFINE_string("expect_backend", "", "Stop with one line unless JAX's backend is this "
                                      "(gpu on a GPU machine); empty: any.")
_STAMP = flags.DEFINE_string("stamp", "", "Write DIR/commit and DIR/source for a copy of this checkout, and exit.")
_SET = flags.DEFINE_multi_string("set", [], "key=value overrides for every job (e.g. checkpoint_every_epochs=0).")
_PARALLEL = flags.DEFINE_integer("parallel", 1, "Jobs running at once on the device (two large recurrences can "
                                 "run slower side by side than one after the other: BUILD_NOTES §26).")
_BUDGET = flags.DEFINE_float("budget_s", 700.0, "Wall-clock seconds from the driver's start to its deadline.")
_MIN_START = flags.DEFINE_float("min_start_s", 120.0, "Start a queued job only with this much budget left.")
_PRECISIONS = flags.DEFINE_list("precisions", ["float32", "tensorfloat32"],
                                "matmul_precision ladder: start on the first, step down if too slow.")
_CHECK_STEPS = flags.DEFINE_integer("check_steps", 400, "Steps after which a job's rate is judged.")
_EVAL_SHARE = flags.DEFINE_float("eval_share", 0.1, "Validation time, as a share of training time (projection).")
_TEST_S = flags.DEFINE_float("test_s", 60.0, "Seconds allowed for the final test evaluation (projection).")
_RUNS = flags.DEFINE_string("run_dir", None, "Folder of the jobs' workdirs.")
_RECORDS = flags.DEFINE_string("record_dir", None, "Folder of the records to collect.")
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "Tiny shapes on the CPU: the whole path in seconds.")
_POLL_S = flags.DEFINE_float("poll_s", 2.0, "Seconds between looks at the jobs.")
_XLA_FLAGS = flags.DEFINE_string("xla_flags", "", "XLA_FLAGS for every job (a probe's choice replaces it).")
_PROBE = flags.DEFINE_string("probe", "", "A config to time with each of --probe_variants (experiments.bench) "
                             "before the jobs; the fastest variant's settings then apply to every job.")
_PROBE_VARIANTS = flags.DEFINE_list("probe_variants", ["u1", "u5", "u35", "u1+while"],
                                    "uK: scan_unroll=K; +while: XLA command buffers also over while loops; "
                                    "-cb: command buffers off.")
_PROBE_STEPS = flags.DEFINE_integer("probe_steps", 100, "Timed steps per repeat of each probe variant.")
_PROBE_TIMEOUT = flags.DEFINE_float("probe_timeout_s", 150.0, "Seconds one probe variant may take (compilation "
                                    "included) before it is abandoned.")

PRECISIONS = ("default", "float32", "tensorfloat32")  # config.matmul_precision's values (wt_jax.precision)
# Flag values the loop cannot run with stop it with one line before anything starts.
for _name, _ok, _want in (
    ("parallel", lambda v: v >= 1, "at least 1"),
    ("budget_s", lambda v: math.isfinite(v) and v > 0, "a positive number of seconds"),
    ("min_start_s", lambda v: math.isfinite(v) and v >= 0, "a number of seconds, 0 or more"),
    ("poll_s", lambda v: math.isfinite(v) and v > 0, "a positive number of seconds"),
    ("check_steps", lambda v: v >= 1, "at least 1 step"),
    ("probe_steps", lambda v: v >= 1, "at least 1 step"),
    ("precisions", lambda v: bool(v) and all(p in PRECISIONS for p in v), f"a ladder of {', '.join(PRECISIONS)}")):
  flags.register_validator(_name, _ok, message=f"--{_name} must be {_want}.")

# --dry_run: every job shrunk to seconds on a CPU, with every part of a real run (epochs, validation, test).
DRY_RUN_SET = ("hidden_size=16", "batch_size=4", "bptt=5", "train_max_tokens=1200", "num_epochs=2",
               "eval_max_tokens=400", "test_window=20", "log_every=10", "eval_batch_size=4", "plot=False")
DRY_RUN_KEYS = {"hidden_size", "batch_size", "bptt", "eval_batch_size"}  # what a dry-run probe shrinks
# What a probe takes from the settings common to every job: the shapes a dry run shrinks, and the members (K
# models in one program is another program to time).
PROBE_KEYS = DRY_RUN_KEYS | {"members", "member_values"}
# XLA:GPU flags of the probe's variants: command buffers (CUDA graphs) extended to while loops (the loop then
# runs on the device, without a host round trip per iteration), or turned off.
VARIANT_XLA = {"": "", "+while": "--xla_gpu_enable_command_buffer=+WHILE",
               "-cb": "--xla_gpu_enable_command_buffer="}


def projected_end(now: float, step: int, steps_per_s: float, total_steps: int, eval_share: float,
                  test_s: float) -> float:
  """When a job at `step` of `total_steps`, training at `steps_per_s`, should have written its results:
  the steps left, plus validation as a share of them, plus the test."""
  return now + (total_steps - step) / max(steps_per_s, 1e-9) * (1.0 + eval_share) + test_s


def decide(job_ends: list[tuple[str, int, int, float | None]], deadline: float) -> tuple[str, str | None]:
  """What to do once the running jobs' rates are known.

  job_ends: (label, rung, last rung index, projected end or None if not yet measured), by priority.
  Returns (action, label): ('restart', j) — j cannot end in time and has a lower precision rung;
  ('shed', j) — a job other than the lowest-priority one cannot end in time on its last rung, so j, the
  lowest-priority running job, is stopped to give it the device; ('keep', None) otherwise. A late job of the
  lowest priority alone is kept: it runs to the deadline and keeps its curve so far (a run longer than any
  window, e.g. the 500-epoch main job, is such a job by design)."""
  for label, rung, last, end in job_ends:
    if end is not None and end > deadline and rung < last:
      return "restart", label
  late = [label for label, rung, last, end in job_ends if end is not None and end > deadline]
  if len(job_ends) > 1 and any(label != job_ends[-1][0] for label in late):
    return "shed", job_ends[-1][0]
  return "keep", None


def _copy(src: Path, dst: Path) -> None:
  """A run's text record (JSON, JSON lines, its log) copied into the records, written whole; a byte that is not
  UTF-8 (only a log could hold one) becomes U+FFFD. A file the run has not written yet is skipped."""
  if src.exists():
    files.write_whole(dst, src.read_bytes().decode("utf-8", errors="replace"))


def _records_of(metrics_path: Path, kind: str) -> list[dict]:
  """The records of `kind` in a metrics.jsonl (a line that is not a record, being written or damaged, is not
  one: `files.read_jsonl`)."""
  return [r for r in files.read_jsonl(metrics_path)[0] if r.get("kind") == kind]


def _last_line(log: Path) -> str | None:
  """The last line of a job's log: the reason its entry point stops with on an error it names (one line, e.g. the
  trainer's refusal to resume a folder started with another config), else a traceback's last line."""
  try:
    with open(log, "rb") as f:
      f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
      lines = [line.strip() for line in f.read().decode("utf-8", errors="replace").splitlines() if line.strip()]
  except OSError:
    return None
  return lines[-1][-300:] if lines else None


def _saved_step(workdir: Path) -> bool:
  """Whether a run folder holds a checkpoint step (`checkpoints/{last,best}/<step>/`), which the trainer resumes
  from."""
  return any(p.name.isdigit() for kind in ("last", "best") for p in (workdir / "checkpoints" / kind).glob("*"))


def _json_object(path: Path, keys: tuple[str, ...]) -> dict:
  """The JSON object a record file holds, with `keys`; ValueError naming the file if it cannot be read, is not
  an object or lacks one of them."""
  try:
    value = json.loads(path.read_text())
  except (OSError, ValueError) as e:  # (UnicodeDecodeError and JSONDecodeError are ValueErrors)
    raise ValueError(f"its {path.name} cannot be read ({type(e).__name__})") from None
  missing = [k for k in keys if not isinstance(value, dict) or k not in value]
  if missing:
    raise ValueError(f"its {path.name} is not a run's record (no {missing[0]!r})")
  return value


def parse_variant(name: str) -> tuple[int, str]:
  """'u5+while' → (scan_unroll 5, its XLA_FLAGS)."""
  m = re.fullmatch(r"u(\d+)(\+while|-cb)?", name)
  if not m:
    raise app.UsageError(f"Unknown probe variant {name!r}: expected uK, uK+while or uK-cb.")
  return int(m.group(1)), VARIANT_XLA[m.group(2) or ""]


def choose_variant(results: dict[str, dict], rtol: float = 1e-3) -> str | None:
  """The fastest variant whose first training step's loss matches the first variant's (the same arithmetic,
  so the same loss to rounding: TF32 rounding is ~1e-3 relative) — for a members probe every member's loss
  (`warmup_nll[0]` is then a list of K) —, or None if none ran."""
  ran = {k: v for k, v in results.items() if v.get("train_ms_per_step")}
  if not ran:
    return None
  first = lambda v: v["warmup_nll"][0] if isinstance(v["warmup_nll"][0], list) else [v["warmup_nll"][0]]
  base = first(next(iter(ran.values())))
  same = {k: v for k, v in ran.items()
          if len(first(v)) == len(base) and all(abs(a - b) <= rtol * abs(b) for a, b in zip(first(v), base))}
  return min(same, key=lambda k: same[k]["train_ms_per_step"])


def probe(job: Job, variants: list[str], common: list[str], precision: str, records: Path,
          deadline: float) -> tuple[int, str] | None:
  """Time the job's train step under each variant (one `experiments.bench` process each: XLA_FLAGS is
  read once per process), write probe.json and return the chosen (scan_unroll, XLA_FLAGS)."""
  results = {}
  overrides = [o for o in common if o.split("=", 1)[0] in PROBE_KEYS]  # the program's shape, not run settings
  for name in variants:
    if time.time() > deadline:
      results[name] = {"skipped": "deadline"}
      continue
    unroll, xla = parse_variant(name)
    cmd = [sys.executable, "-m", "experiments.bench", f"--config={job.config_arg}",
           f"--config.matmul_precision={precision}", f"--config.scan_unroll={unroll}", "--peak=false",
           f"--steps={_PROBE_STEPS.value}", "--warmup=10", "--repeats=3", "--eval_windows=0"]
    cmd += [f"--config.{o}" for o in overrides + job.overrides]
    env = {**os.environ, "XLA_FLAGS": xla}
    t0 = time.time()
    try:
      res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=max(10.0, min(_PROBE_TIMEOUT.value, deadline - time.time())))
      out = json.loads(res.stdout.strip().splitlines()[-1]) if res.returncode == 0 else {
          "error": (res.stderr.strip().splitlines() or ["?"])[-1][-300:], "returncode": res.returncode}
    except (subprocess.TimeoutExpired, ValueError, IndexError) as e:
      out = {"error": repr(e)[:300]}
    out["wall_s"] = round(time.time() - t0, 1)
    results[name] = out
    files.write_json(records / "probe.json", {"config": job.config_arg, "variants": results})
  chosen = choose_variant(results)
  files.write_json(records / "probe.json", {"config": job.config_arg, "variants": results, "chosen": chosen})
  return parse_variant(chosen) if chosen else None


class Driver:
  """The loop: start, watch, judge, stop and record the jobs (see the module docstring)."""

  def __init__(self, jobs: list[Job], runs: Path, records: Path, budget_s: float, common: list[str],
               xla_flags: str = "", t0: float | None = None):
    self.jobs, self.runs, self.records, self.common, self.xla_flags = jobs, runs, records, common, xla_flags
    for job in jobs:
      job.members = job_members(job, common)
    self.t0 = time.time() if t0 is None else t0
    self.deadline = self.t0 + budget_s
    self.events: list[dict] = []
    self.ignored_deadline: str | None = None  # (said once)
    runs.mkdir(parents=True, exist_ok=True)
    records.mkdir(parents=True, exist_ok=True)

  # -- one job ---------------------------------------------------------------------------------------------
  def workdir(self, job: Job) -> Path:
    return self.runs / job.label

  def precision(self, job: Job) -> str:
    return _PRECISIONS.value[job.rung]

  def done_file(self, job: Job) -> Path:
    """The file a finished run has: results.json, or a members run's summary.json (written after every
    member's results)."""
    return self.workdir(job) / (SUMMARY_FILE if job.members else "results.json")

  def metrics_file(self, job: Job) -> Path:
    """The metrics.jsonl whose progress records give the job's step and rate: a members run's member 0's
    (every member's records carry the run's step and rate)."""
    return self.workdir(job) / (f"{MEMBERS_DIR}/0/metrics.jsonl" if job.members else "metrics.jsonl")

  def adopt(self, job: Job) -> bool:
    """Before a start: look at what the job's folder already holds. Returns True if it holds the job's
    finished run (then recorded, not rerun). A run not yet finished with a checkpoint stays, to be resumed at
    its own precision (the trainer refuses it if it is another run's: `record_mismatch`); any other folder
    that is not the job's run is moved aside and the job starts afresh."""
    wd = self.workdir(job)
    run_json, results_json = wd / "run.json", self.done_file(job)
    if wd.exists() and not wd.is_dir():
      return self.set_aside(job, "it is a file, not a run's folder")
    if not (run_json.exists() or results_json.exists() or (wd / "checkpoints").exists()):
      return False
    try:
      run_config = _json_object(run_json, ("config",))["config"]
      if not isinstance(run_config, dict):
        raise ValueError("its run.json's config is not an object")
      results = None
      if results_json.exists():
        results = _json_object(results_json, ("config", "seeds") if job.members else ("config",))
        lost = [k for k in range(job.members) if not (wd / MEMBERS_DIR / str(k) / "results.json").exists()]
        if lost:  # (the trainer writes summary.json after every member's results.json)
          raise ValueError(f"its {MEMBERS_DIR}/{lost[0]}/results.json is missing beside its {SUMMARY_FILE}")
      why = record_mismatch(run_config, job_config(job, self.common).to_dict(), _PRECISIONS.value, results,
                            resumable=results is None and _saved_step(wd))
    except ValueError as e:
      why = f"{e}: whose run it is, or whether it ended, cannot be told"
    except (KeyError, TypeError, AttributeError) as e:
      why = f"its run.json's config is not a run's ({type(e).__name__}): whose run it is cannot be told"
    if why is None:
      job.rung = _PRECISIONS.value.index(run_config["matmul_precision"])
      if results is None:
        return False
      job.state = "finished"
      job.events.append({"t": round(time.time() - self.t0, 1), "event": "finished earlier",
                         "precision": self.precision(job)})
      self.collect(job)
      return True
    return self.set_aside(job, why)

  def set_aside(self, job: Job, why: str) -> bool:
    """Move the job's folder, which is not the job's run, to `<job>.set_aside[.<n>]` (`files.set_aside`:
    nothing in it is lost), say so in one line and an event. Returns False: the job starts afresh."""
    wd = self.workdir(job)
    aside = files.set_aside(wd, "set_aside")
    print(f"{job.label}: {wd} holds another run's record ({why}); moved to {aside.name}, starting afresh.",
          file=sys.stderr, flush=True)
    job.events.append({"t": round(time.time() - self.t0, 1), "event": "set aside", "why": why,
                       "moved_to": aside.name})
    return False

  def start(self, job: Job) -> None:
    if job.state == "queued" and self.adopt(job):
      return
    wd = self.workdir(job)
    cmd = [sys.executable, "-m", "experiments.ptb", f"--config={job.config_arg}", f"--workdir={wd}",
           f"--config.matmul_precision={self.precision(job)}", "--alsologtostderr"]
    cmd += [f"--config.{o}" for o in self.common + job.overrides]
    wd.mkdir(parents=True, exist_ok=True)
    log = open(wd / "log.txt", "ab")
    env = {**os.environ, "XLA_FLAGS": self.xla_flags} if self.xla_flags else None
    job.proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
    log.close()
    job.state, job.started, job.checked_at_step, job.last_check = "running", time.time(), 0, None
    job.events.append({"t": round(job.started - self.t0, 1), "event": "start", "precision": self.precision(job),
                       "cmd": " ".join(cmd[1:]), "xla_flags": self.xla_flags})

  def stop(self, job: Job, state: str, why: str, sig: int = signal.SIGTERM, checks: list[dict] | None = None
           ) -> None:
    """SIGTERM (the trainer saves `last` and exits; SIGKILL for a run that is thrown away), then record what
    the job has; `checks`, the rate checks behind the decision, go into its event."""
    if job.proc is not None and job.proc.poll() is None:
      job.proc.send_signal(sig)
      try:
        job.proc.wait(timeout=30)
      except subprocess.TimeoutExpired:
        job.proc.kill()
        job.proc.wait()
    job.state, job.ended = state, time.time()
    event = {"t": round(job.ended - self.t0, 1), "event": state, "why": why}
    if checks:
      event["checks"] = checks
    job.events.append(event)
    self.collect(job)

  def restart_lower(self, job: Job, why: str, checks: list[dict] | None = None) -> None:
    """Stop the job, keep its probe, and start it again from scratch one precision rung down."""
    self.stop(job, "stopped", why, signal.SIGKILL, checks)  # (its checkpoint would never be resumed)
    wd = self.workdir(job)
    out = self.records / job.label
    _copy(self.metrics_file(job), out / f"probe_{self.precision(job)}.jsonl")
    files.set_aside(wd, f"{self.precision(job)}.abandoned")  # (kept: <job>.<precision>.abandoned[.<n>])
    for name in ("metrics.jsonl", "curve.jsonl", "log.txt", "run.json"):  # the record describes the new run only
      (out / name).unlink(missing_ok=True)
    shutil.rmtree(out / MEMBERS_DIR, ignore_errors=True)  # (a members run's: its members' records)
    job.rung += 1
    self.start(job)

  def collect(self, job: Job) -> None:
    """Copy the job's small files into the records (atomically): a run's results.json, run.json,
    metrics.jsonl, curve.jsonl (its epoch records) and log.txt; a members run's run.json, summary.json and
    log.txt, and each member's results.json, run.json, metrics.jsonl and curve.jsonl in members/<k>/."""
    wd, out = self.workdir(job), self.records / job.label
    out.mkdir(parents=True, exist_ok=True)
    for name in ("run.json", "log.txt", SUMMARY_FILE) if job.members else ("run.json", "log.txt"):
      _copy(wd / name, out / name)
    runs = [(wd, out)] if not job.members else [(wd / MEMBERS_DIR / str(k), out / MEMBERS_DIR / str(k))
                                                for k in range(job.members)]
    for src, dst in runs:
      if not src.is_dir():  # (a member's folder appears when the run starts)
        continue
      dst.mkdir(parents=True, exist_ok=True)
      for name in ("results.json", "metrics.jsonl") + (("run.json",) if job.members else ()):
        _copy(src / name, dst / name)
      epochs = _records_of(src / "metrics.jsonl", "epoch")
      if epochs:
        files.write_whole(dst / "curve.jsonl", "".join(json.dumps(r) + "\n" for r in epochs))

  def progress(self, job: Job) -> tuple[int, float] | None:
    """(step, steps/s) of the job's latest progress record, or None before its second one."""
    train = [r for r in _records_of(self.metrics_file(job), "train")
             if isinstance(r.get("step"), int) and isinstance(r.get("steps_per_s"), (int, float))]
    if len(train) < 2:
      return None
    return train[-1]["step"], train[-1]["steps_per_s"]

  def stop_running(self, why: str) -> int:
    """Stop every running job (SIGTERM: the trainer saves its checkpoint) and write the final status, each
    step on its own so that one failure (the reason the driver stops, perhaps) does not leave jobs running.
    Returns how many were running."""
    running = [j for j in self.jobs if j.state == "running"]
    for job in running:
      try:
        self.stop(job, "stopped", why)
      except Exception:  # (recording failed: the job is still stopped)
        if job.proc is not None and job.proc.poll() is None:
          job.proc.terminate()
    try:
      self.write_status(done=True)
    except Exception:
      pass
    return len(running)

  # -- the loop --------------------------------------------------------------------------------------------
  def write_status(self, done: bool = False) -> None:
    now = time.time()
    status = {"elapsed_s": round(now - self.t0, 1), "deadline_s": round(self.deadline - self.t0, 1),
              "done": done, "events": self.events, "jobs": []}
    for job in self.jobs:
      entry = {"label": job.label, "config": job.config_arg, "overrides": job.overrides, "members": job.members,
               "state": job.state, "matmul_precision": self.precision(job), "last_check": job.last_check,
               "checks": job.checks, "events": job.events}
      if job.started:
        entry["wall_s"] = round((job.ended or now) - job.started, 1)
      if job.proc is not None and job.proc.poll() is not None:
        entry["returncode"] = job.proc.returncode
      status["jobs"].append(entry)
    files.write_json(self.records / "status.json", status)

  def judge(self, steps_of: dict[str, int]) -> None:
    """Check each running job due for it (every `--check_steps` steps), then act on `decide`. Every check is
    appended to its job's `checks`; a restart or shed event carries the checks that made it."""
    running = [j for j in self.jobs if j.state == "running"]
    ends, made = [], []
    now = time.time()
    for job in running:
      p = self.progress(job)
      end = None
      if p is not None and p[0] >= _CHECK_STEPS.value and p[0] >= job.checked_at_step + _CHECK_STEPS.value:
        step, rate = p
        end = projected_end(now, step, rate, steps_of[job.label], _EVAL_SHARE.value, _TEST_S.value)
        job.checked_at_step = step
        job.last_check = {"t": round(now - self.t0, 1), "event": "check", "label": job.label, "step": step,
                          "steps_per_s": round(rate, 2), "ms_per_step": round(1000 / max(rate, 1e-9), 3),
                          "projected_end_s": round(end - self.t0, 1), "deadline_s": round(self.deadline - self.t0, 1),
                          "sharing_with": [j.label for j in running if j is not job]}
        job.checks.append(job.last_check)
        made.append(job.last_check)
      ends.append((job.label, job.rung, len(_PRECISIONS.value) - 1, end))
    action, label = decide(ends, self.deadline)
    if action == "keep":
      return
    job = next(j for j in self.jobs if j.label == label)
    late = [lab for lab, _, _, end in ends if end is not None and end > self.deadline]
    if action == "restart":
      self.restart_lower(job, f"projected past the deadline at {self.precision(job)}", made)
    else:
      self.stop(job, "shed", f"{', '.join(late)} projected past the deadline while sharing the device; "
                f"{label}, the lowest-priority running job, is stopped", checks=made)

  def read_deadline(self) -> None:
    """A caller may move the deadline while the driver runs: `<records>/deadline_at` holds a UNIX time (e.g.
    a later call that knows how much of the window is left). A time before the driver started (a file left by
    an earlier driver) or not finite is ignored, said once in a line and an event."""
    path = self.records / "deadline_at"
    try:
      at = float(path.read_text().strip())
    except (OSError, ValueError):
      return
    if not math.isfinite(at) or at < self.t0:
      if str(at) != self.ignored_deadline:
        self.ignored_deadline = str(at)
        print(f"{path}: {at} ignored (before the driver started, or not a time).", file=sys.stderr, flush=True)
        self.events.append({"t": round(time.time() - self.t0, 1), "event": "deadline_at ignored", "value": str(at)})
      return
    if abs(at - self.deadline) > 0.5:
      self.events.append({"t": round(time.time() - self.t0, 1), "event": "deadline moved",
                          "from_s": round(self.deadline - self.t0, 1), "to_s": round(at - self.t0, 1)})
      self.deadline = at

  def run(self, steps_of: dict[str, int]) -> None:
    while True:
      self.read_deadline()
      now = time.time()
      for job in self.jobs:
        if job.state == "running" and job.proc.poll() is not None:
          job.ended = time.time()
          ok = job.proc.returncode == 0 and self.done_file(job).exists()
          job.state = "finished" if ok else "failed"
          job.events.append({"t": round(job.ended - self.t0, 1), "event": job.state,
                             "returncode": job.proc.returncode,
                             **({} if ok else {"why": _last_line(self.workdir(job) / "log.txt")})})
          self.collect(job)
      if now >= self.deadline:
        for job in self.jobs:
          if job.state == "running":
            self.stop(job, "stopped", "deadline")
        break
      running = sum(j.state == "running" for j in self.jobs)
      for job in self.jobs:
        if job.state == "queued" and running < _PARALLEL.value and self.deadline - now >= _MIN_START.value:
          self.start(job)
          running += job.state == "running"
      self.judge(steps_of)
      for job in self.jobs:
        if job.state == "running":
          self.collect(job)
      self.write_status()
      if not any(j.state in ("running", "queued") for j in self.jobs) or (
          running == 0 and self.deadline - now < _MIN_START.value):
        break
      time.sleep(_POLL_S.value)
    self.write_status(done=True)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  if _STAMP.value:
    try:
      print(stamp(Path(_STAMP.value)))
    except OSError as e:
      raise SystemExit(f"--stamp: cannot write {_STAMP.value}: {e.strerror or e}.") from None
    return
  if _MIN_START.value >= _BUDGET.value:
    raise app.UsageError(f"--min_start_s ({_MIN_START.value:g}) leaves no time to start a job in --budget_s "
                         f"({_BUDGET.value:g}).")
  common = (list(DRY_RUN_SET) if _DRY_RUN.value else []) + list(_SET.value)  # (--set adjusts a dry run's shapes)
  common += ["deterministic=true"] if _DETERMINISTIC.value else []
  jobs, steps_of, probe_job = _jobs_of_flags(common)
  if _CHECK_JOBS.value:
    for j in jobs:
      print(f"{j.label}: --config={j.config_arg}", *(shlex.quote(f"--config.{o}") for o in j.overrides),
            f"({steps_of[j.label]} steps{f', {j.members} members' if j.members else ''})")
    return
  runs, records = _folders()
  env = environment()
  from wt_jax.train import run_record
  env["wt_jax_commit"] = run_record.code_revision()
  files.write_json(records / "env.json", env)
  if _EXPECT_BACKEND.value and env.get("backend") != _EXPECT_BACKEND.value:
    raise SystemExit(f"JAX's backend is {env.get('backend')!r}, not {_EXPECT_BACKEND.value!r} "
                     f"({env.get('jax_probe_error') or env.get('device_kind')}): no job started.")
  t0 = time.time()
  xla_flags = _XLA_FLAGS.value
  if probe_job is not None:
    chosen = probe(probe_job, _PROBE_VARIANTS.value, common, _PRECISIONS.value[0], records,
                   t0 + _BUDGET.value - _MIN_START.value)
    if chosen is not None:
      unroll, xla_flags = chosen
      common = common + [f"scan_unroll={unroll}"]
    else:
      print(f"probe: no variant ran (their errors: {records / 'probe.json'}); the jobs run with the settings "
            f"given.", file=sys.stderr, flush=True)
  driver = Driver(jobs, runs, records, _BUDGET.value, common, xla_flags, t0)
  _drive(driver, steps_of, records)
  _finish(driver, records)


def _jobs_of_flags(common: list[str]):
  """The jobs that --jobs, --job and --job_file name (each config built, its steps counted, its corpus read, its
  members spelling checked), their steps by label, and the --probe job (None without one); a `UsageError` for a
  job that would not start."""
  specs = read_job_specs(_JOBS.value, _JOB.value, _JOB_FILE.value)
  if not specs:
    raise app.UsageError("No jobs: name them with --jobs, --job or --job_file.")
  jobs = [parse_job(s, common) for s in specs]
  if len({j.label for j in jobs}) != len(jobs):
    raise app.UsageError("Two jobs have the same label; give them different overrides.")
  steps_of = {j.label: steps_of_job(j, common) for j in jobs}
  for j in jobs:
    j.members = job_members(j, common)
  probe_job = None
  if _PROBE.value:
    probe_job = parse_job(_PROBE.value, common)  # (a clear error for an unknown config or key)
    job_members(probe_job, common)
    for v in _PROBE_VARIANTS.value:
      parse_variant(v)
  return jobs, steps_of, probe_job


def _folders() -> tuple[Path, Path]:
  """--run_dir and --record_dir, made; a `UsageError` if either is missing or they are one folder."""
  if not (_RUNS.value and _RECORDS.value):
    raise app.UsageError("--run_dir and --record_dir are required.")
  runs, records = Path(_RUNS.value), Path(_RECORDS.value)
  if runs.resolve() == records.resolve():
    raise app.UsageError("--run_dir and --record_dir must differ (records are copied out of the runs).")
  try:
    for folder in (runs, records):
      folder.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise SystemExit(f"Cannot make {e.filename}: {e.strerror}.") from None
  return runs, records


def _drive(driver: Driver, steps_of: dict, records: Path) -> None:
  """Run the queue; if the driver is stopped (SIGINT, SIGTERM) or fails, stop its jobs, keep their records and
  exit with one line (130 for a stop, 1 for a failure, its traceback in driver_error.txt)."""
  signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops the jobs as SIGINT does
  try:
    driver.run(steps_of)
  except BaseException as e:
    interrupted = isinstance(e, KeyboardInterrupt)
    why = "interrupted" if interrupted else f"{type(e).__name__}: {e}"
    if not interrupted:
      files.write_whole(records / "driver_error.txt", traceback.format_exc())
    stopped = driver.stop_running(f"driver {why}")
    print(f"The driver stopped ({why}{'' if interrupted else f'; traceback in {records}/driver_error.txt'}); "
          f"{stopped} running job(s) stopped (SIGTERM: each saves its checkpoint); records kept in {records}.",
          file=sys.stderr, flush=True)
    sys.exit(130 if interrupted else 1)


def _finish(driver: Driver, records: Path) -> None:
  """The driver's wall time into env.json, each job's state as one JSON line, and a line per failed job (its
  reason: its log's last line, kept in its "failed" event); exit 1 if any failed."""
  env = json.loads((records / "env.json").read_text())
  env["driver_wall_s"] = round(time.time() - driver.t0, 1)
  files.write_json(records / "env.json", env)
  print(json.dumps({j.label: j.state for j in driver.jobs}))
  failed = [j for j in driver.jobs if j.state == "failed"]
  for j in failed:
    code = j.proc.returncode if j.proc is not None else None
    why = j.events[-1].get("why") if j.events else None
    print(f"{j.label} failed (return code {code}){f': {why}' if why else ''}; its log is "
          f"{records / j.label / 'log.txt'}.", file=sys.stderr)
  if failed:
    sys.exit(1)


if __name__ == "__main__":
  run_main(main)
