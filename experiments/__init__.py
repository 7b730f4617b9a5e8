"""Runnable entry points: `python -m experiments.<name> --config=configs/<file>.py`."""
import errno
import functools
import importlib.util
import logging
import os
import signal
import sys
from pathlib import Path

from absl import app
from absl import logging as absl_logging

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
  app.run(functools.partial(one_line, main, stops=stops), flags_parser=parse_flags)


def start(argv, workdir, config) -> None:
  """What a training tool does before it reads its corpus: refuse stray arguments and a `--workdir` that cannot
  be made; ask XLA:GPU for deterministic kernels if `config.deterministic` (before JAX starts its backends,
  which read XLA_FLAGS once); join a multi-host run where WT_JAX_COORDINATOR / WT_JAX_DISTRIBUTED ask for one;
  quieten the libraries' logs. Until the training loop (`trainer.deferred`) nothing is saved yet, so SIGINT and
  SIGTERM end the process at once, as the kernel's default action does: SIGINT is set to it too, because Python's
  KeyboardInterrupt can be raised inside a garbage collector's callback (JAX registers one), where Python prints and
  drops it and the tool would go on as if never interrupted (BUILD_NOTES §69)."""
  signal.signal(signal.SIGINT, signal.SIG_DFL)
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  check_folder(workdir, "--workdir")
  import wt_jax.parallel as parallel  # (here: this package's light tools, report and the GPU queue, load no JAX)
  apply_determinism(config)
  parallel.initialize_distributed()
  quiet_library_logs()


def quiet_library_logs() -> None:
  """Drop the libraries' INFO lines (orbax's notes on every save and restore, JAX's backend search) through absl's
  public verbosity; the project's own loggers (`wt_jax.*`, the tools') keep their INFO lines."""
  absl_logging.set_verbosity(absl_logging.WARNING)
  for name in ("wt_jax", "experiments", "__main__"):
    logging.getLogger(name).setLevel(logging.INFO)


def apply_determinism(config) -> None:
  """With `config.deterministic`, ask XLA:GPU for deterministic kernels (XLA_FLAGS, `parallel.DETERMINISTIC_FLAG`);
  the flags end up in run.json and results.json. JAX's backends read XLA_FLAGS once, when they start: the entry
  points call this before any JAX computation (`start`); from a notebook, set XLA_FLAGS before the first one.
  Without `config.deterministic`, nothing changes."""
  import wt_jax.parallel as parallel
  flags = os.environ.get("XLA_FLAGS", "")
  if config.get("deterministic", False) and not parallel.determinism_in(flags):
    os.environ["XLA_FLAGS"] = parallel.xla_flags_with_determinism(flags, True)


def one_line(main, argv, stops: tuple = ()):
  """`main(argv)`, except that a `UsageError` it raises (a bad value found once the flags are read: an unknown
  dataset, a malformed job) ends the process with its message as one line on stderr and exit status 1; so
  does a value or file the library refuses (`wt_jax.errors.InputError`), an error of `stops` (for a training tool,
  the trainer's: a missing corpus, a busy workdir, divergence, a signal in the loop, which leave a resumable
  checkpoint), SIGINT anywhere else (KeyboardInterrupt: nothing was being trained), a `--config` file that would not
  load (its reason, `parse_flags`), an OSError of `_REFUSALS` (a permission, a read-only or full disk), with the
  path and what to check, and a file where a folder is needed or a folder where a file is."""
  try:
    return main(argv)
  except (app.UsageError, InputError) as e:
    sys.exit(str(e))
  except stops as e:  # (before OSError: an unreadable checkpoint is a PermissionError with its own message)
    sys.exit(str(e))
  except KeyboardInterrupt:
    sys.exit("Stopped by SIGINT outside the training steps (setting up, testing, or a second signal); the "
             "checkpoints saved before are kept. Re-run the same command to resume.")
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
  """absl's parser, with two mistakes in `--config` ended as one line: a config file that is not there, and an
  override of a key the config lacks (`--config.hiden_size=8`: an AttributeError or KeyError, its "did you mean"
  kept). The same errors from inside a config file's `get_config` are a bug in that file and keep their traceback:
  the error is taken for an override's only if the file loads without them (`_config_loads`)."""
  spec = None  # argv's last `--config=PATH[:ARG]` (or `--config PATH[:ARG]`)
  for i, arg in enumerate(argv):
    if arg.startswith("--config=") or (arg == "--config" and i + 1 < len(argv)):
      spec = arg.split("=", 1)[1] if "=" in arg else argv[i + 1]
  path = spec.partition(":")[0] if spec else None
  if path is not None and not os.path.isfile(path):
    sys.exit(f"--config: {FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)}")
  try:
    return app.parse_flags_with_usage(argv)
  except (AttributeError, KeyError) as e:
    if spec is None or not _config_loads(spec):
      raise
    why = e
    while isinstance(why, BaseException) and why.args:  # (the AttributeError wraps the KeyError that says it)
      why = why.args[0]
    sys.exit(f"--config: no such key {str(why).strip()}".replace("\n", "; "))


def _config_loads(spec: str) -> bool:
  """Whether the config file `spec` (PATH[:ARG], ml_collections' form) gives its config, `get_config(ARG)`, without an
  AttributeError or KeyError when none of the command line's overrides is applied."""
  path, _, arg = spec.partition(":")
  module_spec = importlib.util.spec_from_file_location("_config_file", path)
  module = importlib.util.module_from_spec(module_spec)
  try:
    module_spec.loader.exec_module(module)
    module.get_config(*([arg] if arg else []))
  except (AttributeError, KeyError):
    return False
  return True
