"""Training loop for the attention NMT model (`wt_jax.models.nmt`), on the machinery the LMs use: optax
(global-norm clipping, then Adadelta as DL4MT or Adam), the data-parallel helper, orbax checkpoints,
JSON-lines metrics and curves.

    fit_nmt(config, data, workdir) → results (also <workdir>/results.json)

`data` is {'train'|'valid'|'test': (source sentences, target sentences)} of raw text. The joint
BPE model is learned on the training text of both sides (wt_jax.data.subwords) and kept in the workdir,
so a resumed run, and decoding later, use the same one. The cost of a batch is DL4MT's: target NLL summed
over each sentence, averaged over the sentences. After every epoch: validation perplexity and greedy
validation BLEU; the `best` checkpoint is the one with the best greedy validation BLEU. At the end the best
parameters decode the validation and test sets with beam search; BLEU is sacrebleu's (default 13a
tokenisation, mixed case) of the detokenised output against the raw references. The run resumes from its
last finished epoch.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging

from wt_jax import decode, parallel, tying
from wt_jax.data import subwords as sw_lib
from wt_jax.data import translation as tr
from wt_jax.models import nmt
from wt_jax.train import loop as lm_loop
from wt_jax.train import metrics as metrics_lib
from wt_jax.train.checkpoint import Checkpoints

SPLITS = ("train", "valid", "test")


def make_optimizer(config) -> optax.GradientTransformation:
  """Global-norm clipping, then 'adadelta' (DL4MT: ρ = 0.95, ε = 1e-6, step scale 1) or 'adam'."""
  if config.optimizer == "adadelta":
    opt = optax.adadelta(config.learning_rate, rho=config.adadelta_rho, eps=config.adadelta_eps)
  elif config.optimizer == "adam":
    opt = optax.adam(config.learning_rate)
  else:
    raise ValueError(f"Unknown optimizer {config.optimizer!r}; expected 'adadelta' or 'adam'.")
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
    raise ValueError(f"Unknown output_bias_init {output_bias_init!r}; expected 'uniform' or 'log_unigram'.")

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


def decode_max_len(src_len: int, cap: int) -> int:
  """Longest output for a padded source of `src_len` positions: 2·src_len + 10, at most `cap`."""
  return min(2 * src_len + 10, cap)


class Translator:
  """Jit-compiled greedy / beam decoding of id sequences, batched and sharded over `dp`'s devices."""

  def __init__(self, model, subwords: sw_lib.Subwords, dp: parallel.DataParallel, batch_size: int,
               max_len_cap: int = 128, buckets=tr.DEFAULT_BUCKETS):
    self.sw, self.dp, self.B, self.buckets = subwords, dp, batch_size, buckets
    rows = dp.batch_sharding(0)

    def run(params, src, beam, alpha):
      L = decode_max_len(src.shape[1], max_len_cap)
      if beam <= 1:
        return decode.greedy(model, params, src, L)[0]
      return decode.beam_search(model, params, src, beam, L, alpha)[0]

    self._run = jax.jit(run, static_argnums=(2, 3), in_shardings=(dp.replicated, rows), out_shardings=rows)

  def ids(self, params, src_ids: list[np.ndarray], beam: int = 1, length_alpha: float = 1.0) -> list[np.ndarray]:
    out: list = [None] * len(src_ids)
    for b in tr.eval_batches(src_ids, src_ids, self.B, self.buckets):
      toks = np.asarray(jax.device_get(self._run(params, self.dp.shard_batch(b.src), beam, length_alpha)))
      for r, i in enumerate(b.index):
        if i >= 0:
          out[i] = toks[r]
    return out

  def text(self, params, src_ids, beam: int = 1, length_alpha: float = 1.0) -> list[str]:
    return [self.sw.decode(t, "target") for t in self.ids(params, src_ids, beam, length_alpha)]


def bleu(hypotheses: list[str], references: list[str]) -> tuple[float, str]:
  """sacrebleu corpus BLEU (default: 13a tokenisation, mixed case, exp smoothing) and its signature."""
  from sacrebleu.metrics import BLEU
  metric = BLEU()
  return float(metric.corpus_score(hypotheses, [references]).score), str(metric.get_signature())


