"""Translation training: the attention NMT model (`wt_jax.models.nmt`) on the shared skeleton
(`wt_jax.train.trainer`: checkpoints with mid-epoch resume, signals, the non-finite policy, results.json).
Optax: global-norm clipping, then Adadelta as DL4MT or Adam.

    fit_nmt(config, data, workdir) → results (also <workdir>/results.json)

`data` is {'train'|'valid'|'test': (source sentences, target sentences)} of raw text. The joint
BPE model is learned on the training text of both sides (wt_jax.data.subwords) and kept in the workdir,
so a resumed run, and decoding later, use the same one. The cost of a batch is DL4MT's: target NLL summed
over each sentence, averaged over the sentences. After every epoch: validation perplexity and greedy
validation BLEU; the `best` checkpoint is the one with the best greedy validation BLEU. At the end the best
parameters decode the validation and test sets with beam search; BLEU is sacrebleu's (default 13a
tokenisation, mixed case) of the detokenised output against the raw references.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from etils import epath

import jax
import jax.numpy as jnp
import numpy as np
import optax

import wt_jax.decode as decode
import wt_jax.files as files
import wt_jax.lm_eval as lm_eval
import wt_jax.parallel as parallel
from wt_jax.data import subwords as sw_lib
from wt_jax.data import translation as tr
from wt_jax.errors import InputError, require_counts
from wt_jax.models import nmt
from wt_jax.train import trainer

log = logging.getLogger(__name__)

SPLITS = ("train", "valid", "test")


def make_optimizer(config) -> optax.GradientTransformation:
  """Global-norm clipping, then 'adadelta' (DL4MT: ρ = 0.95, ε = 1e-6, step scale 1) or 'adam'."""
  if config.optimizer == "adadelta":
    opt = optax.adadelta(config.learning_rate, rho=config.adadelta_rho, eps=config.adadelta_eps)
  elif config.optimizer == "adam":
    opt = optax.adam(config.learning_rate)
  else:
    raise InputError(f"Unknown optimizer {config.optimizer!r}; expected 'adadelta' or 'adam'.")
  return optax.chain(optax.clip_by_global_norm(config.clip_norm), opt)


def log_unigram_bias(targets: list[np.ndarray], vocab_size: int) -> np.ndarray:
  """Output-bias start values: log relative frequencies of the training target tokens (each sentence + </s>),
  add-one smoothed and centred. → [V] float32.

  With DL4MT's small initialisation (weights N(0, 0.01²), embeddings ±0.01) and zero-ish biases the first
  thing the model must learn is the unigram distribution. Adam learns it fastest by driving the decoder
  state and the deep output into tanh saturation (a constant ±1 vector times the output embedding acts as
  a bias with a 256× larger step), after which their gradients vanish and training stays at unigram
  perplexity (BUILD_NOTES §10). Starting the bias at the unigram log-probabilities removes that pressure.
  """
  counts = np.bincount(np.concatenate([np.append(t, sw_lib.EOS) for t in targets]),
                       minlength=vocab_size)[:vocab_size].astype(np.float64) + 1.0
  logp = np.log(counts / counts.sum())
  return (logp - logp.mean()).astype(np.float32)


def init_state(model, tx, key, output_bias_init: str, train_targets: list[np.ndarray], dp) -> dict:
  """The training state {params, opt_state, step} before the first step, replicated over dp's devices.

  output_bias_init: 'uniform' keeps the model's own U(−s, s) output bias; 'log_unigram' replaces it by the
  centred log unigram distribution of `train_targets` (`log_unigram_bias`), so the first steps need not learn
  the word frequencies. The other parameters do not depend on the choice.
  """
  if output_bias_init not in ("uniform", "log_unigram"):
    raise InputError(f"Unknown output_bias_init {output_bias_init!r}; expected 'uniform' or 'log_unigram'.")

  def init(key):
    dummy = jnp.full((1, 4), sw_lib.EOS, jnp.int32)
    params = model.init(key, dummy, dummy)["params"]
    if output_bias_init == "log_unigram":
      bias = log_unigram_bias(train_targets, model.tgt_vocab)
      params = {**params, "words": {**params["words"], "out_bias": jnp.asarray(bias)}}
    return {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32)}

  return jax.jit(init, out_shardings=dp.replicated)(key)


def batch_nll(model, params, src, tgt_in, tgt_out, train: bool = False, key=None):
  """(Σ NLL over target tokens, number of target tokens, number of real sentences) of one batch."""
  rngs = {"dropout": key} if train else None
  logits = model.apply({"params": params}, src, tgt_in, train=train, rngs=rngs)
  nll = optax.softmax_cross_entropy_with_integer_labels(logits, tgt_out)
  mask = tgt_out != sw_lib.PAD
  return jnp.sum(jnp.where(mask, nll, 0.0)), jnp.sum(mask), jnp.sum(mask[:, 0])


def make_train_step(model, tx, dropout_key, dp: parallel.DataParallel):
  """step(state, src, tgt_in, tgt_out) → (state, (nll_sum, tokens)); jit-compiled for dp's mesh."""

  def step(state, src, tgt_in, tgt_out):
    key = jax.random.fold_in(dropout_key, state["step"])

    def cost(params):
      nll, tokens, sentences = batch_nll(model, params, src, tgt_in, tgt_out, True, key)
      return nll / jnp.maximum(sentences, 1), (nll, tokens)

    (_, (nll, tokens)), grads = jax.value_and_grad(cost, has_aux=True)(state["params"])
    updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
    new = {"params": optax.apply_updates(state["params"], updates), "opt_state": opt_state,
           "step": state["step"] + 1}
    return new, (nll, tokens)

  rep, rows = dp.replicated, dp.batch_sharding(0)
  return jax.jit(step, donate_argnums=(0,), in_shardings=(rep, rows, rows, rows), out_shardings=(rep, rep))


