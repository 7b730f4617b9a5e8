"""Runnable entry points: `python -m experiments.<name> --config=configs/<file>.py`."""
import errno
import sys
import traceback
from pathlib import Path

from absl import app

from wt_jax.errors import InputError

# An OSError that says the machine refused, not that the code is wrong: a file or folder this user may not read
# or write, a read-only file system, a full disk or quota. Its traceback tells the user nothing more than its
# message and the path.
_REFUSALS = {errno.EACCES: "check the owner and mode of it and of the folders above it",
             errno.EPERM: "check the owner and mode of it and of the folders above it",
             errno.EROFS: "the file system is mounted read-only", errno.ENOSPC: "free some space or use another folder",
             errno.EDQUOT: "free some space or use another folder"}


def run_main(main) -> None:
  """`absl.app.run(main)`, with what `main` or the flags refuse ended as one line (`one_line`,
  `parse_flags`) instead of a traceback or the module's whole usage text (which `--help` prints)."""
  app.run(one_line(main), flags_parser=parse_flags)


def one_line(main):
  """`main`, except that a `UsageError` it raises (a bad value found once the flags are read: an unknown
  dataset, a malformed job) ends the process with its message as one line on stderr and exit status 1; so
  does a value or file the library refuses (`wt_jax.errors.InputError`), a `--config` file that would not load
  (its reason), and an OSError of `_REFUSALS` (a permission, a read-only or full disk), with the path and
  what to check."""
  def main_one_line(argv):
    try:
      return main(argv)
    except (app.UsageError, InputError) as e:
      sys.exit(str(e))
    except OSError as e:
      if e.errno is None and str(e).startswith("Configuration is not available"):  # a --config file that
        sys.exit(f"--config: {str(e).strip().splitlines()[-1].strip()}")  # would not load (its last line: why)
      if e.errno not in _REFUSALS:
        raise
      where = " → ".join(repr(str(f)) for f in (e.filename, e.filename2) if f is not None) or "(no path given)"
      sys.exit(f"{e.strerror}: {where}; {_REFUSALS[e.errno]}.")
  return main_one_line


def parse_flags(argv):
  """absl's parser, except that an override of a key the config lacks (`--config.hiden_size=8`: raised by
  ml_collections as an AttributeError, not a flags error) is one line, its "did you mean" kept. Only an error
  raised where ml_collections resolves an override's path (`config_flags/config_path.py`) is taken for one:
  the same error from inside a config file's `get_config` (also run while the flags are parsed) is a bug in
  that file and keeps its traceback."""
  try:
    return app.parse_flags_with_usage(argv)
  except (AttributeError, KeyError) as e:
    where = [Path(frame.filename).parts[-2:] for frame in traceback.extract_tb(e.__traceback__)]
    if ("config_flags", "config_path.py") not in where:
      raise
    why = e
    while isinstance(why, BaseException) and why.args:  # (the AttributeError wraps the KeyError that says it)
      why = why.args[0]
    sys.exit(f"--config: no such key {str(why).strip()}".replace("\n", "; "))
