"""Where another library's behaviour would reach a user as noise or a hang, and what this project does instead.
Each names the library version it was seen on and the test that shows, with the real library, what a user would
otherwise see; a workaround whose test no longer shows it on the pinned versions is removed.

- orbax-checkpoint (0.12.8; 0.12.4): reading a damaged step leaves its other reads unfinished. 0.12.8 leaves them to
  the garbage collector, each an unraisable exception at any later moment; 0.12.4 cancels them in asyncio.run(),
  whose shutdown logs each with its traceback (`abandoned_reads_silenced`; tests/test_faults.py
  test_orbaxs_abandoned_reads_of_a_damaged_step_reach_no_hook_and_no_log).
- orbax-checkpoint (0.12.4, 0.12.8): a save refused by a full disk is raised as TensorStore's RESOURCE_EXHAUSTED in a
  ValueError, or as OSError ENOSPC (`disk_full`); every writer thread logs it with its traceback and asyncio logs the
  writes orbax abandoned (`DiskFullReportsShortened`); "Event loop is closed" unraisables follow (0.12.8,
  `loop_closed`); a process that exits while orbax's threads still run prints "cannot schedule new futures after
  shutdown" (0.12.8) or waits 300 s (0.12.4) (`orbax_threads_joined`). Tests:
  test_a_save_the_full_disk_refuses_prints_one_line_and_exits, test_orbaxs_own_reports_of_a_full_disk_are_one_line_each.
- tensorboardX (2.6.5): after a close that failed on a full disk, its exit hook closes the event files again and its
  writer thread reads a queue closed at exit (`tensorboard_stopped`;
  test_tensorboard_events_a_full_disk_refused_at_close_print_nothing_at_exit); a writer thread that died on a full
  disk makes the 11th `add_scalar` block for ever (`tensorboard_writer_died`;
  test_tensorboard_events_a_full_disk_refuses_do_not_stop_the_run).
- jax (0.10.2, 0.11.2): no public way to ask whether the backends have started, which read XLA_FLAGS once
  (`backends_started`; tests/test_train.py test_a_deterministic_run_whose_backend_started_without_the_flag_stops).
"""
from __future__ import annotations

import contextlib
import errno
import logging as std_logging
import os
import sys
import threading
import time


def loop_closed(error: BaseException) -> bool:
  """A TensorStore read or write that completed after orbax's event loop closed."""
  return isinstance(error, RuntimeError) and str(error) == "Event loop is closed"


@contextlib.contextmanager
def unraisable_dropped(drop, stays):
  """While the body runs, drop the unraisable exceptions `drop` accepts; every other one reaches the hook installed
  before. If the body raises an error `stays` accepts, the filter stays (what it drops may be reported at any later
  moment, whenever the garbage collector reaches it); otherwise that hook is put back."""
  previous = sys.unraisablehook

  def hook(unraisable):
    if not drop(unraisable.exc_value):
      previous(unraisable)

  sys.unraisablehook = hook
  failed = False
  try:
    yield
  except Exception as e:
    failed = stays(e)
    raise
  finally:
    if not failed and sys.unraisablehook is hook:
      sys.unraisablehook = previous


class _RecordsDropped(std_logging.Filter):
  """A logging filter that drops the records whose exception `drop` accepts."""

  def __init__(self, drop):
    super().__init__()
    self.drop = drop

  def filter(self, record) -> bool:
    return not (record.exc_info and self.drop(record.exc_info[1]))


