"""A run's folder (`wt_jax.train.trainer`): what the trainer meets before its first step and after its last.

    with RunFolder(workdir, task) as folder:   the lock taken (`workdir_lock`: run.lock, one live run per folder),
                                               the folder checked writable, the metrics writer opened
    folder.start(...)                          run.json written, or checked at a resume (`record_run`), and the
                                               task's own files (vocab.txt)
    folder.records, best, best_epoch           the model's epochs, its best validation number and epoch
    folder.finish(...)                         results.json (the keys every task has, then the task's own)

run.json records what ran (config, command, commit, versions, host); a resume is checked against it
(`check_resume`: a change of what the run computes is refused, naming the keys). The lock is the kernel's
advisory lock on a local disk, so a killed run leaves the folder free for the same command at once. The
non-finite policy is `check_or_stop`. A members run (`wt_jax.train.members_run`) keeps a folder per member.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import flax
import jax
import jax.numpy as jnp
import optax
from etils import epath

from wt_jax import __version__, files, parallel
from wt_jax.hparams import config_changes
from wt_jax.train import metrics as metrics_lib

log = logging.getLogger(__name__)


# The lock: run.lock

class WorkdirBusyError(RuntimeError):
  """Another live run holds the workdir's lock."""


def _proc_stat(pid: int) -> tuple[str, int] | None:
  """(state, flags) of a process from /proc/<pid>/stat, or None where there is no such file (no /proc, or no
  such process). The command name, field 2, is in parentheses and may hold spaces or parentheses itself."""
  try:
    rest = Path(f"/proc/{int(pid)}/stat").read_text().rpartition(")")[2].split()
    return rest[0], int(rest[6])
  except (OSError, ValueError, IndexError):
    return None


def _sigkill_pending(pid: int) -> bool:
  """Whether SIGKILL is queued for the process (/proc/<pid>/status, the pending-signal masks: bit 9 − 1)."""
  try:
    lines = Path(f"/proc/{int(pid)}/status").read_text().splitlines()
  except (OSError, ValueError):
    return False
  masks = [int(line.split(":", 1)[1], 16) for line in lines if line.startswith(("SigPnd:", "ShdPnd:"))]
  return any(m & (1 << (signal.SIGKILL - 1)) for m in masks)


PF_EXITING = 0x4  # the kernel's flag of a process inside exit(): its files are being closed


def _alive(pid) -> bool:
  """Whether a process of this host with that PID can still hold a lock: it exists and is not a zombie (a
  zombie has exited and closed its files; it waits only for its parent to read its status, which a container
  whose init does not reap never does)."""
  try:
    os.kill(int(pid), 0)
  except ProcessLookupError:
    return False
  except (PermissionError, TypeError, ValueError):
    return pid is not None  # (a process we may not signal is alive)
  stat = _proc_stat(pid)
  return stat is None or stat[0] not in ("Z", "X")


def _dying(pid) -> bool:
  """Whether the process is gone or on its way out (a zombie, inside exit(), or with SIGKILL queued): a lock
  it holds will be free within moments, when the kernel has closed its files."""
  if not _alive(pid):
    return True
  stat = _proc_stat(pid)
  return stat is not None and bool(stat[1] & PF_EXITING) or _sigkill_pending(pid)


LOCK_WAIT_S = 15.0  # seconds a run waits for an exiting holder's lock (a GPU process can take seconds to exit)


def _read_lock(path) -> dict:
  """Who holds the lock, as its file says ({} while the holder has not written it yet, or it is damaged)."""
  try:
    return json.loads(epath.Path(path).read_text())
  except (OSError, ValueError):
    return {}


def _who(other: dict) -> str:
  if not other:
    return "a process that has not written who it is (another run starting, or another program)"
  return f"PID {other.get('pid')} on {other.get('host')} (since {other.get('started')})"


