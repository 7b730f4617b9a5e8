"""An entry point's `main` run in the test process, as `python -m experiments.<tool>` runs it (not a test).

`experiments.run_main` is absl's `app.run` of `experiments.one_line(main, argv)`: the flags are parsed, then `main`
runs, and what it refuses ends the process with one line (SystemExit with the message). Here the flags are
set with absl's flagsaver instead of parsed from a command line (every other flag at its default) and put back
afterwards; the rest is the same call. Only a module the test process imports anyway can be run so: absl's
flags are process-wide, and two tools that define a flag of the same name cannot both be imported.
"""
from absl import flags
from absl.testing import flagsaver

import experiments


def main_ends_with(main, argv: list[str], **flag_values) -> str | None:
  """`one_line(main, argv)` with `flag_values` set → the line it ended the process with, or None if it
  returned."""
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()  # (the defaults, as a command line with no flags)
  with flagsaver.flagsaver(**flag_values):
    try:
      experiments.one_line(main, argv)
    except SystemExit as e:
      return str(e.code)
  return None
