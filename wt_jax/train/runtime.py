"""What a run needs from the machine it runs on, outside the training loop: signals that stop it cleanly,
a lock on its workdir, JSON that every reader parses, and a record of the code, libraries and host.
(`wt_jax.train.trainer` uses all of them.)"""
from __future__ import annotations

import contextlib
import errno
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
  """What the run ran on: CPU model and core count (for reports), platform of the JAX devices, and the
  XLA_FLAGS of the process (e.g. XLA:GPU's deterministic kernels, `apply_determinism`)."""
  cpu = platform.processor() or platform.machine()
  try:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
      if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip()
        break
  except OSError:
    pass
  return {"cpu": cpu, "cpu_count": os.cpu_count(), "platform": jax.default_backend(),
          "xla_flags": os.environ.get("XLA_FLAGS", "")}


# XLA:GPU's run-to-run determinism (jaxlib 0.10–0.12: "Guarantees run-to-run determinism on GPU"): scatter-adds
# (the embedding gradient among them) and reductions take fixed-order implementations instead of atomics, so
# two runs of the same program on the same card give the same bits. The CPU backend is deterministic already
# and accepts the flag.
DETERMINISTIC_FLAG = "--xla_gpu_deterministic_ops"


def xla_flags_with_determinism(flags: str, deterministic: bool) -> str:
  """`flags` (an XLA_FLAGS value) with XLA:GPU's deterministic kernels set on or off: any earlier setting of
  the flag is replaced, every other flag kept in order."""
  kept = [f for f in flags.split() if f.split("=", 1)[0] != DETERMINISTIC_FLAG]
  return " ".join(kept + [f"{DETERMINISTIC_FLAG}={'true' if deterministic else 'false'}"])


def determinism_in(flags: str) -> bool | None:
  """What an XLA_FLAGS value asks of the flag: True, False, or None when it does not name it (XLA: the last
  setting wins; a bare flag is on)."""
  value = None
  for f in flags.split():
    name, _, v = f.partition("=")
    if name == DETERMINISTIC_FLAG:
      value = v.lower() in ("", "true", "1")
  return value


def _backends_started() -> bool:
  try:
    from jax._src import xla_bridge
    return bool(xla_bridge.backends_are_initialized())
  except (ImportError, AttributeError):  # (a JAX without this function: assume started, the safe answer)
    return True


def apply_determinism(config) -> None:
  """With `config.deterministic`, ask XLA:GPU for deterministic kernels (XLA_FLAGS) before JAX starts its
  backends, which read XLA_FLAGS once; the flags end up in run.json and results.json (`host`). Raises with one
  line if the backends have started without it. Without `config.deterministic`, nothing changes."""
  if not config.get("deterministic", False):
    return
  flags = os.environ.get("XLA_FLAGS", "")
  if determinism_in(flags):
    return
  if _backends_started():
    raise RuntimeError("config.deterministic needs XLA_FLAGS=--xla_gpu_deterministic_ops=true before JAX starts "
                       "its backends; they have started: set it in the environment, or call "
                       "runtime.apply_determinism(config) before the first JAX computation.")
  os.environ["XLA_FLAGS"] = xla_flags_with_determinism(flags, True)