def _remove_mine(lock, me: dict) -> None:
  """Remove the lock file if it still names this process (a file that is gone or unreadable is left as it is)."""
  try:
    if _read_lock(lock).get("pid") == me["pid"]:
      epath.Path(lock).unlink()
  except OSError:
    pass


@contextlib.contextmanager
def _local_lock(lock: Path, me: dict, wait_s: float):
  """The kernel's advisory lock (flock) on `lock`, held for the body; see `workdir_lock`."""
  import fcntl  # (POSIX only)
  t_end = time.monotonic() + wait_s
  while True:
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)  # (not inherited by child processes: PEP 446)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      os.close(fd)
      other = _read_lock(lock)
      same_host = other.get("host") == me["host"]
      # The holder is exiting (the kernel frees its lock once its files are closed), or has just taken the
      # lock and not yet written who it is: look again shortly.
      if (not other or same_host and _dying(other.get("pid"))) and time.monotonic() < t_end:
        time.sleep(0.1)
        continue
      raise WorkdirBusyError(f"{lock.parent} is {'in use' if same_host or not other else 'locked'} by "
                             f"{_who(other)}; stop that run or use another --workdir.") from None
    try:
      same_file = os.path.samestat(os.fstat(fd), os.stat(lock))
    except FileNotFoundError:
      same_file = False
    if not same_file:  # the holder removed the file as we locked it: lock the file now at that path
      os.close(fd)
      continue
    break
  try:
    other = _read_lock(lock)
    if other.get("pid") not in (None, me["pid"]):
      log.warning("Taking over the lock of %s in %s: that process is gone (it holds no lock on the file).",
                      _who(other), lock.parent)
    try:
      os.ftruncate(fd, 0)
      os.write(fd, json.dumps(me).encode())
    except OSError as e:  # (a full disk: os.write names no file)
      raise OSError(e.errno, e.strerror, str(lock)) from None
    yield
  finally:
    _remove_mine(lock, me)
    os.close(fd)  # (releases the lock; a killed process's is released the same way, by the kernel)


@contextlib.contextmanager
def workdir_lock(workdir: epath.Path, wait_s: float = LOCK_WAIT_S):
  """Hold `<workdir>/run.lock` for the run; the file says who holds it (JSON: host, PID, start time). A second
  run on a busy workdir stops with `WorkdirBusyError`. Process 0 only.

  On a local disk the lock is the kernel's advisory lock on that file (`fcntl.flock`): the kernel releases it
  when the holder's files close, so a run killed with SIGKILL leaves it free, and the same command resumes at
  once. A holder on this host that is exiting (a zombie, inside exit(), SIGKILL queued) is waited for up to
  `wait_s` seconds instead of refused. On a bucket (gs://, ...) there is no such lock: check-then-write, and the
  lock of a dead (or zombie) process of this host is taken over with a warning."""
  if not parallel.is_writer():
    yield
    return
  lock = workdir / "run.lock"
  me = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
  if files.is_local(lock):
    with _local_lock(Path(os.fspath(lock)), me, wait_s):
      yield
    return
  if lock.exists():
    other = _read_lock(lock)
    if other.get("host") == me["host"] and _alive(other.get("pid")):
      raise WorkdirBusyError(f"{workdir} is in use by {_who(other)}; stop that run or use another --workdir.")
    if other.get("host") not in (None, me["host"]):
      raise WorkdirBusyError(f"{workdir} is locked by {_who(other)}; if that run is dead, delete {lock}.")
    log.warning("Taking over the lock of %s in %s: that process is gone.", _who(other), workdir)
  lock.write_text(json.dumps(me))
  try:
    yield
  finally:
    _remove_mine(lock, me)


# The record: run.json

RUN_FILE = "run.json"

# Keys a resumed run may change without saying so: how long it runs and how it reports, not what it computes.
RESUMABLE_KEYS = frozenset({"num_epochs", "max_steps", "log_every", "checkpoint_every_steps",
                            "checkpoint_every_epochs", "profile_steps", "plot", "data_dir", "download",
                            "num_devices", "eval_mc_samples", "allow_resume_changes"})