def evaluate_nll(eval_fn, params, src, tgt, batch_size: int, dp, buckets=tr.DEFAULT_BUCKETS) -> dict:
  total, tokens = 0.0, 0
  for b in tr.eval_batches(src, tgt, batch_size, buckets):
    nll, n = eval_fn(params, *dp.shard_batch((b.src, b.tgt_in, b.tgt_out)))
    total += float(nll)
    tokens += int(n)
  return {"nll": total, "tokens": tokens, "ppl": lm_loop.perplexity(total, tokens)}


def fit_nmt(config, data: dict, workdir: str | Path) -> dict:
  t_start = time.time()
  versions = lm_loop._versions()  # taken now: the code this process runs, even if the checkout changes later
  workdir = Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  nmt.check_tying(config.tying)
  for split in SPLITS:
    if split not in data or not data[split][0]:
      raise ValueError(f"The translation data has no {split!r} sentences (splits: {', '.join(data)}).")
  joint = config.joint_vocab or config.tying == "three_way"
  if config.tying == "three_way" and not config.joint_vocab:
    logging.info("three_way tying: using one joint vocabulary for source and target.")
  src_train, tgt_train = data["train"]
  if sw_lib.Subwords.exists(workdir):
    subwords = sw_lib.Subwords.load(workdir)
    if subwords.joint != joint:
      raise ValueError(f"{workdir} holds a {'joint' if subwords.joint else 'separate'}-vocabulary subword "
                       f"model but this config wants {'joint' if joint else 'separate'} vocabularies; "
                       f"use a new --workdir.")
  else:
    subwords = sw_lib.Subwords.learn(src_train, tgt_train, config.bpe_vocab_size, joint)
    if parallel.is_writer():
      subwords.save(workdir)
  table1 = sw_lib.overlap(subwords.model, src_train, tgt_train)
  ids = {s: (subwords.encode(a, "source"), subwords.encode(b, "target")) for s, (a, b) in data.items()}
  train_src, train_tgt = tr.filter_long(*ids["train"], config.max_len)
  if not train_src:
    raise ValueError(f"No training pair has both sides within max_len={config.max_len} subwords.")
  V_src, V_tgt = len(subwords.source), len(subwords.target)
  model = nmt.from_config(config, V_src, V_tgt)
  B = config.batch_size
  dp = parallel.DataParallel.create(num_devices=config.num_devices)
  dp.check_batch(B)
  tx = make_optimizer(config)

  init_key, dropout_key = jax.random.split(jax.random.key(config.seed))
  state = init_state(model, tx, init_key, config.get("output_bias_init", "uniform"), train_tgt, dp)
  num_params = tying.count_params(state["params"])
  step_fn = make_train_step(model, tx, dropout_key, dp)
  rows = dp.batch_sharding(0)
  eval_fn = jax.jit(lambda p, s, ti, to: batch_nll(model, p, s, ti, to)[:2],
                    in_shardings=(dp.replicated, rows, rows, rows), out_shardings=dp.replicated)
  buckets = tuple(config.buckets)
  translator = Translator(model, subwords, dp, config.eval_batch_size, config.decode_max_len, buckets)
  ckpts = Checkpoints(workdir / "checkpoints")
  writer = metrics_lib.MetricsWriter(workdir / "metrics.jsonl") if parallel.is_writer() else None
  meta = {"epoch": 0, "history": [], "train_s": 0.0, "best_bleu": -1.0, "best_epoch": 0}
  if ckpts.latest_step() is not None:
    state, meta = ckpts.restore("last", state)
    logging.info("Resumed after epoch %d (step %d).", meta["epoch"], int(state["step"]))
  n_batches = tr.num_train_batches(len(train_src), B)
  logging.info("%s: tying %s, %s parameters; vocabularies %d (source) / %d (target)%s; %d training pairs "
               "(%d dropped by max_len=%d), %d batches per epoch; %d device(s).", config.name, config.tying,
               f"{num_params:,}", V_src, V_tgt, " (joint)" if joint else "", len(train_src),
               len(ids["train"][0]) - len(train_src), config.max_len, n_batches, dp.num_devices)
  val_src, val_tgt = ids["valid"]
  val_refs = data["valid"][1]

  for epoch in range(meta["epoch"] + 1, config.num_epochs + 1):
    rng = np.random.default_rng([config.seed, epoch])
    t0, nll_sum, tok_sum, pending = time.time(), 0.0, 0, []
    for i, b in enumerate(tr.train_batches(train_src, train_tgt, B, rng, buckets)):
      state, out = step_fn(state, *dp.shard_batch((b.src, b.tgt_in, b.tgt_out)))
      pending.append(out)
      if (i + 1) % config.log_every == 0 or i + 1 == n_batches:
        for nll, n in jax.device_get(pending):
          nll_sum, tok_sum = nll_sum + float(nll), tok_sum + int(n)
        pending = []
        if not np.isfinite(nll_sum):
          raise lm_loop.NonFiniteLossError(
              f"The training loss became non-finite in epoch {epoch} (before step {int(state['step'])}); the "
              f"last checkpoint (after epoch {meta['epoch']}) is kept. Lower the learning rate or clip_norm.")
        tok_s = tok_sum / max(time.time() - t0, 1e-9)
        if writer:
          writer.write(kind="train", epoch=epoch, step=int(state["step"]),
                       train_ppl=lm_loop.perplexity(nll_sum, tok_sum), target_tokens_per_s=tok_s)
        logging.info("epoch %d batch %d/%d train ppl %.2f  %.0f target tok/s", epoch, i + 1, n_batches,
                     lm_loop.perplexity(nll_sum, tok_sum), tok_s)
    train_s = time.time() - t0
    valid = evaluate_nll(eval_fn, state["params"], val_src, val_tgt, config.eval_batch_size, dp, buckets)
    val_bleu, _ = bleu(translator.text(state["params"], val_src), val_refs)
    record = {"epoch": epoch, "step": int(state["step"]), "train_ppl": lm_loop.perplexity(nll_sum, tok_sum),
              "valid_ppl": valid["ppl"], "valid_bleu_greedy": val_bleu, "train_s": train_s,
              "target_tokens_per_s": tok_sum / max(train_s, 1e-9)}
    meta["history"].append(record)
    meta["epoch"], meta["train_s"] = epoch, meta["train_s"] + train_s
    if writer:
      writer.write(kind="epoch", **record)
    logging.info("epoch %d: train ppl %.2f, valid ppl %.2f, valid BLEU (greedy) %.2f, %.0f s", epoch,
                 record["train_ppl"], valid["ppl"], val_bleu, train_s)
    if val_bleu > meta["best_bleu"]:
      meta["best_bleu"], meta["best_epoch"] = val_bleu, epoch
      ckpts.save("best", int(state["step"]), state, meta)
    ckpts.save("last", int(state["step"]), state, meta)

  # Final evaluation with the best parameters (by greedy validation BLEU).
  if ckpts.latest_step("best") is not None:
    best_state, _ = ckpts.restore("best", state)
  else:
    best_state = state
  params = best_state["params"]
  results = {"config": config.name, "tying": config.tying, "src_lang": config.src_lang,
             "tgt_lang": config.tgt_lang, "num_params": num_params, "joint_vocab": joint,
             "src_vocab": V_src, "tgt_vocab": V_tgt, "bpe_vocab_size": config.bpe_vocab_size,
             "subword_overlap": table1, "epochs": meta["epoch"], "best_epoch": meta["best_epoch"],
             "beam": config.beam_size, "length_alpha": config.length_alpha, "history": meta["history"]}
  for key in ("valid", "test"):
    s_ids, t_ids = ids[key]
    t0 = time.time()
    hyps = translator.text(params, s_ids, config.beam_size, config.length_alpha)
    score, signature = bleu(hyps, data[key][1])
    results[f"{key}_bleu"] = score
    results[f"{key}_decode_s"] = time.time() - t0
    results[f"{key}_ppl"] = evaluate_nll(eval_fn, params, s_ids, t_ids, config.eval_batch_size, dp, buckets)["ppl"]
    results["bleu_signature"] = signature
    if parallel.is_writer():
      (workdir / f"{key}.hyp.txt").write_text("".join(h + "\n" for h in hyps))
    logging.info("%s BLEU %.2f (beam %d, %s), ppl %.2f", key, score, config.beam_size, signature,
                 results[f"{key}_ppl"])
  results.update(train_s=meta["train_s"], wall_s=time.time() - t_start, num_devices=dp.num_devices,
                 host=lm_loop._host(), versions=versions)
  if parallel.is_writer():
    (workdir / "results.json").write_text(json.dumps(results, indent=2))
    if config.plot:
      metrics_lib.plot_curves(workdir / "metrics.jsonl", workdir / "curves.png", title=config.name)
  ckpts.close()
  return results
