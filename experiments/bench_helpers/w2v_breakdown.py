"""Where a word2vec step's time goes: each part of the pairs step and of the windows step, alone, on
PTB's vocabulary and the w2v_untied settings, as one JSON line a part.

    WT_JAX_DATA=... python experiments/bench_helpers/w2v_breakdown.py [--rounds=5] [--steps=64]

A part is jit-compiled as a scan of `steps` repetitions (the trainer's calls run 64 steps), timed after a
compiling call, the median of `rounds` calls, in µs a step: the noise draw, the row gathers, the loss and its
gradient on the gathered rows, the row scatter-adds, and the whole step (the pairs step draws its noise with
`jax.random.choice`, the windows step from an alias table); then the host's work an epoch (pairs drawn
and shuffled, or the text subsampled and its windows drawn), a step's share of it. Parts overlap in a whole step
(XLA fuses and schedules them), so they need not add up to it.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from configs import w2v_untied  # noqa: E402
from wt_jax.data import ptb  # noqa: E402
from wt_jax.data import skipgram as sg  # noqa: E402
from wt_jax.models.skipgram import negative_sampling_loss, window_loss  # noqa: E402
from wt_jax.train import skipgram  # noqa: E402


def timed(fn, args, rounds):
  """µs a step of `fn(*args)` (a scan of steps), the median of `rounds` calls after a compiling one."""
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(rounds):
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - t)
  return statistics.median(times)


def scan(part, steps):
  """A jitted scan of `steps` calls of part(U, V, t, key) → (U, V, value), the values summed."""
  def run(U, Vm, key):
    def body(carry, xs):
      U, Vm, acc = carry
      t, k = xs
      U, Vm, value = part(U, Vm, t, k)
      return (U, Vm, acc + value), None
    return jax.lax.scan(body, (U, Vm, 0.0), (jnp.arange(steps), jax.random.split(key, steps)))[0]
  return jax.jit(run)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--rounds", type=int, default=5)
  ap.add_argument("--steps", type=int, default=64)
  ap.add_argument("--centres", type=int, default=64, help="centres a windows step")
  args = ap.parse_args()
  c = w2v_untied.get_config()
  sentences = ptb.sentences("train", None, False)
  vocab, counts = sg.build_vocab(sentences, c.min_count)
  ids, sent = sg.encode(sentences, vocab)
  keep = sg.keep_probability(counts, c.sample)
  V, D, K, W, B, Bw = len(vocab), c.dim, c.negatives, c.window, c.batch_size, args.centres
  noise = jnp.asarray(sg.noise_distribution(counts, c.noise_power), jnp.float32)
  alias = tuple(map(jnp.asarray, sg.alias_table(sg.noise_distribution(counts, c.noise_power))))
  rng = np.random.default_rng(0)
  U0 = jnp.asarray(rng.uniform(-0.5 / D, 0.5 / D, (V, D)), jnp.float32)
  V0 = jnp.asarray(rng.uniform(-0.5 / D, 0.5 / D, (V, D)), jnp.float32)
  centres = jnp.asarray(rng.integers(0, V, B), jnp.int32)
  contexts = jnp.asarray(rng.integers(0, V, B), jnp.int32)
  negs = jnp.asarray(rng.integers(0, V, (B, K)), jnp.int32)
  G = skipgram.BLOCK  # (the shared-noise step's blocks: G centres, G + 2W text rows each)
  ctx_w = jnp.asarray(rng.integers(0, V, (Bw // G, G + 2 * W)), jnp.int32)
  outs_w = jnp.asarray(rng.integers(0, V, (Bw // G, G, 1 + K)), jnp.int32)
  mask_w = jnp.asarray(rng.random((Bw // G, G + 2 * W, G, 1 + K)) < 0.6 * 2 * W / (G + 2 * W))
  lr = 0.01
  out = {"machine": os.uname().machine, "cpu_count": os.cpu_count(), "jax": jax.__version__, "V": V, "D": D,
         "pairs_batch": B, "window_centres": Bw, "steps_a_call": args.steps}

  # A part's carry is (U, V, acc, t): the matrices (only the scatters change them), a scalar that takes what the
  # part computed (so that nothing is dropped as unused), the step count that shifts the ids (so that no gather is
  # hoisted out of the loop as invariant).
  shift = lambda ids, t: (ids + t) % V

  def pair_grads(U, Vm, t):
    return jax.grad(negative_sampling_loss, argnums=(0, 1, 2))(U[shift(centres, t)], Vm[shift(contexts, t)],
                                                               Vm[shift(negs, t)])

  def window_grads(U, Vm, t):
    return jax.grad(window_loss, argnums=(0, 1))(U[shift(ctx_w, t)], Vm[shift(outs_w, t)], mask_w)

  total = lambda arrays: sum(jnp.sum(a) for a in arrays)
  parts = {
      "pairs/noise draw (jax.random.choice)": lambda U, Vm, t, k: (U, Vm, total([jax.random.choice(
          k, V, (B, K), p=noise)])),
      "pairs/gathers": lambda U, Vm, t, k: (U, Vm, total([U[shift(centres, t)], Vm[shift(contexts, t)],
                                                          Vm[shift(negs, t)]])),
      "pairs/loss and gradient": lambda U, Vm, t, k: (U, Vm, total(pair_grads(U, Vm, t))),
      "pairs/scatters": lambda U, Vm, t, k: (U.at[shift(centres, t)].add(lr), Vm.at[shift(contexts, t)].add(lr)
                                             .at[shift(negs, t).reshape(-1)].add(lr), 0.0),
      "windows/noise draw (shared, alias table)": lambda U, Vm, t, k: (U, Vm, total([skipgram.noise_draw(
          k, *alias, (Bw, K))])),
      "windows/gathers": lambda U, Vm, t, k: (U, Vm, total([U[shift(ctx_w, t)], Vm[shift(outs_w, t)]])),
      "windows/loss and gradient": lambda U, Vm, t, k: (U, Vm, total(window_grads(U, Vm, t))),
      "windows/scatters": lambda U, Vm, t, k: (U.at[shift(ctx_w, t).reshape(-1)].add(lr),
                                               Vm.at[shift(outs_w, t).reshape(-1)].add(lr), 0.0),
      "empty loop (the harness alone)": lambda U, Vm, t, k: (U, Vm, 0.0),
  }
  for name, part in parts.items():
    s = timed(scan(part, args.steps), (U0, V0, jax.random.key(0)), args.rounds)
    print(json.dumps({**out, "part": name, "us_a_step": round(1e6 * s / args.steps, 2)}), flush=True)

  ctx = dict(V=V, D=D, K=K, W=W, B=B, Bw=Bw, lr=lr, noise=noise, alias=alias, ids=ids, sent=sent, keep=keep, rng=rng,
             steps=args.steps, rounds=args.rounds, out=out, U0=U0, V0=V0)
  whole_steps(**ctx)
  host_work(**ctx)


def whole_steps(V, D, K, W, B, Bw, lr, noise, alias, ids, sent, keep, rng, steps, rounds, out, U0, V0):
  """The trainer's pairs step and windows steps (per-pair and shared noise), µs a step with a state copy a call."""
  state = {"params": {"words": {"embedding": U0, "out_embedding": V0}}, "step": jnp.zeros((), jnp.int32),
           "opt_state": None}
  import optax
  from wt_jax.models.skipgram import SkipGram
  from wt_jax import parallel
  model = SkipGram(vocab_size=V, dim=D, tying="untied")
  tx = optax.inject_hyperparams(optax.sgd)(learning_rate=lr)
  state["opt_state"] = tx.init(state["params"])
  dp = parallel.DataParallel.create(num_devices=1)
  pair_step = skipgram.make_step(model, tx, noise, K, dp, jax.random.key(1), sparse=True)
  c_KxN = jnp.asarray(rng.integers(0, V, (steps, B)), jnp.int32)
  lrs = jnp.full((steps,), lr, jnp.float32)
  s = timed(lambda: pair_step(jax.tree_util.tree_map(jnp.copy, state), c_KxN, c_KxN, lrs, jnp.int32(0)), (),
            rounds)
  print(json.dumps({**out, "part": "pairs/whole step (with a state copy)", "us_a_step": round(1e6 * s / steps, 2)}))
  for shared in (False, True):
    win_step = skipgram.make_window_step(model, alias, K, W, shared, jax.random.key(1))
    kept, kept_sent = sg.subsample(ids, sent, keep, np.random.default_rng(0))
    text = jnp.asarray(kept[:steps * Bw + 2 * W])
    text_sent = jnp.asarray(kept_sent[:steps * Bw + 2 * W])
    b = jnp.asarray(rng.integers(1, W + 1, (steps, Bw)), jnp.int32)
    s = timed(lambda: win_step(jax.tree_util.tree_map(jnp.copy, state), text, text_sent, b, lrs, jnp.int32(0)), (),
              rounds)
    print(json.dumps({**out, "part": f"windows/whole step, {'shared' if shared else 'per-pair'} noise (with a "
                      "state copy)", "us_a_step": round(1e6 * s / steps, 2)}))
  copy = jax.jit(lambda st: jax.tree_util.tree_map(jnp.copy, st))
  s = timed(lambda: copy(state), (), rounds)
  print(json.dumps({**out, "part": "state copy (a call, not a step)", "us_a_step": round(1e6 * s, 2)}))



def host_work(V, D, K, W, B, Bw, lr, noise, alias, ids, sent, keep, rng, steps, rounds, out, U0, V0):
  """The host's work an epoch, a step's share: pairs drawn and shuffled; the text subsampled and windows drawn."""
  t = time.perf_counter()
  pc, _ = sg.skipgram_pairs(ids, sent, W, np.random.default_rng(1), keep)
  np.random.default_rng(2).permutation(len(pc))
  host = time.perf_counter() - t
  print(json.dumps({**out, "part": "pairs/host: an epoch's pairs drawn and shuffled, a step's share",
                    "us_a_step": round(1e6 * host / (len(pc) // B), 2), "epoch_s": round(host, 3)}))
  t = time.perf_counter()
  kept, _ = sg.subsample(ids, sent, keep, np.random.default_rng(1))
  np.random.default_rng(2).integers(1, W + 1, size=len(kept))
  host = time.perf_counter() - t
  print(json.dumps({**out, "part": "windows/host: an epoch's text subsampled and windows drawn, a step's share",
                    "us_a_step": round(1e6 * host / (len(kept) // Bw), 2), "epoch_s": round(host, 3)}))


if __name__ == "__main__":
  main()
