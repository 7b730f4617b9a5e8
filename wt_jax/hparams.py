"""Hyperparameters that may arrive as arrays: one value per member of a run that trains several models in one
compiled program (`wt_jax.members`).

Inside such a program the model, the cost and the optimiser are built from a config whose member-variable
keys (`wt_jax.members.MEMBER_KEYS`: learning rate, dropout rates, the augmented loss's α and τ, ...) hold
traced scalars, so `jax.vmap` gives each member its own value. Code that reads one of those keys uses these
two functions where it would branch on the value in Python:

    on(rate)       whether the term the value controls is computed: a Python number turns it on when it is
                   non-zero (as before); an array always does, since the members share one program and a
                   member whose value is 0 computes the term times 0 (the same numbers, up to rounding)
    dynamic(x)     whether `x` is an array (possibly traced) rather than a Python number

and `config_changes(before, after)`: the keys in which two configs differ (a resume's check, members' `combine`).
"""
from __future__ import annotations

import json

import jax
from flax import traverse_util

import wt_jax.files as files


def dynamic(value) -> bool:
  """True for a jax array or tracer (a per-member value), False for a Python or numpy scalar."""
  return isinstance(value, jax.Array)


def on(value) -> bool:
  """Whether a hyperparameter turns its term on: `bool(value)` for a number, always True for an array."""
  return True if dynamic(value) else bool(value)


def config_changes(before: dict, after: dict) -> dict[str, list]:
  """{key: [value before, value after]} for every key of two (nested) configs that differs (values as run.json
  holds them: tuples as lists, NaN as None)."""
  a, b = (json.loads(json.dumps(files.finite(traverse_util.flatten_dict(d, sep=".")))) for d in (before, after))
  return {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