class ConfigChangedError(ValueError):
  """A run is resumed with a config that differs from the one its folder was started with."""


def code_revision() -> str | None:
  """The git commit of the wt_jax checkout this runs from (suffix "+dirty" with uncommitted changes), or
  $WT_JAX_COMMIT when set: a copy of the tree whose `.git` is not its own (e.g. shipped to another machine)
  says which commit it is."""
  if os.environ.get("WT_JAX_COMMIT"):
    return os.environ["WT_JAX_COMMIT"]
  src = Path(__file__).resolve().parents[2]
  try:
    git = lambda *a: subprocess.run(["git", "-C", str(src), *a], capture_output=True, text=True,
                                    timeout=10, check=True).stdout.strip()
    commit = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "wt_jax", "experiments", "configs")
  except (OSError, subprocess.SubprocessError):
    return None  # not a git checkout (e.g. an installed wheel) or no git binary
  return commit + ("+dirty" if dirty else "")


def versions() -> dict:
  return {"jax": jax.__version__, "flax": flax.__version__, "optax": optax.__version__,
          "wt_jax_commit": code_revision()}


def host() -> dict:
  """What the run ran on: CPU model and core count, platform of the JAX devices, and the process's XLA_FLAGS."""
  cpu = platform.processor() or platform.machine()
  try:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), cpu)
  except OSError:
    pass
  return {"cpu": cpu, "cpu_count": os.cpu_count(), "platform": jax.default_backend(),
          "xla_flags": os.environ.get("XLA_FLAGS", "")}


def check_determinism(config) -> None:
  """A run asked to be deterministic (`config.deterministic`) stops with one line when its process's XLA_FLAGS
  do not ask XLA for it, instead of running non-deterministically (the entry points set it: `experiments.start`)."""
  if config.get("deterministic", False) and not parallel.determinism_in(os.environ.get("XLA_FLAGS", "")):
    raise RuntimeError(f"config.deterministic is set but XLA_FLAGS does not hold {parallel.DETERMINISTIC_FLAG}=true; set it "
                       "before the first JAX computation (experiments.start does).")


def describe_run(config, run_versions: dict) -> dict:
  """What `<workdir>/run.json` holds: enough to know, from the folder alone, what ran and how."""
  check_determinism(config)
  return {"what": "a wt_jax run: its config, command, code and machine (written at its first start)",
          "config": config.to_dict(), "command": " ".join(shlex.quote(a) for a in sys.argv),
          "cwd": os.getcwd(), "wt_jax_version": __version__, "versions": run_versions, "host": host(),
          "device_kind": jax.devices()[0].device_kind, "started_utc": _utc(), "resumes": []}


def _utc() -> str:
  return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _read_record(run_file: epath.Path, saved_config: dict | None, step: int, member: dict | None) -> dict | None:
  """The run's record in `run_file`. One that cannot be read as a JSON object with a config (a write cut short, a
  damaged disk) is moved aside (`files.set_aside`: <name>.damaged) and rebuilt at once from `saved_config` (None:
  nothing to rebuild it from, nor to check against). A member's record that is missing is rebuilt the same way."""
  aside, why = None, "missing"
  if run_file.exists():
    try:
      record = json.loads(run_file.read_text())
      if isinstance(record, dict) and isinstance(record.get("config"), dict):
        return record
      why = "not a run's record"
    except (ValueError, UnicodeDecodeError) as e:  # (JSONDecodeError is a ValueError)
      why = f"{type(e).__name__}: {e}"
    aside = files.set_aside(run_file)
  log.warning("%s cannot be read (%s)%s; rebuilt from the %s config.", run_file, why,
                  f"; moved aside to {aside.name}" if aside else "", "member's" if member else "checkpoint's")
  if not saved_config:
    return None
  record = {"config": saved_config,
            "rebuilt": {"from": "the member's config at this resume" if member else "the checkpoint's config",
                        "step": step, "damaged": aside.name if aside else None, "utc": _utc()},
            **({"member": member} if member else {}), "resumes": []}
  files.write_json(run_file, record)  # (now: a resume refused below leaves the folder with a record)
  return record


