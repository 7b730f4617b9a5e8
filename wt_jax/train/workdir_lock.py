"""The lock of a run's folder, `<workdir>/run.lock`: one live run per folder (`workdir_lock`), standard library only.

The lock is the kernel's advisory lock on a local disk, so a killed run leaves the folder free for the same command
at once; on a bucket, check-then-write.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import time
from pathlib import Path

from etils import epath

import wt_jax.files as files
import wt_jax.parallel as parallel

log = logging.getLogger(__name__)


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
