"""Language-model training: every LM of `wt_jax.models` on a word-level corpus, on the shared skeleton.

    fit(config, corpus, workdir) → results dict (also <workdir>/results.json)

The config is checked once (`check`); the model is `models.build(config)`, the cost `losses.make_lm_cost(config)`,
the optimiser `optim.make_optimizer`; the train step (`make_train_step`): forward over a [B, T] window, cost,
gradients, optax update. The recurrent state ("carry") is part of the training state: carried across windows, reset
at each epoch, checkpointed, so a resumed run ends with the same numbers. Validation every epoch; the test protocol
is `lm_eval.test_perplexities`; checkpoints, resume, signals and the non-finite policy are `trainer`'s.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from typing import Callable

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
from etils import epath

import wt_jax.convert as convert
import wt_jax.files as files
import wt_jax.losses as losses
import wt_jax.models as models
import wt_jax.parallel as parallel
import wt_jax.precision as precision
import wt_jax.softmax as softmax
import wt_jax.tying as tying
import wt_jax.members as members_lib
from wt_jax.data import batching, text_corpus
from wt_jax.data import vocab as vocab_lib
from wt_jax.errors import InputError
import wt_jax.lm_eval as eval_lib
from wt_jax.train import members_run, optim, trainer


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
  and applies the word matrix itself. sums: this step's {'nll': Σ NLL, 'tokens', 'steps': 1}, the gradient's global
  norm (before clipping) and, per embedding matrix, its gradient's norm and the rows it reaches ('rows/grad/…':
  Press & Wolf's Section 3). Dropout's key is fold_in(step_key, step), the cost's fold_in of that. With `dp`: compiled
  for that mesh, x, y and the carry sharded along the batch, the rest replicated; the cost is written for the global
  batch, so the gradient equals the single-device one (XLA adds the all-reduce).
  """
  step = train_step_body(model, tx, cost, step_key)
  if dp is None:
    return jax.jit(step, donate_argnums=(0,))
  rep, rows = dp.replicated, dp.batch_sharding(0)
  state_sharding = {"params": rep, "opt_state": rep, "step": rep, "carry": dp.batch_sharding(models.CARRY_BATCH_AXIS)}
  return jax.jit(step, donate_argnums=(0,), in_shardings=(state_sharding, rows, rows),
                 out_shardings=(state_sharding, rep))


def initial_state(config, model, tx, init_key: jax.Array) -> dict:
  """{'params', 'opt_state', 'step', 'carry'} before the first step (on the default device)."""
  params = models.init_params(model, config, init_key)
  return {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32),
          "carry": model.initial_carry(config.batch_size)}


# Keys that count something, ≥ 1 for any run (a 0 divides by zero in the batching or builds no layer).
POSITIVE_KEYS = ("vocab_size", "hidden_size", "num_layers", "batch_size", "bptt", "eval_batch_size", "num_epochs")


