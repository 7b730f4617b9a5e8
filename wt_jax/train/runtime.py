"""What a run needs from the machine it runs on, outside the training loop: signals that stop it cleanly,
a lock on its workdir, JSON that every reader parses, and a record of the code, libraries and host.
(`wt_jax.train.trainer` uses all of them.)"""
from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import flax
import jax
import optax
from absl import logging
from etils import epath

from wt_jax import parallel
from wt_jax.train import metrics as metrics_lib


@contextlib.contextmanager
def deferred_signals(signums=(signal.SIGINT, signal.SIGTERM)):
  """Turn the first SIGINT/SIGTERM into a flag the loop checks between steps (a second SIGINT interrupts at
  once), so a stopped run can save a consistent checkpoint. Outside the main thread this does nothing."""
  flag = threading.Event()
  if threading.current_thread() is not threading.main_thread():
    yield flag
    return
  previous = {s: signal.getsignal(s) for s in signums}

  def handler(signum, frame):
    flag.set()
    flag.signum = signum
    signal.signal(signum, previous[signum])

  for s in signums:
    signal.signal(s, handler)
  try:
    yield flag
  finally:
    for s in signums:
      signal.signal(s, previous[s])



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


def host() -> dict:
  """What the run ran on: CPU model and core count (for reports), platform of the JAX devices."""
  cpu = platform.processor() or platform.machine()
  try:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
      if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip()
        break
  except OSError:
    pass
  return {"cpu": cpu, "cpu_count": os.cpu_count(), "platform": jax.default_backend()}


def versions() -> dict:
  return {"jax": jax.__version__, "flax": flax.__version__, "optax": optax.__version__,
          "wt_jax_commit": code_revision()}



# Keys a resumed run may change without saying so: how long it runs and how it reports, not what it computes.
RESUMABLE_KEYS = frozenset({"num_epochs", "max_steps", "log_every", "checkpoint_every_steps",
                            "checkpoint_every_epochs", "profile_steps", "plot", "data_dir", "download",
                            "num_devices", "eval_mc_samples", "allow_resume_changes"})


class ConfigChangedError(ValueError):
  """A run is resumed with a config that differs from the one its folder was started with."""


def _flat(d: dict, prefix: str = "") -> dict:
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(_flat(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = json.loads(json.dumps(metrics_lib.finite(v)))  # tuples → lists, NaN → None
  return out


def config_changes(before: dict, after: dict) -> dict[str, list]:
  """{key: [value before, value after]} for every key of two (nested) configs that differs."""
  a, b = _flat(before), _flat(after)
  return {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def describe_run(config, run_versions: dict) -> dict:
  """What `<workdir>/run.json` holds: enough to know, from the folder alone, what ran and how."""
  import shlex
  import sys
  from wt_jax import __version__
  return {"what": "a wt_jax run: its config, command, code and machine (written at its first start)",
          "config": config.to_dict(), "command": " ".join(shlex.quote(a) for a in sys.argv),
          "cwd": os.getcwd(), "wt_jax_version": __version__, "versions": run_versions, "host": host(),
          "device_kind": jax.devices()[0].device_kind,
          "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "resumes": []}


def check_resume(run_file: epath.Path, config, step: int) -> None:
  """Compare the config a run is resumed with against its folder's `run.json`: a change outside
  RESUMABLE_KEYS stops it with one line naming the keys (unless `config.allow_resume_changes`); every resume
  and its changes are appended to run.json. A folder without run.json (older runs) is not checked."""
  if not run_file.exists():
    return
  record = json.loads(run_file.read_text())
  changes = config_changes(record.get("config", {}), config.to_dict())
  blocking = {k: v for k, v in changes.items() if k.split(".")[-1] not in RESUMABLE_KEYS}
  if blocking and not config.get("allow_resume_changes", False):
    shown = ", ".join(f"{k} {a!r} → {b!r}" for k, (a, b) in list(blocking.items())[:6])
    raise ConfigChangedError(
        f"{run_file.parent} was started with another config ({shown}{', …' if len(blocking) > 6 else ''}); "
        f"resume with the config in {run_file.name}, use a new --workdir, or allow it with "
        f"--config.allow_resume_changes=true.")
  if changes:
    logging.warning("Resuming %s at step %d with config changes: %s", run_file.parent, step,
                    ", ".join(f"{k} {a!r} → {b!r}" for k, (a, b) in changes.items()))
  record.setdefault("resumes", []).append(
      {"step": step, "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "changed": changes})
  write_json(run_file, record)


def is_local(path) -> bool:
  """Whether `path` is on this machine's filesystem (not gs://, s3://, ...)."""
  return "://" not in str(path)


def write_json(path: epath.Path, value: Any) -> None:
  """JSON with None for every NaN/inf (`metrics.finite`): valid for every reader."""
  path.write_text(json.dumps(metrics_lib.finite(value), indent=2, allow_nan=False))



class WorkdirBusyError(RuntimeError):
  """Another live run holds the workdir's lock."""


def _alive(pid) -> bool:
  try:
    os.kill(int(pid), 0)
  except ProcessLookupError:
    return False
  except (PermissionError, TypeError, ValueError):
    return pid is not None  # (a process we may not signal is alive)
  return True


@contextlib.contextmanager
def workdir_lock(workdir: epath.Path):
  """Hold `<workdir>/run.lock` (host, PID, start time) for the run: a second run on a busy workdir stops with
  `WorkdirBusyError`; the lock of a dead process on this host is taken over with a warning. Process 0 only.
  (On a local disk the lock is created atomically; on a bucket, check-then-write.)"""
  if not parallel.is_writer():
    yield
    return
  lock = workdir / "run.lock"
  me = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
  try:
    if is_local(lock):
      os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    elif lock.exists():
      raise FileExistsError(lock)
  except FileExistsError:
    try:
      other = json.loads(lock.read_text())
    except (OSError, ValueError):
      other = {}
    who = f"PID {other.get('pid')} on {other.get('host')} (since {other.get('started')})"
    if other.get("host") == me["host"] and _alive(other.get("pid")):
      raise WorkdirBusyError(f"{workdir} is in use by {who}; stop that run or use another --workdir.") from None
    if other.get("host") not in (None, me["host"]):
      raise WorkdirBusyError(f"{workdir} is locked by {who}; if that run is dead, delete {lock}.") from None
    logging.warning("Taking over the lock of %s in %s: that process is gone.", who, workdir)
  lock.write_text(json.dumps(me))
  try:
    yield
  finally:
    try:
      if json.loads(lock.read_text()).get("pid") == me["pid"]:
        lock.unlink()
    except (OSError, ValueError):
      pass
