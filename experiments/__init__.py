"""Runnable entry points: `python -m experiments.<name> --config=configs/<file>.py`."""
import sys

from absl import app


def run_main(main) -> None:
  """`absl.app.run(main)`, except that a `UsageError` raised by `main` (a bad value found once the flags are
  read: an unknown dataset, a malformed job) ends the process with its message as one line on stderr and exit
  status 1, not under the module's whole usage text (which `--help` prints)."""
  def main_one_line(argv):
    try:
      return main(argv)
    except app.UsageError as e:
      sys.exit(str(e))
  app.run(main_one_line)
