"""Runnable entry points: `python -m experiments.<name> --config=configs/<file>.py`."""
import errno
import sys

from absl import app

# An OSError that says the machine refused, not that the code is wrong: a file or folder this user may not read
# or write, a read-only file system, a full disk or quota. Its traceback tells the user nothing more than its
# message and the path.
_REFUSALS = {errno.EACCES: "check the owner and mode of it and of the folders above it",
             errno.EPERM: "check the owner and mode of it and of the folders above it",
             errno.EROFS: "the file system is mounted read-only", errno.ENOSPC: "free some space or use another folder",
             errno.EDQUOT: "free some space or use another folder"}


def run_main(main) -> None:
  """`absl.app.run(main)`, except that a `UsageError` raised by `main` (a bad value found once the flags are
  read: an unknown dataset, a malformed job) ends the process with its message as one line on stderr and exit
  status 1, not under the module's whole usage text (which `--help` prints); so does an OSError of `_REFUSALS`
  (a permission, a read-only or full disk), with the path and what to check, not a traceback."""
  def main_one_line(argv):
    try:
      return main(argv)
    except app.UsageError as e:
      sys.exit(str(e))
    except OSError as e:
      if e.errno not in _REFUSALS:
        raise
      where = " → ".join(repr(str(f)) for f in (e.filename, e.filename2) if f is not None) or "(no path given)"
      sys.exit(f"{e.strerror}: {where}; {_REFUSALS[e.errno]}.")
  app.run(main_one_line)
