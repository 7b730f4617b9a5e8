"""A run's record, `<workdir>/run.json`: what ran (config, command, commit, versions, host), written at a first start
and checked at each resume (`record_run`, `check_resume`: a change of what the run computes is refused, naming the
keys); and the keys every results.json has (`results`: what ran, how long, on what).
"""
from __future__ import annotations

import json
import logging
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

import flax
import jax
import optax
from etils import epath

from wt_jax import __version__
import wt_jax.files as files
import wt_jax.parallel as parallel
from wt_jax.hparams import config_changes

log = logging.getLogger(__name__)

RUN_FILE = "run.json"
UTC = "%Y-%m-%dT%H:%M:%SZ"  # the times a record holds (time.strftime)

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
  git = dict(capture_output=True, text=True, timeout=10, check=True)
  try:
    commit = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], **git).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--untracked-files=no", "--", "wt_jax",
                            "experiments", "configs"], **git).stdout.strip()
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


def describe_run(config, run_versions: dict) -> dict:
  """What `<workdir>/run.json` holds: enough to know, from the folder alone, what ran and how."""
  return {"what": "a wt_jax run: its config, command, code and machine (written at its first start)",
          "config": config.to_dict(), "command": " ".join(shlex.quote(a) for a in sys.argv),
          "cwd": os.getcwd(), "wt_jax_version": __version__, "versions": run_versions, "host": host(),
          "device_kind": jax.devices()[0].device_kind, "started_utc": time.strftime(UTC, time.gmtime()), "resumes": []}


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
  now = time.strftime(UTC, time.gmtime())
  record = {"config": saved_config,
            "rebuilt": {"from": "the member's config at this resume" if member else "the checkpoint's config",
                        "step": step, "damaged": aside.name if aside else None, "utc": now},
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
  record.setdefault("resumes", []).append({"step": step, "utc": time.strftime(UTC, time.gmtime()), "changed": changes})
  files.write_json(run_file, record)


def record_run(workdir: epath.Path, config, run_versions: dict, members: list, resumed_from: int | None,
               saved_config: dict | None) -> None:
  """The run's record, `<workdir>/run.json`, and each member's (`members`: [(its folder, its config)], empty for
  a plain run): written at a first start (`resumed_from` None); at a resume from that step, checked against the
  config (`check_resume`; `saved_config`: the checkpoint's) and the resume appended to it. A run asked to be
  deterministic (`config.deterministic`) whose process's XLA_FLAGS do not ask XLA for it stops here, before its first
  step, instead of running non-deterministically (the entry points set the flag: `experiments.start`)."""
  if config.get("deterministic", False) and not parallel.determinism_in(os.environ.get("XLA_FLAGS", "")):
    raise RuntimeError(f"config.deterministic is set but XLA_FLAGS does not hold {parallel.DETERMINISTIC_FLAG}=true; "
                       "set it before the first JAX computation (experiments.start does).")
  member = lambda k: {"index": k, "of": len(members), "run": str(workdir)}  # a member's place in its run
  for folder, _ in members:
    folder.mkdir(parents=True, exist_ok=True)
  if resumed_from is None:
    files.write_json(workdir / RUN_FILE, describe_run(config, run_versions))
    for k, (folder, member_config) in enumerate(members):
      files.write_json(folder / RUN_FILE, {**describe_run(member_config, run_versions), "member": member(k)})
    return
  check_resume(workdir / RUN_FILE, config, resumed_from, saved_config)
  for k, (folder, member_config) in enumerate(members):  # each member's record follows the run's
    check_resume(folder / RUN_FILE, member_config, resumed_from, member_config.to_dict(), member(k))


def results(config, task, meta: dict, num_params: int) -> dict:
  """The keys every results.json has, the task's own follow them: `config` and `task` (steps_per_epoch,
  selection, num_devices) of the run, `meta` its record (the trainer's: step, pos, train_s, wall_s,
  resumed_from, versions, history, best_epoch)."""
  return {
      "config": config.name, "num_params": num_params, "steps": meta["step"],
      "steps_per_epoch": task.steps_per_epoch,
      "epochs": len(meta["history"]) + meta["pos"] / task.steps_per_epoch,  # finished + the fraction begun
      "history": meta["history"], "best_metric": task.selection[0] if task.selection else None,
      "best_epoch": meta["best_epoch"], "train_s": meta["train_s"], "wall_s": meta["wall_s"],
      "resumed_from_step": meta["resumed_from"], "seed": config.seed, "versions": meta["versions"], "host": host(),
      "devices": [str(d) for d in jax.devices()],
      "device_kind": jax.devices()[0].device_kind,  # e.g. "NVIDIA H100 80GB HBM3", "TPU v5 lite", "cpu"
      "num_devices": task.num_devices, "num_processes": jax.process_count()}
