"""Training loop for word2vec skip-gram (`wt_jax.models.skipgram`), on the same machinery as the LMs:
optax SGD, the data-parallel helper, orbax checkpoints (resumable at epoch ends), JSON-lines metrics.

    fit_skipgram(config, sentences, workdir) → results (also <workdir>/results.json; vocab in vocab.txt)

Each epoch draws its (centre, context) pairs (`wt_jax.data.skipgram`: subsampling, dynamic window) from a
generator seeded by (seed, epoch), shuffles them, and feeds batches of `batch_size` pairs (the last partial
batch is dropped); the step draws `negatives` noise words per pair from unigram^0.75 on the device. The
learning rate falls linearly with the fraction of training done, to lr·1e-4 at the end (word2vec.c's rule,
by pairs instead of words). Speed without changing the arithmetic: `steps_per_call` SGD steps run in one
compiled call (a scan), and `sparse_updates` applies SGD to the touched rows only (see `make_step`).
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
from wt_jax.models.skipgram import SkipGram, negative_sampling_loss
from wt_jax.train import metrics as metrics_lib
from wt_jax.train.checkpoint import Checkpoints


def make_step(model: SkipGram, tx, noise: jax.Array, negatives: int, dp: parallel.DataParallel,
              noise_key: jax.Array, sparse: bool = True):
  """steps(state, centers[K, N], contexts[K, N], lrs[K], first) → (state, losses[K]): K SGD steps of N pairs
  each in one call (a `lax.scan`, so the K updates are exactly K single steps; K > 1 only saves per-call
  dispatch, which dominates at word2vec's small batches). Step `first + j` draws its negatives with key
  fold_in(noise_key, first + j). jit-compiled for `dp`'s mesh (pairs split over devices).

  `sparse`: apply SGD as word2vec.c does, to the rows the batch touches (gather the rows, differentiate
  `negative_sampling_loss` with respect to them, scatter-add −lr·gradient), instead of optax's update of
  the dense [V, D] gradient. Plain SGD makes the two the same update (tested); the sparse one skips two
  passes over every matrix per step."""

  def dense_step(state, centers, contexts, lr, key):
    neg = jax.random.choice(key, noise.shape[0], (centers.shape[0], negatives), p=noise)
    loss_fn = lambda p: model.apply({"params": p}, centers, contexts, neg, method=model.negative_sampling)
    loss, grads = jax.value_and_grad(loss_fn)(state["params"])
    opt_state = state["opt_state"]
    opt_state.hyperparams["learning_rate"] = lr
    updates, opt_state = tx.update(grads, opt_state, state["params"])
    return {"params": optax.apply_updates(state["params"], updates), "opt_state": opt_state,
            "step": state["step"] + 1}, loss

  def sparse_step(state, centers, contexts, lr, key):
    neg = jax.random.choice(key, noise.shape[0], (centers.shape[0], negatives), p=noise)
    words = state["params"]["words"]
    out_name = "embedding" if model.tying == "tied" else "out_embedding"
    U, V = words["embedding"], words[out_name]  # the same array when tied
    loss, (g_u, g_pos, g_neg) = jax.value_and_grad(negative_sampling_loss, argnums=(0, 1, 2))(
        U[centers], V[contexts], V[neg])
    V = V.at[contexts].add(-lr * g_pos).at[neg.reshape(-1)].add(-lr * g_neg.reshape(-1, g_neg.shape[-1]))
    # Tied: the input-role rows go into the same leaf, after the output-role ones (all gradients were
    # taken at the old S, so the order does not matter beyond float rounding).
    new = ({"embedding": V.at[centers].add(-lr * g_u)} if model.tying == "tied" else
           {"embedding": U.at[centers].add(-lr * g_u), "out_embedding": V})
    opt_state = state["opt_state"]
    opt_state.hyperparams["learning_rate"] = lr  # (kept in step with the dense path's state)
    return {"params": {**state["params"], "words": new}, "opt_state": opt_state,
            "step": state["step"] + 1}, loss

  step = sparse_step if sparse else dense_step

  def steps(state, centers_KxN, contexts_KxN, lrs_K, first):
    def body(state, xs):
      centers, contexts, lr, j = xs
      return step(state, centers, contexts, lr, jax.random.fold_in(noise_key, first + j))

    js = jnp.arange(lrs_K.shape[0], dtype=jnp.int32)
    return jax.lax.scan(body, state, (centers_KxN, contexts_KxN, lrs_K, js))

  rep, rows = dp.replicated, dp.batch_sharding(1)
  return jax.jit(steps, donate_argnums=(0,), in_shardings=(rep, rows, rows, rep, rep),
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
  step_fn = make_step(model, tx, noise, config.negatives, dp, noise_key, config.get("sparse_updates", True))
  K = max(int(config.get("steps_per_call", 1)), 1)
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
    t0, loss_sum, pending, fetched = time.time(), 0.0, [], 0  # pending: per-step losses not yet on host
    for i0 in range(0, n, K):  # K steps (batches i0 .. i0+k−1) per call
      k = min(K, n - i0)
      idx = order[i0 * B:(i0 + k) * B]
      first = (epoch - 1) * batches_per_epoch + i0
      lrs = [learning_rate(config.learning_rate, (first + j) / total) for j in range(k)]
      state, loss_k = step_fn(state, *dp.shard_batch((centers[idx].reshape(k, B), contexts[idx].reshape(k, B)), 1),
                              jnp.asarray(lrs, jnp.float32), jnp.int32(first))
      pending.append(loss_k)
      logged = [i for i in range(i0, i0 + k) if (i + 1) % config.log_every == 0 or i + 1 == n]
      if not logged:
        continue
      vals = np.concatenate([np.asarray(l, np.float64) for l in pending])  # steps fetched .. i0+k−1
      pending, pairs_s = [], (i0 + k) * B / max(time.time() - t0, 1e-9)
      for i in logged:  # one record per log_every steps, whatever K is
        per_pair = (loss_sum + vals[:i + 1 - fetched].sum()) / ((i + 1) * B)
        if writer:
          writer.write(kind="train", epoch=epoch, step=int(state["step"]) - (i0 + k - 1 - i),
                       loss_per_pair=per_pair, lr=lrs[i - i0], pairs_per_s=pairs_s)
        logging.info("epoch %d %d/%d loss/pair %.4f  %.0f pairs/s", epoch, i + 1, n, per_pair, pairs_s)
      loss_sum += vals.sum()
      fetched = i0 + k
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