def check(config) -> None:
  """Every value of a language-model config that no run can train with, refused in one line (`InputError`) before
  anything is built: the one place the config is checked (`models.build`, the models, `losses.make_lm_cost` and
  `optim.make_optimizer` trust it). Each refusal says what it expects."""
  for key, value, known in (
      ("model", config.model, sorted(models.REGISTRY)), ("words.mode", config.words.mode, tying.MODES),
      ("optimizer", config.optimizer, optim.OPTIMIZERS), ("test_params", config.test_params, ("final", "best")),
      ("softmax.kind", config.softmax.kind, softmax.KINDS), ("compute_dtype", config.compute_dtype, precision.COMPUTE),
      ("matmul_precision", config.matmul_precision, precision.MATMUL_PRECISIONS)):
    if value not in known:
      raise InputError(f"Unknown {key} {value!r}; expected one of {', '.join(known)}.")
  if config.words.init_scale and config.model not in ("lstm_lm", "transformer_lm"):
    raise InputError(f"words.init_scale is only implemented for lstm_lm and transformer_lm, not {config.model!r}; "
                     "leave it at 0.")
  if config.words.input_scale and config.model != "transformer_lm":
    raise InputError(f"words.input_scale is only implemented for transformer_lm, not {config.model!r}; leave it off.")
  for key in POSITIVE_KEYS:
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise InputError(f"{key} must be an integer ≥ 1, not {value!r}.")
  for key in members_lib.DROPOUT_KEYS:
    if not 0.0 <= config.get(key, 0.0) < 1.0:
      raise InputError(f"{key} is a drop probability, in [0, 1); not {config[key]!r}.")
  if not (math.isfinite(config.learning_rate) and config.learning_rate >= 0):
    raise InputError(f"learning_rate must be a finite number ≥ 0, not {config.learning_rate!r}.")
  if config.weight_decay_mode not in ("decoupled", "loss"):
    raise InputError(f"Unknown weight_decay_mode {config.weight_decay_mode!r}; expected 'decoupled' (p ← (p + u)(1 − "
                     "wd) after each step, Gal / Press & Wolf) or 'loss' (wd·½‖θ‖² added to the cost, Zilly et al.).")
  al, s = config.al, config.softmax
  if al.alpha < 0 or al.ce_weight < 0:
    raise InputError(f"al.alpha and al.ce_weight must be ≥ 0, not {al.alpha} and {al.ce_weight}.")
  if al.alpha and (al.tau <= 0 or al.embedding not in ("input", "output")):
    raise InputError(f"al.tau must be positive (not {al.tau}) and al.embedding 'input' (Inan's L) or 'output' (not "
                     f"{al.embedding!r}).")
  if s.kind in ("sampled", "nce") and s.num_samples < 1:
    raise InputError(f"softmax.num_samples must be ≥ 1, not {s.num_samples}.")
  if s.kind != "full" and al.alpha:
    raise InputError("The augmented loss (al.alpha > 0) compares full distributions over the vocabulary; train it "
                     "with softmax.kind='full'.")
  if s.kind != "full" and config.model == "nnlm":
    raise InputError("softmax.kind other than 'full' needs a model whose logits are the output layer's alone; nnlm "
                     "adds direct connections: use lstm_lm, bd_lstm_lm, rhn_lm, lbl or transformer_lm.")
  if s.kind == "nce" and s.nce_start_normalised and not config.words.output_bias:
    raise InputError(softmax.NCE_NEEDS_BIAS)
  if config.scan_unroll < 0:
    raise InputError(f"scan_unroll must be ≥ 0 (0: automatic), got {config.scan_unroll}.")
  if config.warmup_steps < 0:
    raise InputError(f"warmup_steps must be ≥ 0 (0: no warm-up), not {config.warmup_steps}.")


def resolve(config, corpus):
  """(config, corpus) for a task: `check`ed, then completed from the corpus — a `text` corpus's vocabulary size in
  place of the cap `vocab_size`, a class-factored softmax's bins from the training counts (`softmax.resolve`) — and
  the corpus cut to `train_max_tokens` and `eval_max_tokens`. The config returned is the run's (run.json)."""
  if config.dataset == "text" and corpus.vocab_size != config.vocab_size:  # (vocab_size was the cap: the run's is
    config = config.copy_and_resolve_references()                          # the vocabulary it got)
    config.vocab_size = corpus.vocab_size
  check(config)
  if corpus.vocab_size != config.vocab_size:
    raise InputError(f"config.vocab_size={config.vocab_size} but the corpus has {corpus.vocab_size} "
                     f"types; set --config.vocab_size={corpus.vocab_size}.")
  if config.train_max_tokens:  # train on a prefix of the training stream (Inan et al. Section 6.2)
    if config.train_max_tokens < config.batch_size * config.bptt + 1:
      raise InputError(f"train_max_tokens={config.train_max_tokens} is less than one batch (B·T+1 = "
                       f"{config.batch_size * config.bptt + 1} tokens).")
    corpus = dataclasses.replace(corpus, train=corpus.train[:config.train_max_tokens])
  if config.eval_max_tokens:  # smoke runs of big models: evaluate on a prefix of valid and test only
    corpus = dataclasses.replace(corpus, valid=corpus.valid[:config.eval_max_tokens],
                                 test=corpus.test[:config.eval_max_tokens])
  return (softmax.resolve(config, corpus.train) if config.softmax.kind == "class" else config), corpus


