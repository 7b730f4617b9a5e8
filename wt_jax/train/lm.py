"""Language-model training: every LM of `wt_jax.models` on a word-level corpus, on the shared skeleton.

    fit(config, corpus, workdir) → results dict (also <workdir>/results.json)

The model comes from `wt_jax.models.build(config)`, the cost from `wt_jax.losses.make_lm_cost(config)` and
the optimiser (with any parameter constraint) from `wt_jax.train.optim.make_optimizer`; the train step
(`make_train_step`) knows nothing else: forward over a [B, T] window (the model scans over time), cost,
gradients, optax update. The recurrent state ("carry") is part of the training state: carried across
windows, reset at the start of each epoch, checkpointed with the rest, so a resumed run ends with the same
numbers. Validation every epoch (batched, `config.eval_batch_size` streams); the test protocol is
`wt_jax.train.evaluate.test_perplexities`. Checkpoints, resume, signals and the non-finite policy are the
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
from wt_jax.errors import InputError, require_counts
from wt_jax.train import evaluate as eval_lib
from wt_jax.train import optim, runtime, trainer


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
  """A language model on a corpus's train/valid/test streams (see the module docstring). With
  `config.members` or `config.member_values` (`wt_jax.members`), K models in one program: the state gains a
  leading member axis, `members` = K, and validation, the test protocol and the results are per member."""

  def __init__(self, config, corpus):
    check_ranges(config)
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
    counts = softmax.counts(corpus.train, config.vocab_size)
    self.group = members_lib.parse(config)  # None: one model
    self.members = self.group.size if self.group else 0
    if self.group:  # each member's config as a run alone resolves and checks it
      self.group = members_lib.Members(tuple(softmax.resolve(c, corpus.train) for c in self.group.configs),
                                       self.group.varying)
      for c in self.group.configs:
        models.build(c), losses.make_lm_cost(c, counts), optim.make_optimizer(c, 1)
    self.model = models.build(self.group.template() if self.group else config)
    self.dp = parallel.DataParallel.create(num_devices=config.num_devices, members=self.members,
                                           member_devices=config.member_devices)  # the batch split over devices
    self.dp.check_batch(B)
    self.num_devices = self.dp.num_devices
    self.train = batching.lm_windows(corpus.train, B, T)
    self.steps_per_epoch, self.num_epochs, self.max_steps = len(self.train), config.num_epochs, config.max_steps
    self.tokens_per_step = B * T
    self.selection = ("valid_ppl", "min")
    self.eval_window = eval_lib.make_eval_window(self.model)
    if not self.group:
      self.tx = optim.make_optimizer(config, self.steps_per_epoch)
      self.init_key, self.step_key = trainer.run_keys(config.seed)
      self.step_fn = train_step_for(config, self.model, self.tx, self.step_key, self.dp, counts)
      return
    self.tx = optim.make_optimizer(self.group.template(), self.steps_per_epoch)  # the members' state tree
    keys = [trainer.run_keys(seed) for seed in self.group.seeds]
    self.init_keys, self.step_keys = [k[0] for k in keys], jnp.stack([k[1] for k in keys])
    self.step_fn = make_member_train_step(self.group, self.steps_per_epoch, self.step_keys, self.dp, counts)

  def member_config(self, k: int):
    """Member k's whole config: what a run of it alone would be given (`wt_jax.members`)."""
    return self.group.configs[k]

  def write_run_files(self, workdir, resumed: bool = False) -> None:
    """<workdir>/vocab.txt: the vocabulary, one word per line in id order (row i of the embeddings is word
    i), so the folder alone is enough to export or analyse the run (`wt_jax.export`). At a resume (`resumed`)
    the file is compared with this corpus's vocabulary: another list (a corpus of the same size whose words
    differ, e.g. another copy or version of it) stops the run with one line, since the checkpoint's rows would
    go on training as other words; a lost file is written again."""
    text = "".join(f"{w}\n" for w in self.corpus.vocab.words)
    path = workdir / "vocab.txt"
    if resumed and path.exists():
      saved = path.read_bytes().decode("utf-8", errors="replace").splitlines()
      if saved != list(self.corpus.vocab.words):
        at = next((i for i, (a, b) in enumerate(zip(saved, self.corpus.vocab.words)) if a != b),
                  min(len(saved), len(self.corpus.vocab.words)))
        was = repr(saved[at]) if at < len(saved) else "nothing"
        now = repr(self.corpus.vocab.words[at]) if at < len(self.corpus.vocab.words) else "nothing"
        raise InputError(f"{path} lists another vocabulary than this corpus's ({self.config.dataset}): word {at} "
                         f"was {was}, is {now}. Resume with the corpus the run started with, or move vocab.txt "
                         f"aside if this corpus is the one to go on with.")
      return
    runtime.write_whole(path, text)

  def _init_one(self, config, key):
    state = jax.jit(lambda k: initial_state(config, self.model, self.tx, k))(key)
    if config.init_from:  # converted parameters (`wt_jax.convert`) instead of random ones
      params = convert.load_init(config.init_from, like=jax.device_get(state["params"]))
      params = tying.constrain_embedding_rows(params, config.words.row_norm)
      state = {**state, "params": params, "opt_state": self.tx.init(params)}
    return state

  def init_state(self):
    if self.group:  # each member from its own seed, stacked, the member axis over the devices
      states = [jax.device_get(self._init_one(c, k)) for c, k in zip(self.group.configs, self.init_keys)]
      state = {**members_lib.stack(states), members_lib.DIVERGED: -np.ones(self.members, np.int32)}
      state = {key: self.dp.put(v, member_state_sharding(self.dp)[key]) for key, v in state.items()}
      return self.start_epoch(state, 1)
    # Built on the devices, replicated (every process computes the same parameters from the seed).
    init = jax.jit(lambda k: initial_state(self.config, self.model, self.tx, k), out_shardings=self.dp.replicated)
    state = init(self.init_key)
    if self.config.init_from:  # converted parameters (`wt_jax.convert`) instead of random ones
      params = convert.load_init(self.config.init_from, like=jax.device_get(state["params"]))
      params = tying.constrain_embedding_rows(params, self.config.words.row_norm)
      state = self.dp.replicate({**state, "params": params, "opt_state": self.tx.init(params)})
    return self.start_epoch(state, 1)  # (the carry placed along the batch)

  def start_epoch(self, state, epoch):
    carry = self.model.initial_carry(self.config.batch_size)
    if self.group:
      carry = jax.tree_util.tree_map(lambda x: np.broadcast_to(x, (self.members, *x.shape)), carry)
      return {**state, "carry": self.dp.put(carry, self.dp.member_sharding(models.CARRY_BATCH_AXIS))}
    return {**state, "carry": self.dp.shard_batch(carry, models.CARRY_BATCH_AXIS)}

  def batches(self, epoch, start):
    for pos in range(start, self.steps_per_epoch):
      yield self.dp.shard_batch((self.train.x[pos], self.train.y[pos])), 1

  def train_step(self, state, batch):
    return self.step_fn(state, *batch)

  def train_metrics(self, sums, step, member: int | None = None):
    c, steps = self.config if member is None else self.member_config(member), max(sums.get("steps", 0.0), 1.0)
    epoch = (step - 1) // self.steps_per_epoch + 1  # the epoch of the step just taken
    shown = {"train_ppl": eval_lib.perplexity(sums.get("nll", 0.0), int(sums.get("tokens", 0))),
             "lr": optim.epoch_lr(epoch, c.learning_rate, c.lr_decay, c.decay_after_epoch)
                   * (min(1.0, step / c.warmup_steps) if c.warmup_steps else 1.0)}
    # gradient norms and rows reached: the mean over the epoch's steps so far
    return {**shown, **{k: v / steps for k, v in sums.items() if k.startswith(("norm/", "rows/"))}}

  def _evaluate(self, params, stream, batch_size, bptt, drop_remainder):
    return eval_lib.evaluate(self.model, self.eval_window, params, stream, batch_size, bptt,
                             drop_remainder=drop_remainder, dp=self.dp, members=self.members)

  def validate(self, state, epoch):
    c = self.config
    valid = self._evaluate(state["params"], self.corpus.valid, c.eval_batch_size, c.bptt, True)
    if self.group:
      return [{"valid_ppl": ppl} for ppl in valid["ppl"]]
    return {"valid_ppl": valid["ppl"]}

  def final(self, state, best_state, meta, sums):
    """The task's results (the test protocol on the tested parameters); for members, a list: member k's from
    `meta[k]` (its history and best epoch) and `sums[k]`."""
    if not self.group:
      return self._final(state, best_state, meta, sums, self.config, self.step_key)
    c, K = self.config, self.members
    params = state["params"]
    use_best = [c.test_params == "best" and best_state is not None and m["best_epoch"] is not None for m in meta]
    if any(use_best):
      params = members_lib.select(np.asarray(use_best), best_state["params"], params)
    tests = eval_lib.test_perplexities(c, self.model, self.eval_window, params, self.corpus.test,
                                       [jax.random.fold_in(k, 2**31 - 1) for k in self.step_keys], self.dp,
                                       group=self.group)
    out = []
    for k in range(K):
      history, step = meta[k]["history"], int(jax.device_get(state["step"])[k])
      if history and history[-1]["step"] == step:
        train_ppl, valid_ppl = history[-1]["train_ppl"], history[-1]["valid_ppl"]
      else:  # stopped mid-epoch (max_steps): evaluate here
        train_ppl = (eval_lib.perplexity(sums[k]["nll"], int(sums[k]["tokens"])) if sums[k].get("tokens")
                     else float("nan"))
        valid_ppl = None
      tested = (f"best (epoch {meta[k]['best_epoch']})" if use_best[k] else
                "final (test_params='best', but no epoch has ended yet)" if c.test_params == "best" else "final")
      out.append(self._results(self.member_config(k), meta[k], step, train_ppl, valid_ppl, tested, tests[k]))
    if any(r["valid_ppl"] is None for r in out):
      valid = self.validate(state, None)
      for r, v in zip(out, valid):
        r["valid_ppl"] = v["valid_ppl"] if r["valid_ppl"] is None else r["valid_ppl"]
    if c.eval_train:  # the training text as validation is read: no dropout, eval_batch_size streams
      train_text = self.corpus.train[:c.eval_max_tokens] if c.eval_max_tokens else self.corpus.train
      ppl = self._evaluate(params, train_text, c.eval_batch_size, c.bptt, True)["ppl"]
      for r, v in zip(out, ppl):
        r["train_ppl_eval"] = v
    return out

  def _final(self, state, best_state, meta, sums, c, step_key):
    history = meta["history"]
    step = int(state["step"])
    if history and history[-1]["step"] == step:
      train_ppl, valid_ppl = history[-1]["train_ppl"], history[-1]["valid_ppl"]
    else:  # stopped mid-epoch (max_steps): evaluate here
      train_ppl = (eval_lib.perplexity(sums["nll"], int(sums["tokens"])) if sums.get("tokens")
                   else float("nan"))
      valid_ppl = self.validate(state, None)["valid_ppl"]
    params, tested = state["params"], c.test_params
    if c.test_params == "best" and best_state is not None:
      params, tested = best_state["params"], f"best (epoch {meta['best_epoch']})"
    elif c.test_params == "best":
      tested = "final (test_params='best', but no epoch has ended yet)"
    test = eval_lib.test_perplexities(c, self.model, self.eval_window, params, self.corpus.test,
                                      jax.random.fold_in(step_key, 2**31 - 1), self.dp)
    if c.eval_train:  # the training text as validation is read: no dropout, eval_batch_size streams
      train_text = self.corpus.train[:c.eval_max_tokens] if c.eval_max_tokens else self.corpus.train
      test["train_ppl_eval"] = self._evaluate(params, train_text, c.eval_batch_size, c.bptt, True)["ppl"]
    return self._results(c, meta, step, train_ppl, valid_ppl, tested, test)

  def _results(self, c, meta, step, train_ppl, valid_ppl, tested, test) -> dict:
    return {"task": "lm", "dataset": c.dataset, "model": c.model, "tying": c.words.mode,
            "softmax": softmax.kind_of(c), "softmax_settings": softmax.settings(c), "train_ppl": train_ppl,
            "train_ppl_from": softmax.TRAIN_NLL[softmax.kind_of(c)], "valid_ppl": valid_ppl, **test,
            "eval_max_tokens": c.eval_max_tokens or None,  # None: the whole valid and test sets
            "train_max_tokens": c.train_max_tokens or None,  # None: the whole training set
            "matmul_precision": c.matmul_precision,  # float32 matmuls: backend default, or exact (float32)
            "scan_unroll": getattr(self.model, "unroll", None),  # time steps per loop trip (True: all; speed only)
            "test_params": tested,  # 'final' parameters (Zaremba/Press & Wolf) or 'best' by valid (RHN)
            "best_valid_ppl": meta["best"],
            "train_tokens_per_s": step * self.tokens_per_step / max(meta["train_s"], 1e-9)}


def fit(config, corpus, workdir: str | Path) -> dict:
  """Train `config` on `corpus` (train/valid/test streams), writing everything under `workdir`; every
  float32 matmul of the run (train steps and evaluation) at `config.matmul_precision`. Returns the results
  (with `config.members` or `member_values`: the members' summary, `run_results.members_summary`)."""
  with precision.matmul_precision(config.matmul_precision):
    task = LMTask(config, corpus)
    return trainer.run(task, task.config, workdir)  # (task.config: with what LMTask derived from the corpus)
