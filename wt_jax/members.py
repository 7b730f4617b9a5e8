"""Many models in one compiled program: the K members of a run.

    members = parse(config)         # None for a plain run; else K member configs
    state = stack([state_0, ..., state_{K-1}])       every leaf gains a leading member axis [K, ...]
    step = vmap_step(make_body, members, step_keys)  one program: the task's step vmapped over that axis

A language model at the papers' batch of 20 leaves an accelerator mostly idle: each step is a chain of small
dependent matmuls. K members of a run train K models at once — `jax.vmap` turns each matmul into a batched
one over the member axis — sharing the data order (the same windows, as the papers' sequential batches),
each with its own seed and, where `config.member_values` says so, its own value of a key that changes no
shape (`MEMBER_KEYS`). Member k computes what a run trained alone with `configs[k]` computes (up to the
rounding of batched matmuls).

Spelling (`configs/lm_base.py`): `--config.members=K` trains seeds seed, seed + 1, …, seed + K − 1;
`--config.member_values='al.alpha=6.5,13;dropout_h=0.4,0.5'` gives each member its own values (K is the
lists' length; `seed=…` lists seeds explicitly, otherwise member k's seed is seed + k; `name=…` names each
member's config, so that runs of different configs that share every shape — Inan et al.'s VD-LSTM and +AL rows,
which differ only in α — are recorded under their own names). `combine(configs)` spells the member_values that
make the first of several such configs train all of them.

How per-member values reach the program: inside the vmapped step the model, cost and optimiser are built from
`Members.bind(values)` — the config with each varying key holding a traced scalar — and the code that reads
those keys branches with `wt_jax.hparams.on` instead of Python truth, so every member runs the same program
(a member whose value is 0 computes the term times 0). The structure is the `template`'s: each varying key
at a non-zero member value.

Divergence: `guarded` freezes a member whose step produced a non-finite sum or parameter: its parameters, optimiser
state and carry stay at their last finite values, its sums are zero from then on, and `diverged_at` records
the step (−1 while it trains). The others are untouched: nothing in the program mixes members.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import re
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from wt_jax.errors import InputError
from wt_jax.hparams import config_changes

# Keys members may set differently: none changes a parameter's shape or the program's structure. The seed
# enters through the members' keys; the others are read as traced scalars where the step is built.
MEMBER_KEYS = ("seed", "learning_rate", "lr_decay", "clip_norm", "weight_decay",
               "dropout", "dropout_x", "dropout_i", "dropout_h", "dropout_o",
               "al.alpha", "al.tau", "al.target_gradient", "al.ce_weight", "name")
# Keys that label a member rather than enter its step (the seed enters through the members' keys).
LABEL_KEYS = ("seed", "name")
NAME = re.compile(r"[A-Za-z0-9_.-]+")  # a config name: a folder name and one member_values item
DROPOUT_KEYS = ("dropout", "dropout_x", "dropout_i", "dropout_h", "dropout_o")
DIVERGED = "diverged_at"  # the state's per-member step of divergence (−1: training)


def _get(config, key: str):
  for part in key.split("."):
    config = config[part]
  return config


def _set(config, key: str, value) -> None:
  *groups, last = key.split(".")
  for part in groups:
    config = config[part]
  config[last] = value


def _parse_value(key: str, text: str, like):
  text = text.strip()
  if isinstance(like, str):
    if not NAME.fullmatch(text):
      raise InputError(f"member_values: {key}={text!r} is not a name (letters, digits, '_', '.', '-').")
    return text
  try:
    if isinstance(like, bool):
      if text.lower() not in ("true", "false", "1", "0"):
        raise ValueError(text)
      return text.lower() in ("true", "1")
    if isinstance(like, int):
      return int(text)
    return float(text)
  except ValueError:
    raise InputError(f"member_values: {key}={text!r} is not a {type(like).__name__}.") from None


def parse_values(spec: str, config) -> dict[str, list]:
  """'KEY=V1,V2,…;KEY2=…' → {key: [values]}, each value of the key's type in `config`."""
  values: dict[str, list] = {}
  for item in (part.strip() for part in spec.split(";")):
    if not item:
      continue
    key, eq, listed = item.partition("=")
    key = key.strip()
    if not eq or not listed.strip():
      raise InputError(f"member_values: {item!r} is not KEY=V1,V2,… (items separated by ';').")
    if key not in MEMBER_KEYS:
      raise InputError(f"member_values: {key!r} cannot differ between members (it would change a shape or the "
                       f"program); members may differ in: {', '.join(MEMBER_KEYS)}.")
    if key in values:
      raise InputError(f"member_values: {key!r} is given twice.")
    like = _get(config, key)
    values[key] = [_parse_value(key, v, like) for v in listed.split(",")]
  return values


