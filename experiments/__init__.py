"""Runnable entry points: `python -m experiments.<name> --config=configs/<file>.py`."""
import ast
import errno
import os
import signal
import sys
from pathlib import Path

import ml_collections
from absl import app, flags

from wt_jax.errors import InputError

# An OSError that says the machine refused, not that the code is wrong: a file or folder this user may not read
# or write, a read-only file system, a full disk or quota. Its traceback tells the user nothing more than its
# message and the path.
_REFUSALS = {errno.EACCES: "check the owner and mode of it and of the folders above it",
             errno.EPERM: "check the owner and mode of it and of the folders above it",
             errno.EROFS: "the file system is mounted read-only", errno.ENOSPC: "free some space or use another folder",
             errno.EDQUOT: "free some space or use another folder"}


def run_main(main, stops: tuple = ()) -> None:
  """`absl.app.run(main)`, with what `main` or the flags refuse ended as one line (`one_line`,
  `parse_flags`) instead of a traceback or the module's whole usage text (which `--help` prints). A training
  tool passes the trainer's `STOPS` as `stops`: the errors whose message says all (see `one_line`)."""
  app.run(one_line(main, stops), flags_parser=parse_flags)


def start(argv, workdir, config) -> None:
  """What a training tool does before it reads its corpus: refuse stray arguments and a `--workdir` that cannot
  be made; ask XLA:GPU for deterministic kernels if `config.deterministic` (before JAX starts its backends,
  which read XLA_FLAGS once); join a multi-host run where WT_JAX_COORDINATOR / WT_JAX_DISTRIBUTED ask for one;
  quieten the libraries' logs. From here on SIGINT and SIGTERM end the tool with one line (`stop_on_signals`)."""
  stop_on_signals()
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  check_folder(workdir, "--workdir")
  from wt_jax import parallel  # (imported here: this package's light tools, report and the GPU queue, load no JAX)
  apply_determinism(config)
  parallel.initialize_distributed()
  quiet_library_logs()


def quiet_library_logs() -> None:
  """Drop orbax's INFO chatter from the absl log (warnings and errors still pass)."""
  import logging as std_logging

  class _Filter(std_logging.Filter):
    def filter(self, record):
      return record.levelno >= std_logging.WARNING or "orbax" not in record.pathname

  std_logging.getLogger("absl").addFilter(_Filter())


def apply_determinism(config) -> None:
  """With `config.deterministic`, ask XLA:GPU for deterministic kernels (XLA_FLAGS, `run_folder.DETERMINISTIC_FLAG`);
  the flags end up in run.json and results.json. JAX's backends read XLA_FLAGS once, when they start: the entry
  points call this before any JAX computation (`start`); from a notebook, set XLA_FLAGS before the first one.
  Without `config.deterministic`, nothing changes."""
  from wt_jax.train import run_folder
  flags = os.environ.get("XLA_FLAGS", "")
  if config.get("deterministic", False) and not run_folder.determinism_in(flags):
    os.environ["XLA_FLAGS"] = xla_flags_with_determinism(flags, True)


def xla_flags_with_determinism(flags: str, deterministic: bool) -> str:
  """`flags` (an XLA_FLAGS value) with `run_folder.DETERMINISTIC_FLAG` set on or off: any earlier setting of it replaced,
  every other flag kept in order."""
  from wt_jax.train import run_folder
  kept = [f for f in flags.split() if f.split("=", 1)[0] != run_folder.DETERMINISTIC_FLAG]
  return " ".join(kept + [f"{run_folder.DETERMINISTIC_FLAG}={'true' if deterministic else 'false'}"])


def stop_on_signals() -> None:
  """SIGINT and SIGTERM raise `Stopped` (`stop_at_once`). Python drops an exception raised where it cannot pass it
  on — in a garbage collector's callback (JAX registers one), in a `__del__` — and the tool would go on as if never
  signalled; `sys.unraisablehook` catches a dropped `Stopped` instead and ends the process there, with its line
  and exit status 1, unwinding nothing (what a killed run leaves: `last` as saved, a stale run.lock taken over)."""
  for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, stop_at_once)
  previous = sys.unraisablehook

  def exit_if_stopped(unraisable):
    if not isinstance(unraisable.exc_value, Stopped):
      return previous(unraisable)
    print(unraisable.exc_value, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)

  sys.unraisablehook = exit_if_stopped


class Stopped(KeyboardInterrupt):
  """SIGINT or SIGTERM while a training tool is not in its training steps (`stop_at_once`)."""


def stop_at_once(signum, frame):
  """A training tool's SIGINT/SIGTERM handler outside its training loop (`start` sets it; inside the loop
  `wt_jax.train.trainer.deferred` lets the step end and saves `last` first, then puts this one back): stop at once,
  as one line (`one_line`). Nothing is being trained then: the tool is setting up (reading the corpus,
  restoring, compiling), scoring after the last step, or saving `last` when a second signal comes (a save cut
  short stays an unfinished `<step>.orbax-checkpoint-tmp`, which is never restored: `checkpoint.Checkpoints`)."""
  raise Stopped(f"Stopped by {signal.Signals(signum).name} outside the training steps (setting up, testing, or a "
                "second signal); the checkpoints saved before are kept. Re-run the same command to resume.")


