"""Training loop for word2vec skip-gram (`wt_jax.models.skipgram`), on the same machinery as the LMs:
optax SGD, the data-parallel helper, orbax checkpoints (resumable at epoch ends), JSON-lines metrics.

    fit_skipgram(config, sentences, workdir) → results (also <workdir>/results.json; vocab in vocab.txt)

Each epoch draws its (centre, context) pairs (`wt_jax.data.skipgram`: subsampling, dynamic window) from a
generator seeded by (seed, epoch), shuffles them, and feeds batches of `batch_size` pairs (the last partial
batch is dropped); the step draws `negatives` noise words per pair from unigram^0.75 on the device. The
learning rate falls linearly with the fraction of training done, to lr·1e-4 at the end (word2vec.c's rule,
by pairs instead of words).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging

from wt_jax import parallel
from wt_jax.data import skipgram as sg
from wt_jax.models.skipgram import SkipGram
from wt_jax.train import metrics as metrics_lib
from wt_jax.train.checkpoint import Checkpoints


def make_step(model: SkipGram, tx, noise: jax.Array, negatives: int, dp: parallel.DataParallel):
  """step(state, centers[N], contexts[N], lr, key) → (state, summed loss); jit-compiled for `dp`'s mesh."""

  def step(state, centers, contexts, lr, key):
    neg = jax.random.choice(key, noise.shape[0], (centers.shape[0], negatives), p=noise)
    loss_fn = lambda p: model.apply({"params": p}, centers, contexts, neg, method=model.negative_sampling)
    loss, grads = jax.value_and_grad(loss_fn)(state["params"])
    opt_state = state["opt_state"]
    opt_state.hyperparams["learning_rate"] = lr
    updates, opt_state = tx.update(grads, opt_state, state["params"])
    return {"params": optax.apply_updates(state["params"], updates), "opt_state": opt_state,
            "step": state["step"] + 1}, loss

  rep, rows = dp.replicated, dp.batch_sharding(0)
  return jax.jit(step, donate_argnums=(0,), in_shardings=(rep, rows, rows, rep, rep),
                 out_shardings=(rep, rep))


def learning_rate(base: float, progress: float) -> float:
  """word2vec.c: α = α₀·(1 − progress), never below α₀·1e-4."""
  return base * max(1.0 - progress, 1e-4)


def fit_skipgram(config, sentences: Sequence[Sequence[str]], workdir: str | Path) -> dict:
  t_start = time.time()
  workdir = Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  vocab, counts = sg.build_vocab(sentences, config.min_count)
  ids, sent = sg.encode(sentences, vocab)
  keep = sg.keep_probability(counts, config.sample)
  noise = jnp.asarray(sg.noise_distribution(counts, config.noise_power), jnp.float32)
  V, B = len(vocab), config.batch_size
  dp = parallel.DataParallel.create(num_devices=config.num_devices)
  dp.check_batch(B)
  model = SkipGram(vocab_size=V, dim=config.dim, tying=config.tying)
  tx = optax.inject_hyperparams(optax.sgd)(learning_rate=config.learning_rate)

  def init(key):
    one = jnp.zeros((1,), jnp.int32)
    params = model.init(key, one, one, jnp.zeros((1, 1), jnp.int32))["params"]
    return {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32)}

  init_key, noise_key = jax.random.split(jax.random.key(config.seed))
  state = jax.jit(init, out_shardings=dp.replicated)(init_key)
  step_fn = make_step(model, tx, noise, config.negatives, dp)
  ckpts = Checkpoints(workdir / "checkpoints")
  writer = metrics_lib.MetricsWriter(workdir / "metrics.jsonl") if parallel.is_writer() else None
  meta = {"epoch": 0, "history": [], "train_s": 0.0}
  if ckpts.latest_step() is not None:
    state, meta = ckpts.restore("last", state)
    logging.info("Resumed after epoch %d.", meta["epoch"])
  if parallel.is_writer():
    (workdir / "vocab.txt").write_text("".join(f"{w}\t{c}\n" for w, c in zip(vocab.words, counts)))

  # The number of pairs varies a little between epochs; the schedule uses epoch 1's count for all.
  pairs_per_epoch = len(sg.skipgram_pairs(ids, sent, config.window, np.random.default_rng([config.seed, 1]),
                                          keep)[0])
  batches_per_epoch = pairs_per_epoch // B
  if batches_per_epoch == 0:
    raise ValueError(f"One epoch has {pairs_per_epoch} pairs, fewer than batch_size={B}.")
  total = batches_per_epoch * config.num_epochs
  logging.info("%s: vocabulary %d, %d tokens, ~%d pairs per epoch, %d steps per epoch.", config.name, V,
               len(ids), pairs_per_epoch, batches_per_epoch)
  for epoch in range(meta["epoch"] + 1, config.num_epochs + 1):
    rng = np.random.default_rng([config.seed, epoch])
    centers, contexts = sg.skipgram_pairs(ids, sent, config.window, rng, keep)
    order = rng.permutation(len(centers))
    n = min(len(centers) // B, batches_per_epoch)
    t0, loss_sum = time.time(), 0.0
    losses = []
    for i in range(n):
      idx = order[i * B:(i + 1) * B]
      done = ((epoch - 1) * batches_per_epoch + i) / total
      key = jax.random.fold_in(noise_key, (epoch - 1) * batches_per_epoch + i)
      state, loss = step_fn(state, *dp.shard_batch((centers[idx], contexts[idx])),
                            jnp.float32(learning_rate(config.learning_rate, done)), key)
      losses.append(loss)
      if (i + 1) % config.log_every == 0 or i + 1 == n:
        loss_sum += float(sum(losses))
        losses = []
        pairs_s = (i + 1) * B / max(time.time() - t0, 1e-9)
        if writer:
          writer.write(kind="train", epoch=epoch, step=int(state["step"]), loss_per_pair=loss_sum / ((i + 1) * B),
                       lr=learning_rate(config.learning_rate, done), pairs_per_s=pairs_s)
        logging.info("epoch %d %d/%d loss/pair %.4f  %.0f pairs/s", epoch, i + 1, n,
                     loss_sum / ((i + 1) * B), pairs_s)
    dt = time.time() - t0
    meta["train_s"] += dt
    record = {"epoch": epoch, "loss_per_pair": loss_sum / max(n * B, 1), "pairs": n * B, "seconds": dt,
              "words_per_s": len(ids) / dt}
    meta["history"].append(record)
    meta["epoch"] = epoch
    if writer:
      writer.write(kind="epoch", **record)
    ckpts.save("last", int(state["step"]), state, meta)

  results = {"config": config.name, "tying": config.tying, "vocab_size": V, "tokens": int(len(ids)),
             "dim": config.dim, "num_params": int(sum(x.size for x in jax.tree_util.tree_leaves(state["params"]))),
             "epochs": meta["epoch"], "steps": int(state["step"]), "history": meta["history"],
             "train_s": meta["train_s"],
             "words_per_s": len(ids) * meta["epoch"] / max(meta["train_s"], 1e-9),
             "wall_s": time.time() - t_start, "num_devices": dp.num_devices}
  if parallel.is_writer():
    (workdir / "results.json").write_text(json.dumps(results, indent=2))
  return results