def check_resume(run_file: epath.Path, config, step: int, saved_config: dict | None = None,
                 member: dict | None = None) -> None:
  """Compare the config a run is resumed with against its folder's `run.json`: a change outside RESUMABLE_KEYS
  stops it with `ConfigChangedError` naming the keys (unless `config.allow_resume_changes`); every resume and its
  changes are appended to run.json. A folder without run.json (a run started by hand elsewhere) is not checked; a
  damaged one is rebuilt from `saved_config`, the config the checkpoint saved (`_read_record`). A member
  (`member`: {"index", "of", "run"}) is checked the same way against its own config and record."""
  check_determinism(config)
  if not run_file.exists() and member is None:
    return
  record = _read_record(run_file, saved_config, step, member)
  if record is None:
    return
  changes = config_changes(record.get("config", {}), config.to_dict())
  blocking = {k: v for k, v in changes.items() if k.split(".")[-1] not in RESUMABLE_KEYS}
  if blocking and not config.get("allow_resume_changes", False):
    shown = ", ".join(f"{k} {a!r} → {b!r}" for k, (a, b) in list(blocking.items())[:6])
    raise ConfigChangedError(
        f"{run_file.parent} was started with another config ({shown}{', …' if len(blocking) > 6 else ''}); "
        f"resume with the config in {run_file.name}, use a new --workdir, or allow it with "
        f"--config.allow_resume_changes=true.")
  if changes:
    log.warning("Resuming %s at step %d with config changes: %s", run_file.parent, step,
                    ", ".join(f"{k} {a!r} → {b!r}" for k, (a, b) in changes.items()))
  record.setdefault("resumes", []).append({"step": step, "utc": _utc(), "changed": changes})
  files.write_json(run_file, record)


def record_run(workdir: epath.Path, config, run_versions: dict, members: list, resumed_from: int | None,
               saved_config: dict | None) -> None:
  """The run's record, `<workdir>/run.json`, and each member's (`members`: [(its folder, its config)], empty for
  a plain run): written at a first start (`resumed_from` None); at a resume from that step, checked against the
  config (`check_resume`; `saved_config`: the checkpoint's) and the resume appended to it."""
  member = lambda k: {"index": k, "of": len(members), "run": str(workdir)}  # a member's place in its run
  if resumed_from is None:
    files.write_json(workdir / RUN_FILE, describe_run(config, run_versions))
    for k, (folder, member_config) in enumerate(members):
      files.write_json(folder / RUN_FILE, {**describe_run(member_config, run_versions), "member": member(k)})
    return
  check_resume(workdir / RUN_FILE, config, resumed_from, saved_config)
  for k, (folder, member_config) in enumerate(members):  # each member's record follows the run's
    check_resume(folder / RUN_FILE, member_config, resumed_from, member_config.to_dict(), member(k))


# The folder

# What a run writes again at a resume, in its folder: files rewritten or appended to, folders written in.
RUN_OUTPUTS = ("run.json", "metrics.jsonl", "results.json", "summary.json", "curves.png", "vocab.txt")
RUN_FOLDERS = ("", "checkpoints", "checkpoints/last", "checkpoints/best")
META_KEYS = ("history", "epoch_sums", "best", "best_epoch", "diverged")  # a model's record in a checkpoint's meta


class NonFiniteLossError(FloatingPointError):
  """The training loss (or a validation metric) became NaN or infinite; `why` says which, and when."""

  def __init__(self, message: str, why: str = ""):
    super().__init__(message)
    self.why = why or message


def check_or_stop(values: dict, why: str) -> None:
  """The non-finite policy: `NonFiniteLossError` if a float of `values` is NaN or infinite (`why` names it with
  {key} and {value})."""
  bad = next((key for key, v in values.items() if isinstance(v, float) and not math.isfinite(v)), None)
  if bad is not None:
    why = why.format(key=bad, value=values[bad])
    raise NonFiniteLossError(f"{why[0].upper()}{why[1:]}: the model diverged", why)


