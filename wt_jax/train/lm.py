"""Language-model training: every LM of `wt_jax.models` on a word-level corpus, on the shared skeleton.

    fit(config, corpus, workdir) → results dict (also <workdir>/results.json)

The model comes from `wt_jax.models.build(config)`, the cost from `wt_jax.losses.make_lm_cost(config)` and
the optimiser (with any parameter constraint) from `wt_jax.train.optim.make_optimizer`; the train step
(`make_train_step`) knows nothing else: forward over a [B, T] window (the model scans over time), cost,
gradients, optax update. The recurrent state ("carry") is part of the training state: carried across
windows, reset at the start of each epoch, checkpointed with the rest, so a resumed run ends with the same
numbers. Validation every epoch (batched, `config.eval_batch_size` streams); the test protocol is
`wt_jax.lm_eval.test_perplexities`. Checkpoints, resume, signals and the non-finite policy are the
skeleton's (`wt_jax.train.trainer`).
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Callable

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax

from wt_jax import convert, losses, models, parallel, precision, softmax, tying
from wt_jax import members as members_lib
from wt_jax.data import batching
from wt_jax.data import vocab as vocab_lib
from wt_jax.errors import InputError, require_counts
from wt_jax import lm_eval as eval_lib
from wt_jax.train import optim, trainer


def train_step_body(model, tx: optax.GradientTransformation, cost: Callable, step_key: jax.Array) -> Callable:
  """step(state, x[B, T], y[B, T]) → (state, sums), not compiled: `make_train_step`'s step (see there), also the
  one `wt_jax.members` vmaps over a member axis."""

  outputs = {"features": True} if getattr(cost, "takes_features", False) else {}

  def loss_fn(params, carry, x, y, key):
    (out, carry), aux = model.apply({"params": params}, x, carry, train=True,
                                    rngs={"dropout": key}, mutable=[tying.PENALTIES], **outputs)
    total, nll_BxT = cost(params, out, y, aux.get(tying.PENALTIES, {}), jax.random.fold_in(key, 1))
    return total, (carry, jnp.sum(nll_BxT))

  def step(state, x_BxT, y_BxT):
    chex.assert_rank([x_BxT, y_BxT], 2)
    chex.assert_equal_shape([x_BxT, y_BxT])
    key = jax.random.fold_in(step_key, state["step"])
    carry = jax.lax.stop_gradient(state["carry"])
    (_, (carry, nll_sum)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state["params"], carry, x_BxT, y_BxT, key)
    updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
    params = optax.apply_updates(state["params"], updates)
    sums = {"nll": nll_sum, "tokens": jnp.asarray(y_BxT.size, jnp.int32), "steps": jnp.ones((), jnp.int32),
            "norm/grad": optax.tree.norm(grads)}
    for name, g in tying.embedding_leaves(grads).items():
      sums[f"norm/grad/{name}"] = jnp.linalg.norm(g)
      sums[f"rows/grad/{name}"] = jnp.sum(jnp.any(g != 0, axis=-1)).astype(jnp.float32)
    return {"params": params, "opt_state": opt_state, "step": state["step"] + 1, "carry": carry}, sums

  return step


def make_train_step(model, tx: optax.GradientTransformation, cost: Callable, step_key: jax.Array,
                    dp: parallel.DataParallel | None = None):
  """Returns step(state, x[B, T], y[B, T]) → (state, sums), jit-compiled, the state donated.

  state: {'params', 'opt_state', 'step', 'carry'}; `cost` is `losses.make_lm_cost(config)`'s signature:
  cost(params, logits, targets, penalties, key) → (cost, nll[B, T]); a cost with `takes_features` (the
  softmax approximations of `wt_jax.softmax`) gets the output layer's features z[B, T, D] instead of the logits
  and applies the word matrix itself. sums: this step's {'nll': Σ NLL, 'tokens', 'steps': 1} plus the global
  L2 norm of the gradient (before clipping), and for each embedding matrix (one when tied, two when untied,
  named by their path) its gradient's norm and how many of its rows the gradient reaches ('rows/grad/…':
  Press & Wolf's Section 3 reading). Dropout's key is fold_in(step_key, step), the cost's fold_in of that.

  With `dp`, the step is compiled for that mesh: x, y and the carry sharded along the batch, the rest
  replicated (pass arrays placed by `dp`). The cost is written for the global batch, so the gradient equals
  the single-device one (XLA adds the all-reduce).
  """
  step = train_step_body(model, tx, cost, step_key)
  if dp is None:
    return jax.jit(step, donate_argnums=(0,))
  rep, rows = dp.replicated, dp.batch_sharding(0)
  state_sharding = {"params": rep, "opt_state": rep, "step": rep, "carry": dp.batch_sharding(models.CARRY_BATCH_AXIS)}
  return jax.jit(step, donate_argnums=(0,), in_shardings=(state_sharding, rows, rows),
                 out_shardings=(state_sharding, rep))


def member_state_sharding(dp: parallel.DataParallel) -> dict:
  """Where a members run's stacked LM state lives: parameters, optimiser state and carry split along the member
  axis (the carry also along the batch), the step counters replicated (every process reads them)."""
  rep, split = dp.replicated, dp.member_sharding()
  return {"params": split, "opt_state": split, "step": rep, "carry": dp.member_sharding(models.CARRY_BATCH_AXIS),
          members_lib.DIVERGED: rep}


def make_member_train_step(group: members_lib.Members, steps_per_epoch: int, step_keys: jax.Array,
                           dp: parallel.DataParallel, counts=None):
  """The members' step, jit-compiled for `dp`'s [members, data] mesh, the state donated: step(state[K, …],
  x[B, T], y[B, T]) → (state, sums[K]). Member k's model, cost and optimiser are built inside the program
  from its values (`Members.bind`), its dropout and cost keys from step_keys[k]: what `train_step_for` builds
  for a run of member k's config alone, vmapped."""

  def body(config, step_key):
    return train_step_body(models.build(config), optim.make_optimizer(config, steps_per_epoch),
                           losses.make_lm_cost(config, counts), step_key)

  state_sharding, rows = member_state_sharding(dp), dp.batch_sharding(0)
  return jax.jit(members_lib.vmap_step(body, group, step_keys), donate_argnums=(0,),
                 in_shardings=(state_sharding, rows, rows), out_shardings=(state_sharding, dp.replicated))