def check_determinism(config) -> None:
  """A run asked to be deterministic (`config.deterministic`) stops with one line when its process's
  XLA_FLAGS do not ask XLA for it (set too late, or turned off), instead of running non-deterministically."""
  if config.get("deterministic", False) and not determinism_in(os.environ.get("XLA_FLAGS", "")):
    raise RuntimeError("config.deterministic is set but XLA_FLAGS does not hold --xla_gpu_deterministic_ops=true; "
                       "call runtime.apply_determinism(config) before the first JAX computation "
                       "(experiments.ptb does).")


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
  check_determinism(config)
  return {"what": "a wt_jax run: its config, command, code and machine (written at its first start)",
          "config": config.to_dict(), "command": " ".join(shlex.quote(a) for a in sys.argv),
          "cwd": os.getcwd(), "wt_jax_version": __version__, "versions": run_versions, "host": host(),
          "device_kind": jax.devices()[0].device_kind,
          "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "resumes": []}


def _run_record(run_file: epath.Path, saved_config: dict | None, step: int) -> dict | None:
  """The run's record in `run_file`. One that cannot be read as a JSON object with a config (a write cut
  short, a damaged disk) is moved aside to <name>.damaged (<name>.damaged.<n>: never deleted), said in the log,
  and rebuilt, and written at once, from the config the checkpoint saved, `saved_config` (None when it saved
  none: then there is no record to check against)."""
  try:
    record = json.loads(run_file.read_text())
    if isinstance(record, dict) and isinstance(record.get("config"), dict):
      return record
    why = "not a run's record"
  except (ValueError, UnicodeDecodeError) as e:  # (JSONDecodeError is a ValueError)
    why = f"{type(e).__name__}: {e}"
  aside, n = run_file.parent / f"{run_file.name}.damaged", 1
  while aside.exists():
    aside, n = run_file.parent / f"{run_file.name}.damaged.{n}", n + 1
  run_file.rename(aside)
  logging.warning("%s cannot be read (%s); moved aside to %s and rebuilt from the checkpoint's config.",
                  run_file, why, aside.name)
  if not saved_config:
    return None
  record = {"config": saved_config, "rebuilt": {"from": "the checkpoint's config", "step": step,
                                                "damaged": aside.name,
                                                "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
            "resumes": []}
  write_json(run_file, record)  # (now: a resume refused below leaves the folder with a record)
  return record


def check_resume(run_file: epath.Path, config, step: int, saved_config: dict | None = None) -> None:
  """Compare the config a run is resumed with against its folder's `run.json`: a change outside
  RESUMABLE_KEYS stops it with one line naming the keys (unless `config.allow_resume_changes`); every resume
  and its changes are appended to run.json. A folder without run.json (older runs) is not checked; a damaged
  one is rebuilt from `saved_config`, the config the checkpoint saved (`_run_record`)."""
  check_determinism(config)
  if not run_file.exists():
    return
  record = _run_record(run_file, saved_config, step)
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
    logging.warning("Resuming %s at step %d with config changes: %s", run_file.parent, step,
                    ", ".join(f"{k} {a!r} → {b!r}" for k, (a, b) in changes.items()))
  record.setdefault("resumes", []).append(
      {"step": step, "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "changed": changes})
  write_json(run_file, record)


def is_local(path) -> bool:
  """Whether `path` is on this machine's filesystem (not gs://, s3://, ...)."""
  return "://" not in str(path)


def write_json(path: epath.Path, value: Any) -> None:
  """JSON with None for every NaN/inf (`metrics.finite`): valid for every reader; written by `write_whole`."""
  write_whole(path, json.dumps(metrics_lib.finite(value), indent=2, allow_nan=False))


def write_whole(path: epath.Path, text: str) -> None:
  """Write `text` to `path`. On a local disk the file is written whole or not at all (a temporary file beside
  it, renamed over it), so a full disk or a kill while it is written leaves the previous file, never a part of
  the new one; a failure names `path` (a failed write() names no file)."""
  if not is_local(path):
    epath.Path(path).write_text(text)
    return
  path = Path(os.fspath(path))
  tmp = path.with_name(path.name + ".tmp")
  try:
    tmp.write_text(text)
    os.replace(tmp, path)
  except OSError as e:
    tmp.unlink(missing_ok=True)
    if e.filename:
      raise
    raise OSError(e.errno, e.strerror, str(path)) from None  # (a failed write() names no file)
  except BaseException:
    tmp.unlink(missing_ok=True)
    raise



# What a run writes again when it resumes, in its folder (and each member's): the files are rewritten or
# appended to, the folders receive new files.
RUN_OUTPUTS = ("run.json", "metrics.jsonl", "results.json", "summary.json", "curves.png", "vocab.txt")
RUN_FOLDERS = ("", "checkpoints", "checkpoints/last", "checkpoints/best")


def check_writable(lane_dirs) -> None:
  """Raise PermissionError naming the first of the run's existing outputs (`RUN_OUTPUTS`, `RUN_FOLDERS`) in the
  local folders `lane_dirs` that this process may not write, before training starts, so that a folder left by
  another user stops the run at once and not at its first progress line, checkpoint or final results. Folders
  that do not exist yet and buckets are not checked (a bucket's access is not a file mode)."""
  for d in lane_dirs:
    if not is_local(d):
      continue
    for name, need in [(f, os.W_OK) for f in RUN_OUTPUTS] + [(f, os.W_OK | os.X_OK) for f in RUN_FOLDERS]:
      path = os.path.join(os.fspath(d), name) if name else os.fspath(d)
      if os.path.exists(path) and not os.access(path, need):
        raise PermissionError(errno.EACCES, f"{os.strerror(errno.EACCES)} (a run's output this user may not "
                              f"write)", path)


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
  try:
    return json.loads(Path(path).read_text())
  except (OSError, ValueError):
    return {}


def _who(other: dict) -> str:
  return f"PID {other.get('pid')} on {other.get('host')} (since {other.get('started')})"


@contextlib.contextmanager
def _local_lock(lock: Path, me: dict, wait_s: float):
  """The kernel's advisory lock (flock) on `lock`, held for the body; see `workdir_lock`."""
  import fcntl
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
      if same_host or not other:
        raise WorkdirBusyError(f"{lock.parent} is in use by {_who(other)}; stop that run or use another "
                               f"--workdir.") from None
      raise WorkdirBusyError(f"{lock.parent} is locked by {_who(other)}; stop that run or use another "
                             f"--workdir.") from None
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
      logging.warning("Taking over the lock of %s in %s: that process is gone (it holds no lock on the file).",
                      _who(other), lock.parent)
    try:
      os.ftruncate(fd, 0)
      os.write(fd, json.dumps(me).encode())
    except OSError as e:  # (a full disk: os.write names no file)
      raise OSError(e.errno, e.strerror, str(lock)) from None
    yield
  finally:
    try:
      if _read_lock(lock).get("pid") == me["pid"]:
        lock.unlink()
    except OSError:
      pass
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
  if is_local(lock):
    with _local_lock(Path(os.fspath(lock)), me, wait_s):
      yield
    return
  if lock.exists():
    other = _read_lock_bucket(lock)
    if other.get("host") == me["host"] and _alive(other.get("pid")):
      raise WorkdirBusyError(f"{workdir} is in use by {_who(other)}; stop that run or use another --workdir.")
    if other.get("host") not in (None, me["host"]):
      raise WorkdirBusyError(f"{workdir} is locked by {_who(other)}; if that run is dead, delete {lock}.")
    logging.warning("Taking over the lock of %s in %s: that process is gone.", _who(other), workdir)
  lock.write_text(json.dumps(me))
  try:
    yield
  finally:
    try:
      if _read_lock_bucket(lock).get("pid") == me["pid"]:
        lock.unlink()
    except (OSError, ValueError):
      pass


def _read_lock_bucket(lock: epath.Path) -> dict:
  try:
    return json.loads(lock.read_text())
  except (OSError, ValueError):
    return {}