def evaluate_nll(eval_fn, params, src, tgt, batch_size: int, dp, buckets=tr.DEFAULT_BUCKETS) -> dict:
  total, tokens = 0.0, 0
  for b in tr.eval_batches(src, tgt, batch_size, buckets):
    nll, n = eval_fn(params, *dp.shard_batch((b.src, b.tgt_in, b.tgt_out)))
    total += float(nll)
    tokens += int(n)
  return {"nll": total, "tokens": tokens, "ppl": lm_eval.perplexity(total, tokens)}


class NMTTask:
  """Translation on {'train'|'valid'|'test': (source sentences, target sentences)} (see the module doc)."""

  member_runs = ()  # one model (`trainer.Task`)

  def __init__(self, config, data: dict, workdir: str | Path):
    require_counts(config, ("bpe_vocab_size", "beam_size", "max_len", "batch_size", "num_epochs"))
    nmt.check_tying(config.tying)
    for split in SPLITS:
      if split not in data or not data[split][0]:
        raise InputError(f"The translation data has no {split!r} sentences (splits: {', '.join(data)}).")
    workdir = epath.Path(workdir)
    joint = config.joint_vocab or config.tying == "three_way"
    if config.tying == "three_way" and not config.joint_vocab:
      log.info("three_way tying: using one joint vocabulary for source and target.")
    src_train, tgt_train = data["train"]
    subwords = sw_lib.Subwords.of_run(workdir, src_train, tgt_train, config.bpe_vocab_size, joint,
                                      write=parallel.is_writer())
    self.table1 = sw_lib.overlap(subwords.model, src_train, tgt_train)
    self.ids = {s: (subwords.encode(a, "source"), subwords.encode(b, "target")) for s, (a, b) in data.items()}
    self.train_src, self.train_tgt = tr.filter_long(*self.ids["train"], config.max_len)
    if not self.train_src:
      raise ValueError(f"No training pair has both sides within max_len={config.max_len} subwords.")
    self.config, self.data, self.workdir, self.joint = config, data, workdir, joint
    self.V_src, self.V_tgt = len(subwords.source), len(subwords.target)
    self.model = nmt.from_config(config, self.V_src, self.V_tgt)
    B = config.batch_size
    self.dp = parallel.DataParallel.create(num_devices=config.num_devices)
    self.dp.check_batch(B)
    self.num_devices = self.dp.num_devices
    self.tx = make_optimizer(config)
    self.init_key, step_key = trainer.run_keys(config.seed)
    self.step_fn = make_train_step(self.model, self.tx, step_key, self.dp)
    rows = self.dp.batch_sharding(0)
    self.eval_fn = jax.jit(lambda p, s, ti, to: batch_nll(self.model, p, s, ti, to)[:2],
                           in_shardings=(self.dp.replicated, rows, rows, rows), out_shardings=self.dp.replicated)
    self.buckets = tuple(config.buckets)
    self.translator = decode.Translator(self.model, subwords, self.dp, config.eval_batch_size, config.decode_max_len,
                                 self.buckets)
    self.num_epochs, self.max_steps, self.tokens_per_step = config.num_epochs, 0, None
    self.steps_per_epoch = tr.num_train_batches(len(self.train_src), B)
    self.selection = ("valid_bleu_greedy", "max")  # DL4MT keeps the best model by validation BLEU
    log.info("%s: tying %s; vocabularies %d (source) / %d (target)%s; %d training pairs (%d dropped by "
                 "max_len=%d), %d batches per epoch; %d device(s).", config.name, config.tying, self.V_src,
                 self.V_tgt, " (joint)" if joint else "", len(self.train_src),
                 len(self.ids["train"][0]) - len(self.train_src), config.max_len, self.steps_per_epoch,
                 self.dp.num_devices)

  def init_state(self):
    return init_state(self.model, self.tx, self.init_key, self.config.output_bias_init, self.train_tgt, self.dp)

  def start_epoch(self, state, epoch):
    return state

  def write_run_files(self, folder, resumed: bool) -> None:
    """Nothing more: the subword model the folder needs is written when it is learned (`__init__`)."""

  def batches(self, epoch, start):
    rng = np.random.default_rng([self.config.seed, epoch])
    for i, b in enumerate(tr.train_batches(self.train_src, self.train_tgt, self.config.batch_size, rng,
                                           self.buckets)):
      if i >= start:
        yield self.dp.shard_batch((b.src, b.tgt_in, b.tgt_out)), 1

  def train_step(self, state, *batch):
    state, (nll, tokens) = self.step_fn(state, *batch)
    return state, {"nll": nll, "tokens": tokens}

  def train_metrics(self, sums, step):
    return {"train_ppl": lm_eval.perplexity(sums.get("nll", 0.0), int(sums.get("tokens", 0))),
            "target_tokens": sums.get("tokens", 0.0)}

  def validate(self, state, epoch):
    c = self.config
    val_src, val_tgt = self.ids["valid"]
    valid = evaluate_nll(self.eval_fn, state["params"], val_src, val_tgt, c.eval_batch_size, self.dp, self.buckets)
    val_bleu, _ = decode.bleu(self.translator.text(state["params"], val_src), self.data["valid"][1])
    return {"valid_ppl": valid["ppl"], "valid_bleu_greedy": val_bleu}

  def final(self, state, best_state, meta, sums):
    """Beam search with the best parameters (by greedy validation BLEU) on valid and test."""
    c = self.config
    params = (best_state or state)["params"]
    results = {"task": "nmt", "tying": c.tying, "src_lang": c.src_lang, "tgt_lang": c.tgt_lang,
               "joint_vocab": self.joint, "src_vocab": self.V_src, "tgt_vocab": self.V_tgt,
               "bpe_vocab_size": c.bpe_vocab_size, "subword_overlap": self.table1, "beam": c.beam_size,
               "length_alpha": c.length_alpha}
    for key in ("valid", "test"):
      s_ids, t_ids = self.ids[key]
      t0 = time.time()
      hyps = self.translator.text(params, s_ids, c.beam_size, c.length_alpha)
      score, signature = decode.bleu(hyps, self.data[key][1])
      results[f"{key}_bleu"] = score
      results[f"{key}_decode_s"] = time.time() - t0
      results[f"{key}_ppl"] = evaluate_nll(self.eval_fn, params, s_ids, t_ids, c.eval_batch_size, self.dp,
                                           self.buckets)["ppl"]
      results["bleu_signature"] = signature
      if parallel.is_writer():
        files.write_whole(self.workdir / f"{key}.hyp.txt", "".join(h + "\n" for h in hyps))
      log.info("%s BLEU %.2f (beam %d, %s), ppl %.2f", key, score, c.beam_size, signature,
                   results[f"{key}_ppl"])
    return results


def fit_nmt(config, data: dict, workdir: str | Path) -> dict:
  """Train and evaluate `config` on `data`, writing everything under `workdir` (see the module doc)."""
  return trainer.run(NMTTask(config, data, workdir), config, workdir)