class LMTask:
  """A language model on a corpus's train/valid/test streams (see the module docstring): `trainer.Task`."""

  member_runs = ()  # one model

  def __init__(self, config, corpus):
    if config.members or config.member_values:
      raise InputError(f"{config.name} asks for members: `fit` trains them (`MembersTask`), not `LMTask`.")
    config, corpus = resolve(config, corpus)
    self.setup(config, corpus, config, parallel.data_parallel(config.num_devices))  # (None: one device)
    self.init_key, self.step_key = trainer.run_keys(config.seed)
    self.step_fn = self.train_step = make_train_step(self.model, self.tx, losses.make_lm_cost(config, self.counts),
                                                     self.step_key, self.dp)

  def setup(self, config, corpus, template, dp: parallel.DataParallel | None) -> None:
    """What the task has whatever its parameters: the model and optimiser of `template`'s structure, the training
    windows (the batch split over `dp`'s devices; None: one device), the evaluation window, the training counts."""
    self.config, self.corpus, self.dp = config, corpus, dp
    if dp:
      dp.check_batch(config.batch_size)
    self.num_devices, self.model = dp.num_devices if dp else 1, models.build(template)
    self.train = batching.lm_windows(corpus.train, config.batch_size, config.bptt)
    self.steps_per_epoch, self.num_epochs, self.max_steps = len(self.train), config.num_epochs, config.max_steps
    self.tokens_per_step = config.batch_size * config.bptt
    self.selection = ("valid_ppl", "min")
    self.eval_window = eval_lib.make_eval_window(self.model)
    self.tx = optim.make_optimizer(template, self.steps_per_epoch)
    self.counts = softmax.counts(corpus.train, config.vocab_size) if config.softmax.kind != "full" else None

  def write_run_files(self, folder, resumed: bool) -> None:
    """<folder>/vocab.txt (row i of the embeddings is word i) and a sentencepiece corpus's tokenizer.model: the
    folder alone exports, scores and samples. At a resume (`resumed`) another list (same size, other words) stops
    the run with one line (the checkpoint's rows would train on as other words); a lost file is written again."""
    path = folder / vocab_lib.FILE
    if resumed and path.exists():
      vocab_lib.check_file(path, self.corpus.vocab.words, self.config.dataset)
    else:
      vocab_lib.write_file(path, self.corpus.vocab.words)
    model, path = getattr(self.corpus, "model", None), folder / text_corpus.TOKENIZER_FILE
    if model is not None and resumed and path.exists() and path.read_bytes() != model:
      raise InputError(f"{path} is another subword model than this corpus's: the checkpoint's rows are other "
                       "pieces. Resume with the text and settings the run started with.")
    if model is not None:
      files.write_whole(path, model)

  def initial(self, config, key):
    """A model's state before its first step, on the default device: random parameters from `key`, or converted
    ones (`config.init_from`, `wt_jax.convert`)."""
    state = jax.jit(functools.partial(initial_state, config, self.model, self.tx))(key)
    if config.init_from:
      params = convert.load_init(config.init_from, like=jax.device_get(state["params"]))
      if config.words.row_norm:
        params = tying.constrain_embedding_rows(params, config.words.row_norm)
      state = {**state, "params": params, "opt_state": self.tx.init(params)}
    return state

  def init_state(self):
    """The model from its seed, replicated over a mesh (every process computes the same parameters from it)."""
    state = self.initial(self.config, self.init_key)
    return self.start_epoch(self.dp.replicate(state) if self.dp else state, 1)

  def start_epoch(self, state, epoch):
    carry = self.model.initial_carry(self.config.batch_size)
    return {**state, "carry": self.dp.shard_batch(carry, models.CARRY_BATCH_AXIS) if self.dp else carry}

  def batches(self, epoch, start):
    for pos in range(start, self.steps_per_epoch):
      batch = self.train.x[pos], self.train.y[pos]
      yield (self.dp.shard_batch(batch) if self.dp else batch), 1

  def train_metrics(self, sums, step, config=None):
    """The progress numbers of the epoch's `sums` at `step`, the learning rate by `config`'s schedule (default the
    task's)."""
    c, steps = config or self.config, max(sums.get("steps", 0.0), 1.0)
    epoch = (step - 1) // self.steps_per_epoch + 1  # the epoch of the step just taken
    shown = {"train_ppl": eval_lib.perplexity(sums.get("nll", 0.0), int(sums.get("tokens", 0))),
             "lr": optim.epoch_lr(epoch, c.learning_rate, c.lr_decay, c.decay_after_epoch)
                   * (min(1.0, step / c.warmup_steps) if c.warmup_steps else 1.0)}
    # gradient norms and rows reached: the mean over the epoch's steps so far
    return {**shown, **{k: v / steps for k, v in sums.items() if k.startswith(("norm/", "rows/"))}}

  def ppl(self, params, stream, batch_size, bptt, drop_remainder):
    """The perplexity of `params` on `stream` (`lm_eval.evaluate`)."""
    return eval_lib.evaluate(self.model, self.eval_window, params, stream, batch_size, bptt,
                             drop_remainder=drop_remainder, dp=self.dp)["ppl"]

  def validate(self, state, epoch):  # (a members task's: [K])
    c = self.config
    return {"valid_ppl": self.ppl(state["params"], self.corpus.valid, c.eval_batch_size, c.bptt, True)}

  def train_eval(self, params):
    """The training text read as validation is (`eval_train`; a prefix with `eval_max_tokens`), else None."""
    c, train = self.config, self.corpus.train
    return (self.ppl(params, train[:c.eval_max_tokens] if c.eval_max_tokens else train, c.eval_batch_size, c.bptt,
                     True) if c.eval_train else None)

  def final(self, state, best_state, meta, sums):
    """The results: the test protocol (`lm_eval.test_perplexities`) on the tested parameters (the final ones, or
    the best by validation with `test_params='best'`), the last train and valid perplexity."""
    use_best = self.config.test_params == "best" and best_state is not None and meta["best_epoch"] is not None
    params = (best_state if use_best else state)["params"]
    test, = eval_lib.test_perplexities(self.config, self.model, self.eval_window, params, self.corpus.test,
                                       [mc_key(self.step_key)], self.dp)
    valid = None if ended(meta) else self.validate(state, None)["valid_ppl"]
    return self.results(self.config, meta, sums, use_best, test, valid, self.train_eval(params))

  def results(self, c, meta, sums, use_best, test, valid, train_eval) -> dict:
    """The LM's results.json keys (`c` its config, `meta` its record, `valid` its perplexity if stopped mid-epoch)."""
    last = meta["history"][-1] if ended(meta) else {
        "train_ppl": eval_lib.perplexity(sums["nll"], int(sums["tokens"])) if sums.get("tokens") else float("nan"),
        "valid_ppl": valid}
    tested = (f"best (epoch {meta['best_epoch']})" if use_best else
              "final (test_params='best', but no epoch has ended yet)" if c.test_params == "best" else "final")
    return {"task": "lm", "dataset": c.dataset, "model": c.model, "tying": c.words.mode,
            "softmax": softmax.kind_of(c), "softmax_settings": softmax.settings(c), "train_ppl": last["train_ppl"],
            "train_ppl_from": softmax.TRAIN_NLL[softmax.kind_of(c)], "valid_ppl": last["valid_ppl"], **test,
            "eval_max_tokens": c.eval_max_tokens or None,  # None: the whole valid and test sets
            "train_max_tokens": c.train_max_tokens or None,  # None: the whole training set
            "matmul_precision": c.matmul_precision,  # float32 matmuls: backend default, or exact (float32)
            "scan_unroll": getattr(self.model, "unroll", None),  # time steps per loop trip (True: all; speed only)
            "test_params": tested,  # 'final' parameters (Zaremba/Press & Wolf) or 'best' by valid (RHN)
            "best_valid_ppl": meta["best"],
            "train_tokens_per_s": meta["step"] * self.tokens_per_step / max(meta["train_s"], 1e-9),
            **({"train_ppl_eval": train_eval} if c.eval_train else {}),
            **text_corpus.measures(getattr(self.corpus, "info", None), test["test_ppl"], c.eval_max_tokens)}


