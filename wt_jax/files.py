"""A run's files, local or in a bucket (`etils.epath`): written whole, read back, set aside when damaged.

    write_whole(path, text)      a file written whole or not at all (local: a temporary file renamed over it)
    write_json(path, value)      JSON with null for every NaN/inf (`finite`), written whole
    read_jsonl(path)             (records, lines that are not records) of a JSON-lines file
    set_aside(path, suffix)      <name>.<suffix>[.<n>]: a damaged file kept, out of the way
    mend_cut_line(path)          a JSON-lines file whose last line was cut mid-write ends at its last whole line
    check_writable(folder, ...)  a run's outputs this process could not write again, refused before any work
    first_unreadable(folder)     the first file or folder under it this process may not read

Every writer of the project (the trainer's records, metrics, the GPU queue, the reports, the data cache) goes
through these, so a full disk or a kill while a file is written leaves the previous file, never a part of it.
"""
from __future__ import annotations

import errno
import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from etils import epath

log = logging.getLogger(__name__)


def is_local(path) -> bool:
  """Whether `path` is on this machine's filesystem (not gs://, s3://, ...)."""
  return "://" not in str(path)


def finite(value):
  """`value` with every NaN/±inf float replaced by None (JSON has no such numbers)."""
  if isinstance(value, float):
    return value if math.isfinite(value) else None
  if isinstance(value, dict):
    return {k: finite(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [finite(v) for v in value]
  return value


def write_whole(path, text: str | bytes) -> None:
  """Write `text` (or bytes) to `path`. On a local disk the file is written whole or not at all (a temporary file beside
  it, renamed over it), so a full disk or a kill while it is written leaves the previous file; a failure names
  `path` (a failed write() names no file). A bucket's object is written whole by the store itself."""
  write = "write_bytes" if isinstance(text, bytes) else "write_text"
  if not is_local(path):
    getattr(epath.Path(path), write)(text)
    return
  path = Path(os.fspath(path))
  tmp = path.with_name(path.name + ".tmp")
  try:
    getattr(tmp, write)(text)
    os.replace(tmp, path)
  except OSError as e:
    tmp.unlink(missing_ok=True)
    raise (e if e.filename else OSError(e.errno, e.strerror, str(path))) from None
  except BaseException:
    tmp.unlink(missing_ok=True)
    raise


def write_json(path, value: Any) -> None:
  """JSON with None for every NaN/inf (`finite`): valid for every reader; written by `write_whole`."""
  write_whole(path, json.dumps(finite(value), indent=2, allow_nan=False))


def read_jsonl(path) -> tuple[list[dict], int]:
  """(the JSON objects of a JSON-lines file, in order; how many non-empty lines are not one: being written, cut
  or damaged). A missing file has none. Bytes that are not UTF-8 spoil only their line."""
  path = epath.Path(path)
  if not path.exists():
    return [], 0
  records, bad = [], 0
  for line in path.read_bytes().decode("utf-8", errors="replace").splitlines():
    if not line.strip():
      continue
    try:
      record = json.loads(line)
    except ValueError:
      record = None
    if isinstance(record, dict):
      records.append(record)
    else:
      bad += 1
  return records, bad


def set_aside(path, suffix: str = "damaged"):
  """Move a file that cannot be used to <name>.<suffix> (<name>.<suffix>.<n>, the first free n, where that is
  taken): kept, never deleted, and out of the way of the file written in its place. Returns the new path."""
  aside, n = path.with_name(f"{path.name}.{suffix}"), 1
  while aside.exists():
    aside, n = path.with_name(f"{path.name}.{suffix}.{n}"), n + 1
  path.rename(aside)
  return aside


def mend_cut_line(path) -> None:
  """A local JSON-lines file whose last line has no newline was cut mid-write (a process killed while it
  appended, a full disk). Appending to it would glue the next record onto that fragment; instead the fragment
  is appended to <name>.cut (never lost) and the file ends at its last whole line."""
  path = Path(os.fspath(path))
  data = path.read_bytes() if path.exists() else b""
  if not data or data.endswith(b"\n"):
    return
  whole = data.rfind(b"\n") + 1
  cut = path.with_name(path.name + ".cut")
  with open(cut, "ab") as f:
    f.write(data[whole:] + b"\n")
  with open(path, "r+b") as f:
    f.truncate(whole)
  log.warning("%s ended in a line cut mid-write (%d bytes); moved it to %s.", path, len(data) - whole, cut.name)


def check_writable(folder, file_names, folder_names) -> None:
  """Refuse, before any work, what a run in the local `folder` could not write again: IsADirectoryError for a
  folder where one of `file_names` goes, NotADirectoryError for a file where one of `folder_names` goes ('': the
  folder itself), PermissionError naming the first this process may not write. Names that do not exist yet, and
  buckets (whose access is not a file mode), are not checked."""
  if not is_local(folder):
    return
  at = {name: os.path.join(os.fspath(folder), name) if name else os.fspath(folder)
        for name in (*file_names, *folder_names)}
  for name in file_names:
    if os.path.isdir(at[name]):
      raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), at[name])
  for name in folder_names:
    if os.path.exists(at[name]) and not os.path.isdir(at[name]):
      raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), at[name])
  for name, need in [(f, os.W_OK) for f in file_names] + [(f, os.W_OK | os.X_OK) for f in folder_names]:
    if os.path.exists(at[name]) and not os.access(at[name], need):
      raise PermissionError(errno.EACCES, f"{os.strerror(errno.EACCES)} (a run's output this user may not write)",
                            at[name])


def first_unreadable(folder) -> str | None:
  """The first path under the local `folder` (itself included) that this process may not read — a folder it cannot
  list or enter, a file it cannot open — or None (also for a bucket, whose access is not a file mode). (`os.access`
  checks the process's real user, the one its reads run as unless the interpreter runs setuid.)"""
  top = os.fspath(folder) if is_local(folder) else None
  if top is None or not os.access(top, os.R_OK | os.X_OK):
    return top
  for parent, dirs, names in os.walk(top):
    for name, need in [(d, os.R_OK | os.X_OK) for d in dirs] + [(f, os.R_OK) for f in names]:
      if not os.access(os.path.join(parent, name), need):
        return os.path.join(parent, name)
  return None
