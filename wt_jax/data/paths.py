"""Where data lives, and fetching it when it is not there.

Resolution, first match wins: an explicit directory (a config field / flag), else the environment variable
`WT_JAX_DATA`, else `~/.cache/wt_jax`. A corpus `name` lives in `<root>/<name>/`. When its files are
missing, loaders may download them from the canonical source into that folder; with no network that
fails with a `DataUnavailableError` telling the user to set `WT_JAX_DATA`.
"""
from __future__ import annotations

import gzip
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from pathlib import Path

from wt_jax.errors import InputError

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


def read_lines(path: str | os.PathLike) -> list[str]:
  """The lines of a UTF-8 text file, gzipped when its name ends in .gz, each with its newline. A file that is
  there but cannot be decoded (a gzip cut short or damaged, bytes that are not UTF-8: a download or copy that
  did not finish) is an `InputError` naming it."""
  path = Path(path)
  gz = path.suffix == ".gz"
  try:
    with (gzip.open(path, "rt", encoding="utf-8") if gz else open(path, encoding="utf-8")) as f:
      return list(f)
  except (EOFError, gzip.BadGzipFile, zlib.error, UnicodeDecodeError) as e:
    raise InputError(f"{path} cannot be read as UTF-8 text{' (gzip)' if gz else ''}: {e}. Is it damaged or "
                     "incomplete? Fetch it again.") from e


def download_file(url: str, dest: Path, timeout: float = 60.0) -> Path:
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


def ensure_file(name: str, file_name: str, url: str, data_dir: str | os.PathLike | None = None,
                download: bool = True, what: str | None = None) -> Path:
  """`<root>/<name>/<file_name>`, downloaded from `url` first when it is missing and `download` allows."""
  path = data_root(data_dir) / name / file_name
  if path.is_file():
    return path
  if not download:
    raise DataUnavailableError(
        f"{what or name} not found: expected {path}. Set the environment variable {ENV_VAR} (or "
        f"--config.data_dir) to the folder that holds {name}/.")
  return download_file(url, path)


def extract_zip(archive: Path, url: str, members: dict[str, Path]) -> None:
  """Copy each zip member whose name ends with a key of `members` to its value (atomically), then delete
  the archive. A missing member or a file that is not a zip raises `DataUnavailableError` naming `url`."""
  try:
    with zipfile.ZipFile(archive) as z:
      names = z.namelist()
      for suffix, dest in members.items():
        found = [m for m in names if m == suffix or m.endswith("/" + suffix)]
        if not found:
          raise DataUnavailableError(f"{url} has no member {suffix} (members: {names[:5]}...).")
        tmp = dest.with_name(dest.name + ".part")
        with z.open(found[0]) as src, open(tmp, "wb") as dst:
          shutil.copyfileobj(src, dst, 1 << 20)
        tmp.replace(dest)
  except zipfile.BadZipFile as e:
    raise DataUnavailableError(f"{url} is not a zip archive ({e}).") from e
  finally:
    archive.unlink(missing_ok=True)
