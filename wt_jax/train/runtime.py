"""What a run needs from the machine it runs on, outside the training loop: signals that stop it cleanly,
records written whole (JSON that every reader parses), a check of a resumed run's config and outputs, and a
record of the code, libraries and host. (`wt_jax.train.trainer` uses all of them; the workdir's lock is
`wt_jax.train.lock`.)"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import platform
import signal
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


def set_aside(path, suffix: str = "damaged"):
  """Move a record that cannot be used to <name>.<suffix> (<name>.<suffix>.<n>, the first free n, where that
  is taken): kept, never deleted, and out of the way of the record written in its place. Returns the new path."""
  aside, n = path.with_name(f"{path.name}.{suffix}"), 1
  while aside.exists():
    aside, n = path.with_name(f"{path.name}.{suffix}.{n}"), n + 1
  path.rename(aside)
  return aside


def _run_record(run_file: epath.Path, saved_config: dict | None, step: int, member: dict | None = None
                ) -> dict | None:
  """The run's record in `run_file`. One that cannot be read as a JSON object with a config (a write cut
  short, a damaged disk) is moved aside (`set_aside`: <name>.damaged, never deleted), said in the log, and
  rebuilt, and written at once, from `saved_config` (None: there is nothing to rebuild it from, nor to check
  against). A member's record (`member`: its place in the run) that is missing is rebuilt the same way."""
  aside = None
  if not run_file.exists():
    why = "missing"
  else:
    try:
      record = json.loads(run_file.read_text())
      if isinstance(record, dict) and isinstance(record.get("config"), dict):
        return record
      why = "not a run's record"
    except (ValueError, UnicodeDecodeError) as e:  # (JSONDecodeError is a ValueError)
      why = f"{type(e).__name__}: {e}"
    aside = set_aside(run_file)
  logging.warning("%s cannot be read (%s)%s; rebuilt from the %s config.", run_file, why,
                  f"; moved aside to {aside.name}" if aside else "", "member's" if member else "checkpoint's")
  if not saved_config:
    return None
  record = {"config": saved_config,
            "rebuilt": {"from": "the member's config at this resume" if member else "the checkpoint's config",
                        "step": step, "damaged": aside.name if aside else None,
                        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
            **({"member": member} if member else {}), "resumes": []}
  write_json(run_file, record)  # (now: a resume refused below leaves the folder with a record)
  return record


def check_resume(run_file: epath.Path, config, step: int, saved_config: dict | None = None,
                 member: dict | None = None) -> None:
  """Compare the config a run is resumed with against its folder's `run.json`: a change outside
  RESUMABLE_KEYS stops it with one line naming the keys (unless `config.allow_resume_changes`); every resume
  and its changes are appended to run.json. A folder without run.json (older runs) is not checked; a damaged
  one is rebuilt from `saved_config`, the config the checkpoint saved (`_run_record`).
  A member of a members run (`member`: {"index", "of", "run"}) is checked the same way against its own config,
  `config`, and its record, if missing or damaged, is rebuilt from `saved_config`, that config (the run's
  record has been checked against the checkpoint's config by then)."""
  check_determinism(config)
  if not run_file.exists() and member is None:
    return
  record = _run_record(run_file, saved_config, step, member)
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


RUN_FILE = "run.json"  # the run's config, command, code and machine (`describe_run`), and its resumes


def record_run(workdir: epath.Path, config, run_versions: dict, members: list, resumed_from: int | None,
               saved_config: dict | None) -> None:
  """The run's record, `<workdir>/run.json`, and each member's (`members`: [(its folder, its config)], empty
  for a plain run): written at a first start (`resumed_from` None); at a resume from that step, checked
  against the config (`check_resume`; `saved_config`: the checkpoint's) and the resume appended to it."""
  member = lambda k: {"index": k, "of": len(members), "run": str(workdir)}  # a member's place in its run
  if resumed_from is None:
    write_json(workdir / RUN_FILE, describe_run(config, run_versions))
    for k, (folder, member_config) in enumerate(members):
      write_json(folder / RUN_FILE, {**describe_run(member_config, run_versions), "member": member(k)})
    return
  check_resume(workdir / RUN_FILE, config, resumed_from, saved_config)
  for k, (folder, member_config) in enumerate(members):  # each member's record follows the run's
    check_resume(folder / RUN_FILE, member_config, resumed_from, member_config.to_dict(), member(k))


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
  """Before training starts, refuse the run's existing outputs (`RUN_OUTPUTS`, `RUN_FOLDERS`) in the local
  folders `lane_dirs` that it could not write: PermissionError naming the first this process may not write,
  IsADirectoryError for a folder in the place of a file, NotADirectoryError for a file in the place of a
  folder. A folder left by another user (or made by mistake) then stops the run at once, not at its first
  progress line, checkpoint or final results. Folders that do not exist yet and buckets are not checked (a
  bucket's access is not a file mode)."""
  for d in lane_dirs:
    if not is_local(d):
      continue
    for name in RUN_OUTPUTS:
      path = os.path.join(os.fspath(d), name)
      if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    for name in RUN_FOLDERS:
      path = os.path.join(os.fspath(d), name)
      if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
    for name, need in [(f, os.W_OK) for f in RUN_OUTPUTS] + [(f, os.W_OK | os.X_OK) for f in RUN_FOLDERS]:
      path = os.path.join(os.fspath(d), name) if name else os.fspath(d)
      if os.path.exists(path) and not os.access(path, need):
        raise PermissionError(errno.EACCES, f"{os.strerror(errno.EACCES)} (a run's output this user may not "
                              f"write)", path)
