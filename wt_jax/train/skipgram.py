"""word2vec skip-gram training (`wt_jax.models.skipgram`) on the shared skeleton (`wt_jax.train.trainer`):
optax SGD, the data-parallel helper, checkpoints with resume, the non-finite policy, results.json.

    fit_skipgram(config, sentences, workdir) → results (also <workdir>/results.json; vocab in vocab.txt)

Two ways to feed the step (`config.batching`):
- 'pairs': each epoch draws its (centre, context) pairs on the host (`wt_jax.data.skipgram`: subsampling, dynamic
  window) from a generator seeded by (seed, epoch), shuffles them and feeds batches of `batch_size` pairs (the last
  partial batch is dropped); the step draws `negatives` noise words per pair from unigram^0.75 on the device.
- 'windows': each epoch subsamples the text on the host (the same generator) and draws each kept token's window;
  the device reads the kept text in order, `batch_size` centres a step, and forms each centre's window itself
  (`window_blocks`), scoring in word2vec.c's orientation (`models.skipgram.window_loss`): noise words per (slot)
  pair as word2vec.c, or with `shared_negatives` one set a window (BlazingText). On several devices each takes its
  share of a call's text and the changes are summed at the call's end (`make_window_step`).
The learning rate falls linearly with the fraction of training done, to lr·1e-4 at the end (word2vec.c's rule, by
steps instead of words). Speed without changing the arithmetic: `steps_per_call` SGD steps run in one compiled
call (a scan), and `sparse_updates` applies SGD to the touched rows only (see `make_step`).
"""
from __future__ import annotations

import logging
from pathlib import Path

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import PartitionSpec as P

import wt_jax.parallel as parallel
from wt_jax.data import skipgram as sg
from wt_jax.data import vocab as vocab_lib
from wt_jax.errors import InputError, require_counts
from wt_jax.models.skipgram import SkipGram, negative_sampling_loss, window_loss
from wt_jax.train import trainer

log = logging.getLogger(__name__)


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


BLOCK = 8  # centres whose windows one product scores together when they share noise (`window_blocks`; 8 ran
#            fastest of 4, 8 and 16 in one measurement on a 2-core Xeon)


