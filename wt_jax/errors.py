"""The error that means "this input is refused", not "this code is wrong".

`InputError` is raised for a config value or a file a run cannot use: an unknown model, optimizer, softmax or
tying, a value out of its range, a corpus too short for one batch, malformed member values. It is a
ValueError, so callers that catch ValueError keep working; the entry points (`experiments.run_main`) and the
trainer's `STOPS` print it as one line, with no traceback, since its message already says what to change.
"""


class InputError(ValueError):
  """A config value or an input file that a run refuses; the message names it and what would be accepted."""
