"""Where data lives, and fetching it when it is not there.

Resolution, first match wins: an explicit directory (a config field / flag), else the environment variable
`WT_JAX_DATA`, else `~/.cache/wt_jax`. A corpus `name` lives in `<root>/<name>/`. When its files are
missing, loaders may download them from the canonical source into that folder; with no network that
fails with a `DataUnavailableError` telling the user to set `WT_JAX_DATA`.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

ENV_VAR = "WT_JAX_DATA"
DEFAULT_ROOT = Path("~/.cache/wt_jax")


class DataUnavailableError(RuntimeError):
  """The data is neither on disk nor downloadable."""


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
  """The data root: `data_dir` if given, else $WT_JAX_DATA, else ~/.cache/wt_jax."""
  if data_dir:
    return Path(data_dir).expanduser()
  if os.environ.get(ENV_VAR):
    return Path(os.environ[ENV_VAR]).expanduser()
  return DEFAULT_ROOT.expanduser()


def find_file(folder: Path, candidates: list[str]) -> Path | None:
  """The first of `candidates` (file names) present in `folder`, or None."""
  for name in candidates:
    p = folder / name
    if p.is_file():
      return p
  return None


def download(url: str, dest: Path, timeout: float = 60.0) -> Path:
  """Download `url` to `dest` atomically (a partial file never appears at `dest`)."""
  dest.parent.mkdir(parents=True, exist_ok=True)
  try:
    with urllib.request.urlopen(url, timeout=timeout) as response:
      with tempfile.NamedTemporaryFile(dir=dest.parent, delete=False, suffix=".part") as tmp:
        shutil.copyfileobj(response, tmp)
  except (urllib.error.URLError, OSError, TimeoutError) as e:
    raise DataUnavailableError(
        f"Could not download {url} ({e}). If you have no network, put the data on disk and point "
        f"the environment variable {ENV_VAR} at its parent folder (or pass --config.data_dir).") from e
  os.replace(tmp.name, dest)
  return dest