def window_blocks(ids: jax.Array, sentences: jax.Array, b: jax.Array, window: int, block: int):
  """The text around B consecutive centres, ids[B + 2W] and their sentence ids (−1 past the text's ends), each
  centre's half-window b[B] ∈ {1..W}, cut into N = B/G blocks of G = `block` centres → (centres[N, G], rows[N, T],
  inside[N, T, G]), T = G + 2W: each block's text rows (ids, −1 read as 0) and whether row t lies in centre g's
  window — 1 ≤ |t − g − W| ≤ b and in its sentence (word2vec.c's dynamic window: `a` from its random b′ = W − b to
  2W − b′). G = 1 gives each centre its own 2W + 1 rows (the centre's own masked)."""
  W, G = window, block
  at = G * jnp.arange(b.shape[0] // G)[:, None]
  rows, mid = at + jnp.arange(G + 2 * W)[None, :], at + W + jnp.arange(G)[None, :]
  offset = jnp.arange(G + 2 * W)[:, None] - jnp.arange(G)[None, :] - W  # [T, G]
  near = (offset != 0)[None] & (jnp.abs(offset)[None] <= b.reshape(-1, 1, G))
  inside = near & (sentences[rows][:, :, None] == sentences[mid][:, None, :])
  return ids[mid], jnp.maximum(ids[rows], 0), inside


def noise_draw(key: jax.Array, accept: jax.Array, alias: jax.Array, shape: tuple) -> jax.Array:
  """Noise words of `shape` from the alias table (accept[V], alias[V]) of `sg.alias_table`: a uniform word i, kept
  with probability accept[i], else alias[i] — two draws and two gathers a word, where `jax.random.choice` with
  probabilities sums the V of them and searches the sum at every call."""
  pick, keep = jax.random.split(key)
  i = jax.random.randint(pick, shape, 0, accept.shape[0])
  return jnp.where(jax.random.uniform(keep, shape) < accept[i], i, alias[i])


def make_window_step(model: SkipGram, noise: tuple[jax.Array, jax.Array], negatives: int, window: int, shared: bool,
                     noise_key: jax.Array, dp: parallel.DataParallel | None = None):
  """steps(state, ids[C·B + 2W], sentences[C·B + 2W], b[C, B], lrs[C], first) → (state, (losses[C], pairs[C])): C
  SGD steps over C·B consecutive centres of the kept text (the slice around them, −1 past its ends). Each step
  gathers the rows it scores, differentiates `window_loss` with respect to them and scatter-adds −lr·gradient (the
  output role's rows first, then the input role's: one leaf when tied), as `make_step`'s sparse step does for pairs.
  Noise (`noise_draw` from the alias table `noise`): centre i of step first + j draws from key fold_in(noise_key,
  first + j), one set a window (`shared`, scored a block of BLOCK centres at a time) or one a slot (word2vec.c).

  On n > 1 devices of `dp` (XLA:CPU runs host devices on their own cores), device d takes the d-th n-th of the
  call's centres and runs C steps of B/n of them on its own copy of the matrices; the copies' changes are summed
  at the call's end. One step a call is then exactly the one-device step; longer calls let a device's updates
  reach the other's rows only at call ends, as gensim's worker threads share rows without waiting."""
  out_name = "embedding" if model.tying == "tied" else "out_embedding"
  G, K, W = (BLOCK if shared else 1), negatives, window
  n = dp.data_devices if dp else 1

  def step(words, ids, sentences, b, neg, lr):
    centres, rows, inside = window_blocks(ids, sentences, b, W, G)
    neg = neg.reshape(*centres.shape, K) if shared else neg  # [N, G, K] or [B, 2W + 1, K]
    centre = jnp.broadcast_to(centres[..., None], (*neg.shape[:-1], 1))
    outs = jnp.concatenate([centre, neg], axis=-1)  # the centre, then the noise words
    counted = (outs != centre).at[..., 0].set(True)  # (word2vec.c skips a noise word equal to the centre)
    mask = inside[..., None] & counted[:, None] if shared else inside & counted
    U, V = words["embedding"], words[out_name]
    loss, (g_u, g_v) = jax.value_and_grad(window_loss, argnums=(0, 1))(U[rows], V[outs], mask)
    D = U.shape[-1]
    V = V.at[outs.reshape(-1)].add(-lr * g_v.reshape(-1, D))
    U = (V if model.tying == "tied" else U).at[rows.reshape(-1)].add(-lr * g_u.reshape(-1, D))
    return ({"embedding": U} if model.tying == "tied" else {"embedding": U, "out_embedding": V},
            (loss, jnp.sum(inside, dtype=jnp.int32)))

  def steps(state, ids, sentences, b_CxB, lrs_C, first):
    C, B = b_CxB.shape
    Bd, d = B // n, (jax.lax.axis_index(parallel.DATA_AXIS) if n > 1 else 0)
    shape = (B, K) if shared else (B, 2 * W + 1, K)
    neg = jax.vmap(lambda j: noise_draw(jax.random.fold_in(noise_key, first + j), *noise, shape))(jnp.arange(C))
    neg, b = neg.reshape(C * B, *shape[1:]), b_CxB.reshape(-1)

    def body(words, xs):
      lr, j = xs
      cut = lambda x, size: jax.lax.dynamic_slice_in_dim(x, (d * C + j) * Bd, size)
      return step(words, cut(ids, Bd + 2 * W), cut(sentences, Bd + 2 * W), cut(b, Bd), cut(neg, Bd), lr)

    words = state["params"]["words"]
    new, (losses, pairs) = jax.lax.scan(body, words, (lrs_C, jnp.arange(C, dtype=jnp.int32)))
    if n > 1:  # every device started from the same matrices: add up their changes
      new = jax.tree_util.tree_map(lambda w, x: w + jax.lax.psum(x - w, parallel.DATA_AXIS), words, new)
      losses, pairs = jax.lax.psum((losses, pairs), parallel.DATA_AXIS)
    opt_state = state["opt_state"]
    opt_state.hyperparams["learning_rate"] = lrs_C[-1]  # (kept in step with the pairs path's state)
    return ({"params": {**state["params"], "words": new}, "opt_state": opt_state, "step": state["step"] + C},
            (losses, pairs))

  if n > 1:
    steps = jax.shard_map(steps, mesh=dp.mesh, in_specs=P(), out_specs=P(), check_vma=False)  # (equal after psum)
  return jax.jit(steps, donate_argnums=(0,))


def learning_rate(base: float, progress: float) -> float:
  """word2vec.c: α = α₀·(1 − progress), never below α₀·1e-4."""
  return base * max(1.0 - progress, 1e-4)


BATCHINGS = ("pairs", "windows")


class SkipGramTask:
  """Skip-gram with negative sampling on tokenised sentences (see the module docstring)."""

  member_runs = ()  # one model (`trainer.Task`)

  def __init__(self, config, sentences: Sequence[Sequence[str]]):
    require_counts(config, ("dim", "window", "negatives", "min_count", "batch_size", "num_epochs"))
    batching = config.get("batching", "pairs")
    if batching not in BATCHINGS:
      raise InputError(f"Unknown batching {batching!r}; expected one of {', '.join(BATCHINGS)}.")
    self.windows = batching == "windows"
    self.vocab, self.counts = sg.build_vocab(sentences, config.min_count)
    self.ids, self.sent = sg.encode(sentences, self.vocab)
    self.keep = sg.keep_probability(self.counts, config.sample)
    noise = jnp.asarray(sg.noise_distribution(self.counts, config.noise_power), jnp.float32)
    V, B = len(self.vocab), config.batch_size
    self.dp = parallel.DataParallel.create(num_devices=config.num_devices)
    self.dp.check_batch(B)
    if self.windows and config.shared_negatives and B % (self.dp.num_devices * BLOCK):
      raise InputError(f"batch_size={B}: shared noise scores blocks of {BLOCK} centres on each of "
                       f"{self.dp.num_devices} device(s), so it must be a multiple of {self.dp.num_devices * BLOCK}.")
    self.num_devices = self.dp.num_devices
    self.model = SkipGram(vocab_size=V, dim=config.dim, tying=config.tying)
    self.tx = optax.inject_hyperparams(optax.sgd)(learning_rate=config.learning_rate)
    self.init_key, noise_key = trainer.run_keys(config.seed)
    alias = tuple(map(jnp.asarray, sg.alias_table(sg.noise_distribution(self.counts, config.noise_power))))
    self.step_fn = (make_window_step(self.model, alias, config.negatives, config.window, config.shared_negatives,
                                     noise_key, self.dp) if self.windows else
                    make_step(self.model, self.tx, noise, config.negatives, self.dp, noise_key, config.sparse_updates))
    self.K = max(int(config.steps_per_call), 1)
    self.config = config
    # The number of pairs (kept tokens) varies a little between epochs; the schedule uses epoch 1's for all.
    per_epoch = len(self._kept(1)[0]) if self.windows else len(self._pairs(1)[0])
    self.steps_per_epoch = per_epoch // B
    if self.steps_per_epoch == 0:
      raise InputError(f"One epoch has {per_epoch} {'kept tokens' if self.windows else 'pairs'}, fewer than "
                       f"batch_size={B}.")
    self.num_epochs, self.max_steps, self.tokens_per_step = config.num_epochs, 0, B  # (pairs or centres per step)
    self.total = self.steps_per_epoch * config.num_epochs
    self.selection = None  # no validation set: the analyses read the final embeddings
    log.info("%s: vocabulary %d, %d tokens, ~%d %s per epoch, %d steps per epoch.", config.name, V, len(self.ids),
             per_epoch, "kept tokens" if self.windows else "pairs", self.steps_per_epoch)

  def _pairs(self, epoch):
    rng = np.random.default_rng([self.config.seed, epoch])
    return (*sg.skipgram_pairs(self.ids, self.sent, self.config.window, rng, self.keep), rng)

  def _kept(self, epoch):
    """The epoch's kept text (ids, sentence ids) and each kept token's half-window b ∈ {1..window}."""
    rng = np.random.default_rng([self.config.seed, epoch])
    ids, sent = sg.subsample(self.ids, self.sent, self.keep, rng)
    return ids, sent, rng.integers(1, self.config.window + 1, size=len(ids)).astype(np.int32)

  def init_state(self):
    model, tx = self.model, self.tx

    def init(key):
      one = jnp.zeros((1,), jnp.int32)
      params = model.init(key, one, one, jnp.zeros((1, 1), jnp.int32))["params"]
      return {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32)}

    return jax.jit(init, out_shardings=self.dp.replicated)(self.init_key)

  def start_epoch(self, state, epoch):
    return state

  def write_run_files(self, folder, resumed: bool) -> None:
    """<folder>/vocab.txt: each word and its count, in id order (row i of the embeddings is word i)."""
    vocab_lib.write_file(folder / vocab_lib.FILE, self.vocab.words, self.counts)

  def batches(self, epoch, start):
    """K steps (batches i0 .. i0+k−1 of the epoch) per item; at most steps_per_epoch."""
    yield from (self._window_batches if self.windows else self._pair_batches)(epoch, start)

  def _lrs(self, first: int, k: int):
    return jnp.asarray([learning_rate(self.config.learning_rate, (first + j) / self.total) for j in range(k)],
                       jnp.float32)

  def _pair_batches(self, epoch, start):
    B = self.config.batch_size
    centers, contexts, rng = self._pairs(epoch)
    order = rng.permutation(len(centers))
    n = min(len(centers) // B, self.steps_per_epoch)
    for i0 in range(start, n, self.K):
      k = min(self.K, n - i0)
      idx = order[i0 * B:(i0 + k) * B]
      first = (epoch - 1) * self.steps_per_epoch + i0
      batch = (*self.dp.shard_batch((centers[idx].reshape(k, B), contexts[idx].reshape(k, B)), 1),
               self._lrs(first, k), jnp.int32(first))
      yield batch, k

  def _window_batches(self, epoch, start):
    """The kept text of K·B centres with `window` tokens either side (−1 past the text's ends), in text order."""
    B, W = self.config.batch_size, self.config.window
    ids, sent, b = self._kept(epoch)
    pad = np.full(W, -1, np.int32)
    ids, sent = np.concatenate([pad, ids, pad]), np.concatenate([pad, sent, pad])
    n = min(len(b) // B, self.steps_per_epoch)
    for i0 in range(start, n, self.K):
      k = min(self.K, n - i0)
      first = (epoch - 1) * self.steps_per_epoch + i0
      text = slice(i0 * B, (i0 + k) * B + 2 * W)
      yield (ids[text], sent[text], b[i0 * B:(i0 + k) * B].reshape(k, B), self._lrs(first, k), jnp.int32(first)), k

  def train_step(self, state, *batch):
    if self.windows:
      state, (losses_K, pairs_K) = self.step_fn(state, *batch)
      return state, {"loss": jnp.sum(losses_K), "pairs": jnp.sum(pairs_K)}
    state, losses_K = self.step_fn(state, *batch)
    return state, {"loss": jnp.sum(losses_K), "pairs": jnp.asarray(losses_K.shape[0] * self.config.batch_size,
                                                                   jnp.int32)}

  def train_metrics(self, sums, step):
    return {"loss_per_pair": sums.get("loss", 0.0) / max(sums.get("pairs", 0.0), 1.0),
            "lr": learning_rate(self.config.learning_rate, step / self.total)}

  def validate(self, state, epoch):
    return {}

  def final(self, state, best_state, meta, sums):
    epochs = len(meta["history"])
    return {"task": "skipgram", "tying": self.config.tying, "vocab_size": len(self.vocab),
             "tokens": int(len(self.ids)), "dim": self.config.dim,
             "words_per_s": len(self.ids) * epochs / max(meta["train_s"], 1e-9)}


def fit_skipgram(config, sentences: Sequence[Sequence[str]], workdir: str | Path) -> dict:
  """Train `config` on `sentences`, writing everything under `workdir` (vocabulary in vocab.txt)."""
  return trainer.run(SkipGramTask(config, sentences), config, workdir)