@dataclasses.dataclass(frozen=True)
class Members:
  """The K members of a run: `configs[k]` is member k's whole config (`members = 0`: what a run trained alone
  with its seed and settings reads), `varying` the keys other than the seed whose values differ."""

  configs: tuple
  varying: dict

  @property
  def size(self) -> int:
    return len(self.configs)

  @property
  def seeds(self) -> list[int]:
    return [c.seed for c in self.configs]

  def template(self) -> ml_collections.ConfigDict:
    """Member 0's config with each varying key at the first member's non-zero value: the structure every
    member's program has (the model built for evaluation, the optimiser state's tree)."""
    c = copy.deepcopy(self.configs[0])
    for key, vals in self.varying.items():
      _set(c, key, next((v for v in vals if v), vals[0]))
    return c

  def values(self) -> dict[str, np.ndarray]:
    """{key: [K] array} of the varying keys (float32, int32 or bool), the vmapped inputs of `bind`."""
    out = {}
    for key, vals in self.varying.items():
      dtype = bool if isinstance(vals[0], bool) else np.int32 if isinstance(vals[0], int) else np.float32
      out[key] = np.asarray(vals, dtype)
    return out

  def bind(self, values: dict[str, Any]) -> ml_collections.ConfigDict:
    """The template with each varying key holding `values[key]` (inside `jax.vmap`: one member's traced
    scalar). Models, costs and optimisers built from it read those keys through `wt_jax.hparams`."""
    c = self.template()
    with c.unlocked(), c.ignore_type():
      for key, value in values.items():
        _set(c, key, value)
    return c


def parse(config) -> Members | None:
  """The members `config.members` and `config.member_values` ask for, or None for a plain run (members = 0
  and no member_values). Member k's config: `config` with members = 0, member_values = '', seed + k (or the
  listed seed) and its listed values; each is checked as a run alone would be, and no two may be the same
  run."""
  values = parse_values(config.member_values, config)
  sizes = {len(v) for v in values.values()}
  if len(sizes) > 1:
    raise InputError(f"member_values: every key needs one value per member; got lists of lengths "
                     f"{sorted(sizes)} ({config.member_values!r}).")
  listed = sizes.pop() if sizes else 0
  k = config.members or listed
  if config.members < 0:
    raise InputError(f"members must be ≥ 0 (0: one model, the usual run), not {config.members}.")
  if not k:
    return None
  if listed and listed != k:
    raise InputError(f"members={config.members} but member_values lists {listed} values per key.")
  configs = []
  for i in range(k):
    c = copy.deepcopy(config)
    c.members, c.member_values, c.member_devices = 0, "", 0
    c.seed = config.seed + i
    for key, vals in values.items():
      _set(c, key, vals[i])
    for key in DROPOUT_KEYS:
      if not 0.0 <= _get(c, key) < 1.0:
        raise InputError(f"member {i}: {key} must be in [0, 1), not {_get(c, key)}.")
    configs.append(c)
  first_of = {}  # a member whose config is another's would train the same model twice under one name
  for i, c in enumerate(configs):
    j = first_of.setdefault(json.dumps(c.to_dict(), sort_keys=True, default=str), i)
    if j != i:
      raise InputError(f"members {j} and {i} are the same run ({c.name}, seed {c.seed}): give each its own seed "
                       f"or values.")
  varying = {key: vals for key, vals in values.items() if key not in LABEL_KEYS and len(set(vals)) > 1}
  return Members(tuple(configs), varying)


def _spell(value) -> str:
  return str(value).lower() if isinstance(value, bool) else repr(value) if isinstance(value, float) else str(value)