def train_step_for(config, model, tx: optax.GradientTransformation, step_key: jax.Array,
                   dp: parallel.DataParallel | None = None, counts=None):
  """The step `fit` trains `config` with (its cost from `losses.make_lm_cost`, `counts` the training counts
  a unigram proposal needs), also the one bench times."""
  return make_train_step(model, tx, losses.make_lm_cost(config, counts), step_key, dp)


def initial_state(config, model, tx, init_key: jax.Array) -> dict:
  """{'params', 'opt_state', 'step', 'carry'} before the first step (on the default device)."""
  params = models.init_params(model, config, init_key)
  return {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32),
          "carry": model.initial_carry(config.batch_size)}


# Keys that count something, ≥ 1 for any run (a 0 divides by zero in the batching or builds no layer).
POSITIVE_KEYS = ("vocab_size", "hidden_size", "num_layers", "batch_size", "bptt", "eval_batch_size", "num_epochs")


def check_ranges(config) -> None:
  """`InputError` for a value no run can train with, before anything is built: a count below 1
  (`POSITIVE_KEYS`), a drop probability outside [0, 1) (`members.DROPOUT_KEYS`; 1 would drop everything), a
  learning rate that is not a finite number ≥ 0 (0 trains nothing, which a test of the initial parameters
  uses)."""
  require_counts(config, POSITIVE_KEYS)
  for key in members_lib.DROPOUT_KEYS:
    if not 0.0 <= config.get(key, 0.0) < 1.0:
      raise InputError(f"{key} is a drop probability, in [0, 1); not {config[key]!r}.")
  if not (math.isfinite(config.learning_rate) and config.learning_rate >= 0):
    raise InputError(f"learning_rate must be a finite number ≥ 0, not {config.learning_rate!r}.")


