"""Train a priority list of LM configs on one accelerator inside a wall-clock budget, and keep a record of
each that a caller can collect at any moment (Press & Wolf Table 5 on a lent GPU).

    python -m experiments.gpu_table5 --jobs=large_tied,large --parallel=1 --budget_s=700 \\
        --run_dir=/tmp/wt/runs --record_dir=/tmp/wt/records
    python -m experiments.gpu_table5 --dry_run --run_dir=/tmp/d/runs --record_dir=/tmp/d/records   # CPU, tiny shapes

A job is a config of `configs/` with optional overrides, `large_tied` or `large:seed=1:bptt=35`; each runs as
its own `python -m experiments.ptb` process (`--set` overrides apply to all). Jobs start in the order given,
at most `--parallel` at once, while at least `--min_start_s` of the budget is left.

Precision ladder. A job starts at the first of `--precisions` (`config.matmul_precision`; the papers' GPUs
computed true float32). After `--check_steps` steps its measured rate gives a projected end; if that end is
past the deadline and a lower rung exists, the job is stopped and restarted from scratch one rung down
(`tensorfloat32`), its probe kept in the record. If the job already runs on the last rung and still cannot end
in time while a lower-priority job shares the device, the lowest-priority running job is stopped (shed) and the
check repeats. The lowest-priority job, late on its own, runs on to the deadline and keeps its curve: the way
to give a run longer than the window (the 500-epoch main job) whatever the others leave. The decisions, with
the rates they used, are in `status.json`.

Probe. With `--probe=CONFIG`, before any job, CONFIG's train step is timed (`experiments.bench`, one process
per variant) with each of `--probe_variants`: time steps per compiled loop iteration (`scan_unroll`) and XLA's
command buffers over while loops; the fastest variant whose first-step loss matches the first variant's is
then used by every job (`probe.json`). The deadline can be moved while the driver runs: write a UNIX time to
`<records>/deadline_at`.

Records (`--record_dir`): `env.json` (device, driver, jax/jaxlib, CUDA and cuDNN versions), `status.json`
(every job's state, projections and decisions; rewritten after each change) and per job `<job>/`:
`results.json`, `curve.jsonl` (the epoch records), `metrics.jsonl`, `log.txt` and any `probe_<precision>.jsonl`.
Every file is written to a temporary name and renamed, so a killed driver never leaves half a file; a job
stopped at the deadline keeps its curve so far and is marked unfinished. At the deadline every job gets
SIGTERM (the trainer saves and exits) and the driver exits.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from absl import app, flags

_JOBS = flags.DEFINE_list("jobs", ["large_tied", "large"], "Configs (with :key=value overrides), by priority.")
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
flags.mark_flags_as_required(["run_dir", "record_dir"])

# --dry_run: every job shrunk to seconds on a CPU, with every part of a real run (epochs, validation, test).
DRY_RUN_SET = ("hidden_size=16", "batch_size=4", "bptt=5", "train_max_tokens=1200", "num_epochs=2",
               "eval_max_tokens=400", "test_window=20", "log_every=10", "eval_batch_size=4", "plot=False")
DRY_RUN_KEYS = {"hidden_size", "batch_size", "bptt", "eval_batch_size"}  # what a dry-run probe shrinks
REPO = Path(__file__).resolve().parents[1]
# XLA:GPU flags of the probe's variants: command buffers (CUDA graphs) extended to while loops (the loop then
# runs on the device, without a host round trip per iteration), or turned off.
VARIANT_XLA = {"": "", "+while": "--xla_gpu_enable_command_buffer=+WHILE",
               "-cb": "--xla_gpu_enable_command_buffer="}


@dataclasses.dataclass
class Job:
  """One entry of the list: its label (folder name), config and overrides, and where it stands."""

  label: str
  config: str
  overrides: list[str]
  rung: int = 0  # index into the precision ladder
  state: str = "queued"  # queued | running | finished | failed | stopped (deadline) | shed
  proc: subprocess.Popen | None = dataclasses.field(default=None, repr=False)
  started: float | None = None
  ended: float | None = None
  checked_at_step: int = 0
  last_check: dict | None = None  # the latest rate and projection (every check; events keep the first)
  events: list[dict] = dataclasses.field(default_factory=list)


def parse_job(spec: str) -> Job:
  """'large:seed=1:bptt=35' → Job(label='large_seed1_bptt35', config='large', overrides=[...])."""
  config, *overrides = spec.split(":")
  if not (REPO / "configs" / f"{config}.py").exists():
    raise app.UsageError(f"Unknown job {spec!r}: no configs/{config}.py.")
  bad = [o for o in overrides if "=" not in o]
  if bad:
    raise app.UsageError(f"Job {spec!r}: overrides are key=value, got {bad[0]!r}.")
  label = "_".join([config] + [o.replace("=", "").replace(".", "") for o in overrides])
  return Job(label=label, config=config, overrides=overrides)


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


def _write_atomic(path: Path, text: str) -> None:
  tmp = path.with_name(path.name + ".tmp")
  tmp.write_text(text)
  os.replace(tmp, path)


def _copy_atomic(src: Path, dst: Path) -> None:
  if src.exists():
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def _records_of(metrics_path: Path, kind: str) -> list[dict]:
  if not metrics_path.exists():
    return []
  out = []
  for line in metrics_path.read_text().splitlines():
    try:
      r = json.loads(line)
    except ValueError:  # a line being written
      continue
    if r.get("kind") == kind:
      out.append(r)
  return out


def parse_variant(name: str) -> tuple[int, str]:
  """'u5+while' → (scan_unroll 5, its XLA_FLAGS)."""
  m = re.fullmatch(r"u(\d+)(\+while|-cb)?", name)
  if not m:
    raise app.UsageError(f"Unknown probe variant {name!r}: expected uK, uK+while or uK-cb.")
  return int(m.group(1)), VARIANT_XLA[m.group(2) or ""]


def choose_variant(results: dict[str, dict], rtol: float = 1e-3) -> str | None:
  """The fastest variant whose first training step's loss matches the first variant's (the same arithmetic,
  so the same loss to rounding: TF32 rounding is ~1e-3 relative), or None if none ran."""
  ran = {k: v for k, v in results.items() if v.get("train_ms_per_step")}
  if not ran:
    return None
  base = next(iter(ran.values()))["warmup_nll"][0]
  same = {k: v for k, v in ran.items() if abs(v["warmup_nll"][0] - base) <= rtol * abs(base)}
  return min(same, key=lambda k: same[k]["train_ms_per_step"])


def probe(config: str, variants: list[str], common: list[str], precision: str, records: Path,
          deadline: float) -> tuple[int, str] | None:
  """Time `config`'s train step under each variant (one `experiments.bench` process each: XLA_FLAGS is
  read once per process), write probe.json and return the chosen (scan_unroll, XLA_FLAGS)."""
  results = {}
  overrides = [o for o in common if o.split("=", 1)[0] in DRY_RUN_KEYS]  # shapes only, not run settings
  for name in variants:
    if time.time() > deadline:
      results[name] = {"skipped": "deadline"}
      continue
    unroll, xla = parse_variant(name)
    cmd = [sys.executable, "-m", "experiments.bench", f"--config=configs/{config}.py",
           f"--config.matmul_precision={precision}", f"--config.scan_unroll={unroll}", "--peak=false",
           f"--steps={_PROBE_STEPS.value}", "--warmup=10", "--repeats=3", "--eval_windows=0"]
    cmd += [f"--config.{o}" for o in overrides]
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
    _write_atomic(records / "probe.json", json.dumps({"config": config, "variants": results}, indent=1))
  chosen = choose_variant(results)
  _write_atomic(records / "probe.json", json.dumps({"config": config, "variants": results, "chosen": chosen},
                                                   indent=1))
  return parse_variant(chosen) if chosen else None


def environment() -> dict:
  """The device and software a run's numbers belong to."""
  env = {"python": sys.version.split()[0], "argv": sys.argv[1:], "started_utc": time.strftime("%FT%TZ", time.gmtime())}
  probe = ("import json, jax, jaxlib; d = jax.devices()[0]\n"
           "out = {'jax': jax.__version__, 'jaxlib': jaxlib.__version__, 'backend': jax.default_backend(),\n"
           "       'device_kind': d.device_kind, 'device_count': jax.device_count()}\n"
           "try:\n"
           "  from jax._src.lib import cuda_versions as cv\n"
           "  out.update(cuda_runtime=cv.cuda_runtime_get_version(), cudnn=cv.cudnn_get_version(),\n"
           "             cuda_driver=cv.cuda_driver_get_version())\n"
           "except Exception as e:\n"
           "  out['cuda_versions'] = f'unavailable: {type(e).__name__}'\n"
           "for m in ('flax', 'optax', 'orbax.checkpoint', 'numpy'):\n"
           "  try:\n"
           "    out[m] = __import__(m, fromlist=['x']).__version__\n"
           "  except Exception as e:\n"
           "    out[m] = f'unavailable: {type(e).__name__}'\n"
           "print(json.dumps(out))")
  try:
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    env.update(json.loads(res.stdout.strip().splitlines()[-1]) if res.returncode == 0 else
               {"jax_probe_error": res.stderr.strip().splitlines()[-1:]})
  except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
    env["jax_probe_error"] = repr(e)
  try:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                          "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    env["nvidia_smi"] = smi.stdout.strip()
  except (OSError, subprocess.SubprocessError):
    env["nvidia_smi"] = None
  env["xla_flags"] = os.environ.get("XLA_FLAGS", "")
  return env


