"""SIGINT and SIGTERM during training steps (a preempted machine, a scheduler, `timeout`, Ctrl-C): the first is a
flag the trainer's loop checks between steps, so that it saves `last` at a step boundary and stops with one line;
a second gets the handler that was there before (the entry points': `experiments.stop_at_once`)."""
from __future__ import annotations

import contextlib
import signal
import threading


@contextlib.contextmanager
def deferred(signums=(signal.SIGINT, signal.SIGTERM)):
  """Within the block, the first of `signums` sets the yielded flag (`flag.signum` names it) and puts the previous
  handler back. Outside the main thread, where Python delivers no signal, the flag is never set."""
  flag = threading.Event()
  if threading.current_thread() is not threading.main_thread():
    yield flag
    return
  previous = {s: signal.getsignal(s) for s in signums}

  def handler(signum, frame):
    flag.signum = signum
    flag.set()
    signal.signal(signum, previous[signum])

  for s in signums:
    signal.signal(s, handler)
  try:
    yield flag
  finally:
    for s in signums:
      signal.signal(s, previous[s])