class LMTask:
  """A language model on a corpus's train/valid/test streams (see the module docstring): `trainer.Task`. With
  `config.members` or `config.member_values` (`wt_jax.members`), K models in one program: the state gains a leading
  member axis, and every per-lane result is member k's."""

  def __init__(self, config, corpus):
    if config.test_params not in ("final", "best"):
      raise InputError(f"Unknown test_params {config.test_params!r}; expected 'final' or 'best'.")
    if corpus.vocab_size != config.vocab_size:
      raise InputError(f"config.vocab_size={config.vocab_size} but the corpus has {corpus.vocab_size} "
                       f"types; set --config.vocab_size={corpus.vocab_size}.")
    B, T = config.batch_size, config.bptt
    if config.train_max_tokens:  # train on a prefix of the training stream (Inan et al. Section 6.2)
      if config.train_max_tokens < B * T + 1:
        raise InputError(f"train_max_tokens={config.train_max_tokens} is less than one batch (B·T+1 = "
                         f"{B * T + 1} tokens).")
      corpus = dataclasses.replace(corpus, train=corpus.train[:config.train_max_tokens])
    if config.eval_max_tokens:  # smoke runs of big models: evaluate on a prefix of valid and test only
      corpus = dataclasses.replace(corpus, valid=corpus.valid[:config.eval_max_tokens],
                                   test=corpus.test[:config.eval_max_tokens])
    config = softmax.resolve(config, corpus.train)  # a class-factored softmax's bins, from the training counts
    self.config, self.corpus = config, corpus
    self.group = members_lib.parse(config)  # None: one model
    if self.group:  # each member's config as a run alone resolves it
      self.group = members_lib.Members(tuple(softmax.resolve(c, corpus.train) for c in self.group.configs),
                                       self.group.varying)
    self.members = self.group.size if self.group else 0
    self.lane_configs = list(self.group.configs) if self.group else [config]
    for c in self.lane_configs:
      check_ranges(c)
    template = self.group.template() if self.group else config  # the structure every lane's program has
    self.model = models.build(template)
    self.dp = parallel.DataParallel.create(num_devices=config.num_devices, members=self.members,
                                           member_devices=config.member_devices)  # the batch split over devices
    self.dp.check_batch(B)
    self.num_devices = self.dp.num_devices
    self.train = batching.lm_windows(corpus.train, B, T)
    self.steps_per_epoch, self.num_epochs, self.max_steps = len(self.train), config.num_epochs, config.max_steps
    self.tokens_per_step = B * T
    self.selection = ("valid_ppl", "min")
    self.eval_window = eval_lib.make_eval_window(self.model)
    self.tx = optim.make_optimizer(template, self.steps_per_epoch)
    keys = [trainer.run_keys(c.seed) for c in self.lane_configs]
    self.init_keys, self.step_keys = [k[0] for k in keys], [k[1] for k in keys]
    counts = softmax.counts(corpus.train, config.vocab_size)
    self.step_fn = (make_member_train_step(self.group, self.steps_per_epoch, jnp.stack(self.step_keys), self.dp,
                                           counts) if self.group else
                    train_step_for(config, self.model, self.tx, self.step_keys[0], self.dp, counts))

  def write_run_files(self, folder, resumed: bool) -> None:
    """<folder>/vocab.txt: the vocabulary, one word per line in id order (row i of the embeddings is word i), so
    the folder alone is enough to export or analyse the run (`wt_jax.export`). At a resume (`resumed`) the file is
    compared with this corpus's vocabulary: another list (a corpus of the same size whose words differ) stops the
    run with one line, since the checkpoint's rows would go on training as other words; a lost file is written
    again."""
    path = folder / vocab_lib.FILE
    if resumed and path.exists():
      vocab_lib.check_file(path, self.corpus.vocab.words, self.config.dataset)
    else:
      vocab_lib.write_file(path, self.corpus.vocab.words)

  def _initial(self, config, key):
    """One lane's state before its first step, on the default device: random parameters from `key`, or converted
    ones (`config.init_from`, `wt_jax.convert`)."""
    state = jax.jit(lambda k: initial_state(config, self.model, self.tx, k))(key)
    if config.init_from:
      params = convert.load_init(config.init_from, like=jax.device_get(state["params"]))
      params = tying.constrain_embedding_rows(params, config.words.row_norm)
      state = {**state, "params": params, "opt_state": self.tx.init(params)}
    return state

  def init_state(self):
    """Each lane from its own seed, placed by the mesh: one model replicated (every process computes the same
    parameters from the seed), or the members stacked along the member axis."""
    states = [self._initial(c, k) for c, k in zip(self.lane_configs, self.init_keys)]
    if not self.group:
      return self.start_epoch(self.dp.replicate(states[0]), 1)
    state = {**members_lib.stack([jax.device_get(s) for s in states]),
             members_lib.DIVERGED: -np.ones(self.members, np.int32)}
    return self.start_epoch({key: self.dp.put(v, member_state_sharding(self.dp)[key]) for key, v in state.items()}, 1)

  def start_epoch(self, state, epoch):
    carry = self.model.initial_carry(self.config.batch_size)
    if not self.group:
      return {**state, "carry": self.dp.shard_batch(carry, models.CARRY_BATCH_AXIS)}
    carry = jax.tree_util.tree_map(lambda x: np.broadcast_to(x, (self.members, *x.shape)), carry)
    return {**state, "carry": self.dp.put(carry, self.dp.member_sharding(models.CARRY_BATCH_AXIS))}

  def batches(self, epoch, start):
    for pos in range(start, self.steps_per_epoch):
      yield self.dp.shard_batch((self.train.x[pos], self.train.y[pos])), 1

  def train_step(self, state, batch):
    return self.step_fn(state, *batch)

  def train_metrics(self, sums, step, lane: int = 0):
    c, steps = self.lane_configs[lane], max(sums.get("steps", 0.0), 1.0)
    epoch = (step - 1) // self.steps_per_epoch + 1  # the epoch of the step just taken
    shown = {"train_ppl": eval_lib.perplexity(sums.get("nll", 0.0), int(sums.get("tokens", 0))),
             "lr": optim.epoch_lr(epoch, c.learning_rate, c.lr_decay, c.decay_after_epoch)
                   * (min(1.0, step / c.warmup_steps) if c.warmup_steps else 1.0)}
    # gradient norms and rows reached: the mean over the epoch's steps so far
    return {**shown, **{k: v / steps for k, v in sums.items() if k.startswith(("norm/", "rows/"))}}

  def _ppls(self, params, stream, batch_size, bptt, drop_remainder) -> list[float]:
    """Each lane's perplexity on `stream` (`lm_eval.evaluate`, the members in one program)."""
    out = eval_lib.evaluate(self.model, self.eval_window, params, stream, batch_size, bptt,
                            drop_remainder=drop_remainder, dp=self.dp, members=self.members)
    return out["ppl"] if self.group else [out["ppl"]]

  def validate(self, state, epoch):
    c = self.config
    return [{"valid_ppl": ppl} for ppl in self._ppls(state["params"], self.corpus.valid, c.eval_batch_size, c.bptt,
                                                       True)]

  def final(self, state, best_state, lanes, sums):
    """Each lane's results: the test protocol (`lm_eval.test_perplexities`) on its tested parameters (the final
    ones, or its best by validation with `test_params='best'`), its last train and valid perplexity."""
    c = self.config
    use_best = [c.test_params == "best" and best_state is not None and lane["best_epoch"] is not None
                for lane in lanes]
    params = state["params"]
    if any(use_best):
      params = (best_state["params"] if not self.group else
                members_lib.select(np.asarray(use_best), best_state["params"], params))
    tests = eval_lib.test_perplexities(c, self.model, self.eval_window, params, self.corpus.test,
                                       [jax.random.fold_in(k, 2**31 - 1) for k in self.step_keys], self.dp,
                                       group=self.group)
    step = int(np.max(jax.device_get(state["step"])))
    ended = [bool(lane["history"]) and lane["history"][-1]["step"] == step for lane in lanes]
    valid = ([None] * len(lanes) if all(ended) else  # stopped mid-epoch (max_steps): validate here
             [v["valid_ppl"] for v in self.validate(state, None)])
    train_eval = ([None] * len(lanes) if not c.eval_train else  # the training text read as validation is
                  self._ppls(params, self.corpus.train[:c.eval_max_tokens] if c.eval_max_tokens else self.corpus.train,
                             c.eval_batch_size, c.bptt, True))
    out = []
    for k, lane in enumerate(lanes):
      last = lane["history"][-1] if ended[k] else {
          "train_ppl": eval_lib.perplexity(sums[k]["nll"], int(sums[k]["tokens"])) if sums[k].get("tokens")
                       else float("nan"), "valid_ppl": valid[k]}
      tested = (f"best (epoch {lane['best_epoch']})" if use_best[k] else
                "final (test_params='best', but no epoch has ended yet)" if c.test_params == "best" else "final")
      out.append({**self._results(self.lane_configs[k], lane, step, last["train_ppl"], last["valid_ppl"], tested,
                                  tests[k]), **({"train_ppl_eval": train_eval[k]} if c.eval_train else {})})
    return out

  def _results(self, c, lane, step, train_ppl, valid_ppl, tested, test) -> dict:
    return {"task": "lm", "dataset": c.dataset, "model": c.model, "tying": c.words.mode,
            "softmax": softmax.kind_of(c), "softmax_settings": softmax.settings(c), "train_ppl": train_ppl,
            "train_ppl_from": softmax.TRAIN_NLL[softmax.kind_of(c)], "valid_ppl": valid_ppl, **test,
            "eval_max_tokens": c.eval_max_tokens or None,  # None: the whole valid and test sets
            "train_max_tokens": c.train_max_tokens or None,  # None: the whole training set
            "matmul_precision": c.matmul_precision,  # float32 matmuls: backend default, or exact (float32)
            "scan_unroll": getattr(self.model, "unroll", None),  # time steps per loop trip (True: all; speed only)
            "test_params": tested,  # 'final' parameters (Zaremba/Press & Wolf) or 'best' by valid (RHN)
            "best_valid_ppl": lane["best"],
            "train_tokens_per_s": step * self.tokens_per_step / max(lane["train_s"], 1e-9)}


def fit(config, corpus, workdir: str | Path) -> dict:
  """Train `config` on `corpus` (train/valid/test streams), writing everything under `workdir`; every
  float32 matmul of the run (train steps and evaluation) at `config.matmul_precision`. Returns the results
  (with `config.members` or `member_values`: the members' summary, `run_results.members_summary`)."""
  with precision.matmul_precision(config.matmul_precision):
    task = LMTask(config, corpus)
    return trainer.run(task, task.config, workdir)  # (task.config: with what LMTask derived from the corpus)
