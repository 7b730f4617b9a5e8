"""The error that means "this input is refused", not "this code is wrong".

`InputError` is raised for a config value or a file a run cannot use: an unknown model, optimizer, softmax or
tying, a value out of its range, a corpus too short for one batch, malformed member values. It is a
ValueError, so callers that catch ValueError keep working; the entry points (`experiments.run_main`) and the
trainer's `STOPS` print it as one line, with no traceback, since its message already says what to change.
"""


class InputError(ValueError):
  """A config value or an input file that a run refuses; the message names it and what would be accepted."""


def require_counts(config, keys) -> None:
  """`InputError` unless each of `keys` in `config` is an integer ≥ 1 (a count: a size, a batch, a window, a
  number of epochs, samples or beams, where 0 divides by zero, builds nothing or decodes nothing)."""
  for key in keys:
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise InputError(f"{key} must be an integer ≥ 1, not {value!r}.")