class Folder(contextlib.ExitStack):
  """A run's folder as a context: entering makes `path`, takes its lock (unless `lock` is False: a member's folder,
  under its run's lock), refuses before any work what a run could not write again there (process 0:
  `files.check_writable`), then `_open`s what the folder needs. A refusal releases what was taken (`with` calls no
  __exit__ for an __enter__ that raised)."""

  path: epath.Path
  lock: bool = True

  def __enter__(self):
    try:
      self.path.mkdir(parents=True, exist_ok=True)
      if self.lock:
        self.enter_context(workdir_lock(self.path))
      if parallel.is_writer():
        files.check_writable(self.path, RUN_OUTPUTS, RUN_FOLDERS)
      self._open()
    except BaseException:
      self.close()
      raise
    return self

  def _open(self) -> None:
    """What the folder opens once it is locked and checked (a writer, members' folders)."""


class RunFolder(Folder):
  """The folder of one model's run: its lock (`lock=False`: a member's folder, under its run's lock), metrics
  writer and record — `records` (one per epoch), `best` and `best_epoch` by `task.selection` (metric, 'min' |
  'max'; None: no best), `epoch_sums` (the epoch's train sums from before a resume, on the host) and `diverged`
  (None while it trains). `config`: the model's (the task's by default); `train_metrics(sums, step)`: its
  progress numbers (the task's by default)."""

  def __init__(self, path, task, config=None, train_metrics=None, lock: bool = True):
    super().__init__()
    self.path, self.task, self.lock = epath.Path(path), task, lock
    self.config, self.train_metrics = config or task.config, train_metrics or task.train_metrics
    self.records, self.epoch_sums, self.best, self.best_epoch, self.diverged = [], None, None, None, None

  def _open(self) -> None:
    self.writer = (metrics_lib.MetricsWriter(self.path / "metrics.jsonl", self.path) if parallel.is_writer()
                   else metrics_lib.NoWriter())
    self.callback(self.writer.close)  # however the run ends, TensorBoard's queued events reach the disk

  def start(self, run_config, run_versions: dict, resumed_from, saved_config) -> None:
    """run.json and the task's files (vocab.txt), written, or checked at a resume (`record.record_run`)."""
    if parallel.is_writer():
      record_run(self.path, run_config, run_versions, [], resumed_from, saved_config)
      self.task.write_run_files(self.path, resumed=resumed_from is not None)

  def meta(self, totals: dict) -> dict:
    """The record for a checkpoint's meta, with the epoch's train sums so far (`totals`)."""
    return dict(zip(META_KEYS, (self.records, totals, self.best, self.best_epoch, self.diverged)))

  def restore(self, meta: dict) -> None:
    self.records, self.epoch_sums, self.best, self.best_epoch, self.diverged = (meta.get(k) for k in META_KEYS)
    self.records = self.records or []

  def forget_best(self) -> None:
    self.best = self.best_epoch = None

  def new_epoch(self) -> None:
    self.epoch_sums = None

  def totals(self, sums) -> dict:
    """The epoch's train sums on the host: `epoch_sums` (from before a resume) plus this process's `sums`."""
    now, before = jax.device_get(sums) or {}, self.epoch_sums or {}
    return {key: before.get(key, 0.0) + float(now.get(key, 0.0)) for key in {**before, **now}}

  def numbers(self, totals: dict, step: int, epoch: int) -> dict:
    """The progress numbers of the epoch's train sums `totals`; NonFiniteLossError if the sums or the numbers are
    not finite (a perplexity may overflow where its NLL sum does not)."""
    check_or_stop(totals, f"the training {{key}} became non-finite before step {step} (epoch {epoch})")
    shown = self.train_metrics(totals, step)
    check_or_stop(shown, f"the training {{key}} is {{value}} at step {step} (epoch {epoch})")
    return shown

  def progress(self, state, sums, step: int, epoch: int):
    """(state, the epoch's train sums on the host, their progress numbers) for the device `sums`: `numbers`."""
    totals = self.totals(sums)
    return state, totals, self.numbers(totals, step, epoch)

  def line(self, shown: dict, values: dict | None = None) -> str:
    """A progress line's numbers: the progress numbers `shown`, and an epoch's validation `values`."""
    return "  ".join(f"{k} {v:.4g}" for k, v in {**shown, **(values or {})}.items() if isinstance(v, float))

  def write_train(self, shown: dict, **common) -> None:
    self.writer.write(kind="train", **common, **shown)

  def flush(self) -> None:
    self.writer.flush()

  def add_epoch(self, state, best_state, head: dict, shown: dict, values: dict, train_s: float):
    """`add_record`, then (state, best state, whether it changed): a copy of `state` when the epoch is the best."""
    if not self.add_record(head, shown, values, train_s):
      return state, best_state, False
    return state, jax.tree_util.tree_map(jnp.copy, state), True

  def add_record(self, head: dict, shown: dict, values: dict, train_s: float, check: bool = True) -> bool:
    """The epoch's record ({epoch, step} `head`, the progress numbers `shown`, the task's validation `values`)
    appended and written, after `check_or_stop` (if `check`) → whether it is the best so far by `task.selection`."""
    record = {**head, **shown, **values}
    if check:
      check_or_stop(record, f"{{key}} is {{value}} after epoch {record['epoch']}")
    record["train_s"] = train_s
    self.writer.write(kind="epoch", **record)
    self.records.append(record)
    return self.task.selection is not None and self._improves(record)

  def _improves(self, record: dict) -> bool:
    """Whether `record` is the best so far (a diverged model keeps the best it had), noting it if so."""
    metric, mode = self.task.selection
    value = record[metric]
    if self.diverged is not None or (self.best is not None and not (value < self.best if mode == "min" else
                                                                     value > self.best)):
      return False
    self.best, self.best_epoch = value, record["epoch"]
    return True

  def results(self, meta: dict, final: dict, num_params: int, wall_s: float, resumed_from, run_versions: dict):
    """A results.json: the keys every task's has (`meta`: the run's progress), then the task's own (`final`)."""
    task = self.task
    return {
        "config": self.config.name, "num_params": num_params, "steps": meta["step"],
        "steps_per_epoch": task.steps_per_epoch,
        "epochs": len(self.records) + meta["pos"] / task.steps_per_epoch,  # finished + the fraction begun
        "history": self.records, "best_metric": task.selection[0] if task.selection else None,
        "best_epoch": self.best_epoch, "train_s": meta["train_s"], "wall_s": wall_s,
        "resumed_from_step": resumed_from, "seed": self.config.seed, "versions": run_versions, "host": host(),
        "devices": [str(d) for d in jax.devices()],
        "device_kind": jax.devices()[0].device_kind,  # e.g. "NVIDIA H100 80GB HBM3", "TPU v5 lite", "cpu"
        "num_devices": task.num_devices, "num_processes": jax.process_count(), **final}

  def write_results(self, out: dict) -> None:
    """results.json (process 0), and the learning curves (curves.png) if the config's `plot`."""
    if parallel.is_writer():
      files.write_json(self.path / "results.json", out)
      if self.config.get("plot", False):
        metrics_lib.plot_curves(self.path / "metrics.jsonl", self.path / "curves.png", title=out["config"])

  def finish(self, state, best_state, meta: dict, totals: dict, run_info: dict) -> dict:
    """The task's final evaluation (`task.final`) → results.json's dict, written."""
    final = self.task.final(state, best_state, {**meta, **self.meta(totals)}, totals)
    num_params = sum(x.size for x in jax.tree_util.tree_leaves(state["params"]))
    out = self.results(meta, final, num_params, **run_info)
    self.write_results(out)
    return out