def one_line(main, stops: tuple = ()):
  """`main`, except that a `UsageError` it raises (a bad value found once the flags are read: an unknown
  dataset, a malformed job) ends the process with its message as one line on stderr and exit status 1; so
  does a value or file the library refuses (`wt_jax.errors.InputError`), a signal outside the training steps
  (`Stopped`), an error of `stops` (for a training tool, the trainer's: a missing corpus, a busy workdir,
  divergence, SIGINT/SIGTERM, which leave a resumable checkpoint), a `--config` file that would not load (its
  reason, `parse_flags`), an OSError of `_REFUSALS` (a permission, a read-only or full disk), with the path and
  what to check, and a file where a folder is needed or a folder where a file is."""
  def main_one_line(argv):
    try:
      return main(argv)
    except (app.UsageError, InputError, Stopped) as e:
      sys.exit(str(e))
    except stops as e:  # (before OSError: an unreadable checkpoint is a PermissionError with its own message)
      sys.exit(str(e))
    except OSError as e:
      if _file_for_a_folder(e):
        sys.exit(f"{e.strerror}: {str(e.filename)!r} is a file (or under one) where a folder is needed; move it "
                 "or give another folder.")
      folder = next((f for f in (e.filename, e.filename2) if f is not None and os.path.isdir(f)), None)
      if e.errno == errno.EISDIR and folder is not None:  # (a rename onto it names the file renamed first)
        sys.exit(f"{e.strerror}: {str(folder)!r} is a folder where a file is needed; move it or give another "
                 "folder.")
      if e.errno not in _REFUSALS:
        raise
      where = " → ".join(repr(str(f)) for f in (e.filename, e.filename2) if f is not None) or "(no path given)"
      sys.exit(f"{e.strerror}: {where}; {_REFUSALS[e.errno]}.")
  return main_one_line


def _file_for_a_folder(e: OSError) -> bool:
  """Whether `e` is a folder that could not be made or entered because a file has its name or one above it
  (mkdir's EEXIST where a file is, or ENOTDIR)."""
  if e.errno == errno.ENOTDIR:
    return True
  return e.errno == errno.EEXIST and e.filename is not None and os.path.isfile(e.filename)


def check_folder(path, flag: str) -> None:
  """Refuse, before any work, an output folder that cannot be made: `path`, or the nearest part of it that
  exists, is a file. `flag` names it in the message. A bucket (`gs://…`) is not checked."""
  if path is None or "://" in str(path):
    return
  for part in (Path(path), *Path(path).absolute().parents):
    if part.exists():
      if not part.is_dir():
        raise InputError(f"{flag}={path}: {part} is a file, not a folder; move it or give another folder.")
      return


def parse_flags(argv):
  """absl's parser, with two mistakes in `--config` ended as one line: a config file that would not load (its
  reason: ml_collections defers that error to the config's first use, as an OSError from a stand-in object that is
  not a ConfigDict), and an override of a key the config lacks (`--config.hiden_size=8`: an AttributeError or
  KeyError, its "did you mean" kept). The same errors from inside a config file's `get_config` are a bug in that
  file and keep their traceback: the error is taken for an override's only if the file loads without them."""
  try:
    parsed = app.parse_flags_with_usage(argv)
  except (AttributeError, KeyError) as e:
    if not _config_loads(argv):
      raise
    why = e
    while isinstance(why, BaseException) and why.args:  # (the AttributeError wraps the KeyError that says it)
      why = why.args[0]
    sys.exit(f"--config: no such key {str(why).strip()}".replace("\n", "; "))
  config = flags.FLAGS["config"].value if "config" in flags.FLAGS else None
  if config is not None and not isinstance(config, ml_collections.ConfigDict):
    try:
      config.name
    except OSError as e:
      sys.exit(f"--config: {str(e).strip().splitlines()[-1].strip()}")
  return parsed


def _config_loads(argv) -> bool:
  """Whether the config file that argv's last `--config=FILE` (or `--config FILE`) names, else the flag's
  default, loads by the flag's own parser (ml_collections' loader) when none of argv's overrides is applied."""
  if "config" not in flags.FLAGS:
    return False
  flag = flags.FLAGS["config"]
  path = ast.literal_eval(flag.default_as_str)
  for i, arg in enumerate(argv):
    if arg.startswith("--config="):
      path = arg.split("=", 1)[1]
    elif arg == "--config" and i + 1 < len(argv):
      path = argv[i + 1]
  try:
    flag.parser.parse(path)
  except (AttributeError, KeyError):
    return False
  return True