@contextlib.contextmanager
def abandoned_reads_silenced(step_dir, nothing_abandoned):
  """While orbax reads the step `step_dir`, and from then on if the read fails (unless `nothing_abandoned` accepts
  the error: e.g. a checkpoint of another model, refused before any read), drop Python's reports of the reads orbax
  abandons there — "Encountered error while reading array index" (naming the step's files), TensorStore reads that
  completed after orbax's loop closed — as unraisable exceptions (0.12.8) and as asyncio's log records (0.12.4):
  dozens to thousands of traceback lines repeating the damage the caller reports in one line. Every other report
  still reaches the hook and the log."""
  where = "/".join(str(step_dir).rstrip("/").split("/")[-3:]) + "/"  # `checkpoints/last/<step>/`: a bucket's
  # TensorStore spec names the path inside the bucket, a local one the whole path
  drop = lambda e: (where in str(e) and "error while reading" in str(e)) or loop_closed(e)
  stays = lambda e: not nothing_abandoned(e)
  records, logger = _RecordsDropped(drop), std_logging.getLogger("asyncio")
  logger.addFilter(records)
  failed = False
  try:
    with unraisable_dropped(drop, stays=stays):
      yield
  except Exception as e:
    failed = stays(e)
    raise
  finally:
    if not failed:
      logger.removeFilter(records)


def disk_full(error: BaseException) -> bool:
  """Whether `error`, or an error it was raised from, says the disk or quota is full: an OSError ENOSPC or EDQUOT,
  or TensorStore's RESOURCE_EXHAUSTED for a failed write (what orbax raises, in a ValueError)."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
      return True
    if "RESOURCE_EXHAUSTED" in str(error) and "writ" in str(error).lower():
      return True
    error = error.__cause__ or error.__context__
  return False


class DiskFullReportsShortened:
  """A logging filter for orbax's own reports of a save the full disk refused (the caller reports it in one line):
  the writers' records keep their message (what failed, and where) without the traceback; asyncio's records of
  writes orbax abandoned are dropped. Every other record passes unchanged."""

  def filter(self, record) -> bool:
    if not record.exc_info or not disk_full(record.exc_info[1]):
      return True
    if record.name == "asyncio":
      return "orbax" not in record.getMessage()
    if f"{os.sep}orbax{os.sep}" in (record.pathname or ""):
      record.exc_info, record.exc_text = None, None
    return True


SETTLE_S = 30.0  # seconds a failed save waits for orbax's threads to end


def orbax_threads_joined(timeout: float = SETTLE_S) -> None:
  """Wait (at most `timeout` seconds in all) for orbax's own threads of a failed save to end: if the interpreter
  shuts down meanwhile, one that starts a thread fails ("can't create new thread at interpreter shutdown") and the
  others wait 300 s for a signal it never sends (orbax 0.12.4)."""
  end = time.monotonic() + timeout
  for thread in threading.enumerate():
    if thread is not threading.current_thread() and type(thread).__module__.startswith("orbax."):
      threading.Thread.join(thread, max(0.0, end - time.monotonic()))  # (orbax's join raises their errors)


def tensorboard_writer_died(summary_writer) -> bool:
  """Whether one of tensorboardX's event writer threads has ended while its file is open (a write it failed). Waits
  first, while a live thread's queue is full, until it has room: `add_scalar` puts into that queue, and a put into a
  full queue whose thread then dies would block for ever (this thread being the queue's only producer, a queue with
  room stays so until the put)."""
  for w in (getattr(summary_writer, "all_writers", None) or {}).values():
    events = getattr(w, "event_writer", None)
    worker, queue = getattr(events, "_worker", None), getattr(events, "_event_queue", None)
    if getattr(events, "_closed", True) or worker is None or queue is None:
      continue
    while queue.full() and worker.is_alive():
      time.sleep(0.01)
    if not worker.is_alive():
      return True
  return False


def tensorboard_stopped(summary_writer) -> None:
  """Mark tensorboardX's event files closed and stop their writer threads after a close that failed, so that its
  exit hook does not close them again, nor a thread read a queue closed at exit, each raising after the error that
  ended the run."""
  for w in (getattr(summary_writer, "all_writers", None) or {}).values():
    events = getattr(w, "event_writer", None)
    if hasattr(events, "_closed"):
      worker, events._closed = getattr(events, "_worker", None), True
      if worker is not None and worker.is_alive():
        worker.stop()


def backends_started() -> bool:
  """Whether JAX has started its backends (after which XLA_FLAGS are read); True where this JAX cannot say."""
  try:
    from jax._src import xla_bridge
    return bool(xla_bridge.backends_are_initialized())
  except (ImportError, AttributeError):
    return True