def combine(configs: list) -> str:
  """The member_values that make `configs[0]` train every config of `configs` as its members, member k being
  `configs[k]` (its name, seed and values): 'name=…;seed=…;KEY=…' over the keys that differ. Each config is
  one model (members = 0, no member_values). Raises ValueError, naming the key, if two configs differ in a key
  members cannot vary (a shape, the model, the corpus, the schedule's length …): they cannot share a program."""
  if not configs:
    raise ValueError("combine: no configs.")
  for c in configs:
    if c.members or c.member_values:
      raise ValueError(f"combine: {c.name} trains members itself; list its members' configs instead.")
  changes = [config_changes(configs[0].to_dict(), c.to_dict()) for c in configs]
  for c, changed in zip(configs, changes):
    bad = [k for k in changed if k not in MEMBER_KEYS]
    if bad:
      before, after = changed[bad[0]]
      raise ValueError(f"combine: {configs[0].name} and {c.name} differ in {bad[0]!r} ({before!r} and {after!r}), "
                       f"which members cannot vary (they may differ in: {', '.join(MEMBER_KEYS)}).")
  differ = sorted(set().union(*changes))
  listed = [k for k in ("name", "seed") if k in differ or k == "seed"] + [k for k in differ if k not in LABEL_KEYS]
  return ";".join(f"{k}=" + ",".join(_spell(_get(c, k)) for c in configs) for k in listed)


# --- the stacked state ------------------------------------------------------------------------------------

def stack(trees: list) -> Any:
  """K pytrees of one structure → one pytree whose leaves are [K, ...]."""
  return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *trees)


def member(tree: Any, k: int) -> Any:
  """Member k's slice of a stacked pytree."""
  return jax.tree_util.tree_map(lambda x: x[k], tree)


def select(mask_K, new: Any, old: Any) -> Any:
  """Leafwise `new` where mask[k], else `old` (stacked pytrees, mask [K] bool)."""
  mask_K = jnp.asarray(mask_K)
  return jax.tree_util.tree_map(
      lambda n, o: jnp.where(mask_K.reshape(mask_K.shape + (1,) * (n.ndim - 1)), n, o), new, old)


def guarded(step_fn: Callable) -> Callable:
  """step(state, *batch) → (state, sums) of one model → the same for a member whose state also holds
  `diverged_at`: a step that yields a non-finite sum or parameter (or follows one) leaves the member's state
  as it was (its `step` still counts, so every member's step is the run's) and reports NaN sums, which the
  trainer's non-finite policy reads as the member's divergence."""

  def step(state, *batch):
    old = {k: v for k, v in state.items() if k != DIVERGED}
    new, sums = step_fn(old, *batch)
    checked = [*jax.tree_util.tree_leaves(sums), *jax.tree_util.tree_leaves(new.get("params", {}))]
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for v in checked if jnp.issubdtype(v.dtype, jnp.floating)]))
    alive = state[DIVERGED] < 0
    ok = finite & alive
    kept = jax.tree_util.tree_map(lambda n, o: jnp.where(ok, n, o), new, old)
    kept["step"] = new["step"]
    kept[DIVERGED] = jnp.where(alive & ~finite, old["step"] + 1, state[DIVERGED])
    return kept, jax.tree_util.tree_map(lambda v: jnp.where(ok, v, jnp.nan).astype(v.dtype), sums)

  return step


def vmap_step(make_body: Callable, members: Members, step_keys: jax.Array) -> Callable:
  """make_body(config, step_key) → step(state, *batch) → (state, sums), un-jitted, for one model →
  step(stacked state, *batch) → (stacked state, sums [K]): member k built from `members.bind` of its values
  with its own step key, the batch shared, `guarded` against divergence. Jit it with the shardings wanted."""
  values = {key: jnp.asarray(v) for key, v in members.values().items()}

  def one(state, values_k, key_k, *batch):
    return guarded(make_body(members.bind(values_k), key_k))(state, *batch)

  def step(state, *batch):
    # The batch is shared, but it enters every member's step on the member axis: with it unbatched, the
    # gradient of the target-logit gather (the one-hot part of the cross-entropy's gradient) stays unbatched, so
    # XLA scatters it into a zero buffer of its own and adds it to the members' softmax gradient in each
    # consumer's fusion (XLA:CPU: three, one per layout); batched, it is scattered in place, as in one model.
    batch = [jnp.broadcast_to(b, (members.size,) + b.shape) for b in batch]
    return jax.vmap(one, in_axes=(0, 0, 0) + (0,) * len(batch))(state, values, step_keys, *batch)

  return step