class Driver:
  """The loop: start, watch, judge, stop and record the jobs (see the module docstring)."""

  def __init__(self, jobs: list[Job], runs: Path, records: Path, budget_s: float, common: list[str],
               xla_flags: str = "", t0: float | None = None):
    self.jobs, self.runs, self.records, self.common, self.xla_flags = jobs, runs, records, common, xla_flags
    self.t0 = time.time() if t0 is None else t0
    self.deadline = self.t0 + budget_s
    self.events: list[dict] = []
    runs.mkdir(parents=True, exist_ok=True)
    records.mkdir(parents=True, exist_ok=True)

  # -- one job ---------------------------------------------------------------------------------------------
  def workdir(self, job: Job) -> Path:
    return self.runs / job.label

  def precision(self, job: Job) -> str:
    return _PRECISIONS.value[job.rung]

  def start(self, job: Job) -> None:
    wd = self.workdir(job)
    if (wd / "results.json").exists():  # finished by an earlier driver: just record it
      job.state = "finished"
      self.collect(job)
      return
    cmd = [sys.executable, "-m", "experiments.ptb", f"--config=configs/{job.config}.py", f"--workdir={wd}",
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

  def stop(self, job: Job, state: str, why: str, sig: int = signal.SIGTERM) -> None:
    """SIGTERM (the trainer saves `last` and exits; SIGKILL for a run that is thrown away), then record what
    the job has."""
    if job.proc is not None and job.proc.poll() is None:
      job.proc.send_signal(sig)
      try:
        job.proc.wait(timeout=30)
      except subprocess.TimeoutExpired:
        job.proc.kill()
        job.proc.wait()
    job.state, job.ended = state, time.time()
    job.events.append({"t": round(job.ended - self.t0, 1), "event": state, "why": why})
    self.collect(job)

  def restart_lower(self, job: Job, why: str) -> None:
    """Stop the job, keep its probe, and start it again from scratch one precision rung down."""
    self.stop(job, "stopped", why, signal.SIGKILL)  # (its checkpoint would never be resumed)
    wd = self.workdir(job)
    out = self.records / job.label
    _copy_atomic(wd / "metrics.jsonl", out / f"probe_{self.precision(job)}.jsonl")
    shutil.move(str(wd), str(wd.with_name(f"{job.label}.{self.precision(job)}.abandoned")))
    for name in ("metrics.jsonl", "curve.jsonl", "log.txt"):  # the record describes the new run only
      (out / name).unlink(missing_ok=True)
    job.rung += 1
    self.start(job)

  def collect(self, job: Job) -> None:
    """Copy the job's small files into the records (atomically)."""
    wd, out = self.workdir(job), self.records / job.label
    out.mkdir(parents=True, exist_ok=True)
    for name in ("results.json", "metrics.jsonl", "log.txt"):
      _copy_atomic(wd / name, out / name)
    epochs = _records_of(wd / "metrics.jsonl", "epoch")
    if epochs:
      _write_atomic(out / "curve.jsonl", "".join(json.dumps(r) + "\n" for r in epochs))

  def progress(self, job: Job) -> tuple[int, float] | None:
    """(step, steps/s) of the job's latest progress record, or None before its second one."""
    train = _records_of(self.workdir(job) / "metrics.jsonl", "train")
    if len(train) < 2:
      return None
    return train[-1]["step"], train[-1]["steps_per_s"]

  # -- the loop --------------------------------------------------------------------------------------------
  def write_status(self, done: bool = False) -> None:
    now = time.time()
    status = {"elapsed_s": round(now - self.t0, 1), "deadline_s": round(self.deadline - self.t0, 1),
              "done": done, "events": self.events, "jobs": []}
    for job in self.jobs:
      entry = {"label": job.label, "config": job.config, "overrides": job.overrides, "state": job.state,
               "matmul_precision": self.precision(job), "last_check": job.last_check, "events": job.events}
      if job.started:
        entry["wall_s"] = round((job.ended or now) - job.started, 1)
      if job.proc is not None and job.proc.poll() is not None:
        entry["returncode"] = job.proc.returncode
      status["jobs"].append(entry)
    _write_atomic(self.records / "status.json", json.dumps(status, indent=1))

  def judge(self, steps_of: dict[str, int]) -> None:
    running = [j for j in self.jobs if j.state == "running"]
    ends = []
    now = time.time()
    for job in running:
      p = self.progress(job)
      end = None
      if p is not None and p[0] >= _CHECK_STEPS.value and p[0] >= job.checked_at_step + _CHECK_STEPS.value:
        step, rate = p
        end = projected_end(now, step, rate, steps_of[job.label], _EVAL_SHARE.value, _TEST_S.value)
        first = job.checked_at_step == 0
        job.checked_at_step = step
        job.last_check = {"t": round(now - self.t0, 1), "event": "check", "step": step,
                          "steps_per_s": round(rate, 2), "ms_per_step": round(1000 / max(rate, 1e-9), 3),
                          "projected_end_s": round(end - self.t0, 1), "deadline_s": round(self.deadline - self.t0, 1)}
        if first or (end > self.deadline and job.events[-1].get("event") != "check"):
          job.events.append(job.last_check)  # the first measurement of a start, and the first late one
      ends.append((job.label, job.rung, len(_PRECISIONS.value) - 1, end))
    action, label = decide(ends, self.deadline)
    if action == "keep":
      return
    job = next(j for j in self.jobs if j.label == label)
    if action == "restart":
      self.restart_lower(job, f"projected past the deadline at {self.precision(job)}")
    else:
      self.stop(job, "shed", f"gives the device to {ends[0][0]}, projected past the deadline")

  def read_deadline(self) -> None:
    """A caller may move the deadline while the driver runs: `<records>/deadline_at` holds a UNIX time (e.g.
    a later call that knows how much of the window is left)."""
    path = self.records / "deadline_at"
    try:
      at = float(path.read_text().strip())
    except (OSError, ValueError):
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
          ok = job.proc.returncode == 0 and (self.workdir(job) / "results.json").exists()
          job.state = "finished" if ok else "failed"
          job.events.append({"t": round(job.ended - self.t0, 1), "event": job.state,
                             "returncode": job.proc.returncode})
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


def steps_of_job(job: Job, common: list[str]) -> int:
  """The job's total train steps (epochs × steps per epoch), from its config and the corpus, in this
  process (cheap: no device work)."""
  from wt_jax.data import batching, lm_corpora  # (after flag parsing: the corpus readers are not needed before)
  config = importlib.import_module(f"configs.{job.config}").get_config()
  for o in common + job.overrides:
    key, value = o.split("=", 1)
    node = config
    *path, leaf = key.split(".")
    for p in path:
      node = node[p]
    old = node[leaf]
    node[leaf] = type(old)(value) if not isinstance(old, bool) else value.lower() in ("1", "true", "yes")
  corpus = lm_corpora.load_corpus(config)
  train = corpus.train[:config.train_max_tokens] if config.train_max_tokens else corpus.train
  per_epoch = len(batching.lm_windows(train, config.batch_size, config.bptt))
  return per_epoch * config.num_epochs if not config.max_steps else min(config.max_steps,
                                                                         per_epoch * config.num_epochs)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  unknown = [p for p in _PRECISIONS.value if p not in ("default", "float32", "tensorfloat32")]
  if unknown:
    raise app.UsageError(f"Unknown precision {unknown[0]!r} in --precisions.")
  common = list(_SET.value) + (list(DRY_RUN_SET) if _DRY_RUN.value else [])
  jobs = [parse_job(s) for s in _JOBS.value]
  if len({j.label for j in jobs}) != len(jobs):
    raise app.UsageError("Two jobs have the same label; give them different overrides.")
  records = Path(_RECORDS.value)
  records.mkdir(parents=True, exist_ok=True)
  _write_atomic(records / "env.json", json.dumps(environment(), indent=1))
  steps_of = {j.label: steps_of_job(j, common) for j in jobs}
  t0 = time.time()
  xla_flags = _XLA_FLAGS.value
  if _PROBE.value:
    parse_job(_PROBE.value)  # (a clear error for an unknown config)
    for v in _PROBE_VARIANTS.value:
      parse_variant(v)
    chosen = probe(_PROBE.value, _PROBE_VARIANTS.value, common, _PRECISIONS.value[0], records,
                   t0 + _BUDGET.value - _MIN_START.value)
    if chosen is not None:
      unroll, xla_flags = chosen
      common = common + [f"scan_unroll={unroll}"]
  driver = Driver(jobs, Path(_RUNS.value), records, _BUDGET.value, common, xla_flags, t0)
  signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops the jobs as SIGINT does
  try:
    driver.run(steps_of)
  except KeyboardInterrupt:  # the driver itself was stopped: stop the jobs and keep their records
    for job in jobs:
      if job.state == "running":
        driver.stop(job, "stopped", "driver interrupted")
    driver.write_status(done=True)
    raise
  env = json.loads((records / "env.json").read_text())
  env["driver_wall_s"] = round(time.time() - driver.t0, 1)
  _write_atomic(records / "env.json", json.dumps(env, indent=1))
  print(json.dumps({j.label: j.state for j in jobs}))


if __name__ == "__main__":
  app.run(main)
