"""What the GPU queue's records say of the code and the machine they come from.

A copy of the checkout on another machine may carry a `.git` that is not its own, so the commit is stamped
before the copy is made (`python -m experiments.gpu.run_queue --stamp=DIR`: `DIR/commit`, HEAD with "+dirty"
if tracked code differs from it, and `DIR/source`, a digest of the code files). On the machine, `commit_of(DIR)`
compares the digest with the copy's files and adds "+dirty" if they differ; `experiments/gpu/setup.sh` exports
it as WT_JAX_COMMIT.
`environment()` names the device and the software (jax, jaxlib, CUDA, cuDNN, the driver) of a window's runs.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from absl import app

from experiments.gpu.jobs import REPO
import wt_jax.files as files


# The code a copy of the checkout runs: every file of these folders with these suffixes (and setup.py).
SOURCE_DIRS, SOURCE_SUFFIXES = ("wt_jax", "configs", "experiments"), (".py", ".sh")


def source_digest(root: Path) -> str:
  """A digest (sha256) of the code under `root`: each file's path and content, in path order. The same on
  this machine and on a copy of the tree, whatever each copy's `.git` says."""
  code = [p for d in SOURCE_DIRS for p in (root / d).rglob("*")
          if p.is_file() and p.suffix in SOURCE_SUFFIXES and "__pycache__" not in p.parts]
  code += [root / "setup.py"] if (root / "setup.py").exists() else []
  digest = hashlib.sha256()
  for path in sorted(code, key=lambda q: q.relative_to(root).as_posix()):
    digest.update(path.relative_to(root).as_posix().encode() + b"\0")
    digest.update(hashlib.sha256(path.read_bytes()).hexdigest().encode() + b"\n")
  return digest.hexdigest()


def stamp(folder: Path, root: Path = REPO) -> str:
  """Write `folder/commit` (this checkout's HEAD, "+dirty" if tracked code differs from it:
  `run_record.code_revision`) and `folder/source` (`source_digest`) before the tree is copied to another machine."""
  from wt_jax.train import run_record
  saved = os.environ.pop("WT_JAX_COMMIT", None)  # this checkout's own commit, not one handed down
  try:
    commit = run_record.code_revision()
  finally:
    if saved is not None:
      os.environ["WT_JAX_COMMIT"] = saved
  if not commit:
    raise app.UsageError(f"--stamp: {root} is not a git checkout (or git is missing): no commit to stamp.")
  folder.mkdir(parents=True, exist_ok=True)
  files.write_whole(folder / "commit", commit + "\n")
  files.write_whole(folder / "source", source_digest(root) + "\n")
  return commit


def commit_of(folder: Path, root: Path = REPO) -> str:
  """The commit a copy of the tree runs: `folder/commit`, with "+dirty" added when the copy's code differs
  from the stamped digest (edited after the stamp), "+unverified" when there is no digest to compare."""
  commit = (folder / "commit").read_text().strip()
  try:
    stamped = (folder / "source").read_text().strip()
  except OSError:
    return commit + "+unverified"
  if stamped != source_digest(root) and not commit.endswith("+dirty"):
    return commit + "+dirty"
  return commit


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