def ended(meta: dict) -> bool:
  """Whether the run's record ends with a whole epoch (else it stopped mid-epoch: `max_steps`)."""
  return bool(meta["history"]) and meta["history"][-1]["step"] == meta["step"]


def mc_key(step_key: jax.Array) -> jax.Array:
  """The MC dropout key of the test protocol, from the run's step key."""
  return jax.random.fold_in(step_key, 2**31 - 1)


def make_member_train_step(group: members_lib.Members, steps_per_epoch: int, step_keys: jax.Array,
                           dp: parallel.DataParallel, counts=None):
  """The members' step, jit-compiled for `dp`'s [members, data] mesh, the state donated: step(state[K, …],
  x[B, T], y[B, T]) → (state, sums[K]). Member k's model, cost and optimiser are built inside the program
  from its values (`Members.bind`), its dropout and cost keys from step_keys[k]: what `LMTask` builds
  for a run of member k's config alone, vmapped."""

  def body(config, step_key):
    return train_step_body(models.build(config), optim.make_optimizer(config, steps_per_epoch),
                              losses.make_lm_cost(config, counts), step_key)

  state_sharding, rows = members_run.state_sharding(dp), dp.batch_sharding(0)
  return jax.jit(members_lib.vmap_step(body, group, step_keys), donate_argnums=(0,),
                 in_shardings=(state_sharding, rows, rows), out_shardings=(state_sharding, dp.replicated))


class MembersTask(LMTask):
  """`LMTask` for the K members of `config` (`members.parse`): the state stacked, each number a [K] array."""

  def __init__(self, config, corpus, workdir=None):
    config, corpus = resolve(config, corpus)
    group = members_lib.parse(config)  # each member's config as a run alone resolves it
    self.group = members_lib.Members(tuple(resolve(c, corpus)[0] for c in group.configs), group.varying)
    self.size = self.group.size
    dp = parallel.DataParallel.create(num_devices=config.num_devices, members=self.size,
                                      member_devices=config.member_devices)
    self.setup(config, corpus, self.group.template(), dp)  # (the structure every member's program has)
    keys = [trainer.run_keys(c.seed) for c in self.group.configs]
    self.init_keys, self.step_keys = [k[0] for k in keys], [k[1] for k in keys]
    self.step_fn = self.train_step = make_member_train_step(self.group, self.steps_per_epoch,
                                                            jnp.stack(self.step_keys), dp, self.counts)
    self.member_runs = tuple((epath.Path(workdir) / members_run.MEMBERS_DIR / str(k) if workdir else None, c)
                             for k, c in enumerate(self.group.configs))  # (no workdir: a task `fit` does not run)

  def init_state(self):
    """Each member from its own seed, stacked along the member axis and placed by the mesh."""
    states = [jax.device_get(self.initial(c, k)) for c, k in zip(self.group.configs, self.init_keys)]
    state = {**members_lib.stack(states), members_lib.DIVERGED: -np.ones(self.size, np.int32)}
    sharding = members_run.state_sharding(self.dp)
    return self.start_epoch({key: self.dp.put(v, sharding[key]) for key, v in state.items()}, 1)

  def start_epoch(self, state, epoch):
    carry = self.model.initial_carry(self.config.batch_size)
    carry = jax.tree_util.tree_map(lambda x: np.broadcast_to(x, (self.size, *x.shape)), carry)
    return {**state, "carry": self.dp.put(carry, self.dp.member_sharding(models.CARRY_BATCH_AXIS))}

  def ppl(self, params, stream, batch_size, bptt, drop_remainder):
    """Each member's perplexity on `stream`, in one program (`lm_eval.evaluate`)."""
    return eval_lib.evaluate(self.model, self.eval_window, params, stream, batch_size, bptt,
                             drop_remainder=drop_remainder, dp=self.dp, members=self.size)["ppl"]

  def write_run_files(self, folder, resumed: bool) -> None:
    for member_folder, _ in self.member_runs:  # (each member's folder is a run folder; the run's has none)
      super().write_run_files(member_folder, resumed)

  def train_metrics(self, sums, step):
    """Each member's progress numbers, by its own config (`LMTask.train_metrics`), as [K] arrays."""
    each = [LMTask.train_metrics(self, {key: v[k] for key, v in sums.items()}, step, c)
            for k, c in enumerate(self.group.configs)]
    return {key: np.array([e[key] for e in each]) for key in each[0]}

  def final(self, state, best_state, meta, sums):
    """Each member's results (`LMTask.results`), tested on its final parameters or its best by validation, written
    in its folder with its checkpoints (`members_run.write_members`) → the members' summary."""
    metas = [members_run.member_meta(meta, k) for k in range(self.size)]
    use_best = [self.config.test_params == "best" and best_state is not None and m["best_epoch"] is not None
                for m in metas]
    params = members_lib.select(np.asarray(use_best), best_state["params"], state["params"]) if any(use_best) else \
        state["params"]
    tests = eval_lib.test_perplexities(self.config, self.model, self.eval_window, params, self.corpus.test,
                                       [mc_key(k) for k in self.step_keys], self.dp, group=self.group)
    valid = ([None] * self.size if all(ended(m) for m in metas) else  # stopped mid-epoch: validate here
             list(self.validate(state, None)["valid_ppl"]))
    train_eval = self.train_eval(params) or [None] * self.size
    return members_run.write_members(self, state, best_state, metas, [
        self.results(c, m, m["epoch_sums"], *args) for c, m, *args in zip(self.group.configs, metas, use_best, tests,
                                                                           valid, train_eval)])


def fit(config, corpus, workdir: str | Path) -> dict:
  """Train `config` (one model, or the members of `config.members` / `member_values`: `MembersTask`) on `corpus`
  (train/valid/test streams) in `workdir`, every float32 matmul at `config.matmul_precision` → its results."""
  with jax.default_matmul_precision(precision.MATMUL_PRECISIONS[config.matmul_precision]):
    task = (MembersTask(config, corpus, workdir) if config.members or config.member_values else
            LMTask(config, corpus))
    return trainer.run(task, task.config, workdir)  # (task.config: with what LMTask derived from the corpus)
