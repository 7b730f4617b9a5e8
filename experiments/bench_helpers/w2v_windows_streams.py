"""A windows step that reads a call's text as streams and scores in the pairs step's orientation, with noise drawn a
pair or from a pool a step (PTB, untied, one device): what the output matrix's quality asks of a fast step.

    WT_JAX_DATA=... python experiments/bench_helpers/w2v_windows_streams.py SEED WORKDIR [POOL [damp|cap=N]]
    python -m experiments.studies.w2v_quality DIR        # then its quality.json (DIR holding WORKDIR)

Not a config switch (BUILD_NOTES §86, §87): a subclass of the task whose step is the one below, batch 64, 64 steps a
call. The C·B centres of a call are B streams of C consecutive centres; step j takes centre j of each, so a step's
centres lie C apart and their windows do not overlap. Each centre's input vector is scored against its window's
slots (label 1) and against noise words (label 0), skipping a noise word equal to the slot's word (word2vec.c):
- no POOL: K noise words a pair, drawn from the alias table (word2vec.c's draw; the step of 67eb4a0);
- POOL = P: P noise words a step, each pair picking K of them uniformly (each pick still follows the noise
  distribution), so a step gathers P noise rows instead of K a pair;
- POOL = P and `cap=N`: as POOL, each pool word's summed gradient scaled by min(1, N / picks it served): a sum up
  to N picks, N times their average beyond; `damp` is cap=1 (an average over its pairs instead of their sum).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from configs import w2v_untied  # noqa: E402
from wt_jax.data import ptb  # noqa: E402
from wt_jax.train import skipgram, trainer  # noqa: E402


def window_rows(ids, sentences, at, b, window):
  """The text ids[L] and its sentence ids (W entries of −1 before and after it), centres at places at[B] and their
  half-windows b[B] → (centres[B], rows[B, 2W + 1], inside[B, 2W + 1]) (word2vec.c's dynamic window)."""
  offset = jnp.arange(2 * window + 1) - window
  mid = at + window
  rows = mid[:, None] + offset[None, :]
  inside = (offset != 0) & (jnp.abs(offset) <= b[:, None]) & (sentences[rows] == sentences[mid][:, None])
  return ids[mid], jnp.maximum(ids[rows], 0), inside


def pair_loss(u, v_slots, inside, v_noise, noise_weight):
  """u[B, D] centres' input vectors, v_slots[B, J, D] their window's output vectors (kept where inside[B, J]),
  v_noise[B, X, D] or [P, D] noise output vectors, noise_weight[B, X] or [B, P] the pairs each serves → the summed
  negative-sampling loss of the windows' pairs (scalar)."""
  pos = jnp.einsum("bd,bjd->bj", u, v_slots)
  neg = jnp.einsum("bd,bxd->bx", u, v_noise) if v_noise.ndim == 3 else u @ v_noise.T
  return -(jnp.sum(jnp.where(inside, jax.nn.log_sigmoid(pos), 0.0)) + jnp.sum(noise_weight * jax.nn.log_sigmoid(-neg)))


def make_step(alias, negatives, window, noise_key, pool, cap=0):
  K, W, J = negatives, window, 2 * window + 1

  def step(words, ids, sentences, at, b, noise, lr):
    centres, rows, inside = window_rows(ids, sentences, at, b, W)
    U, V = words["embedding"], words["out_embedding"]
    B, D = len(centres), U.shape[-1]
    if pool:
      pool_ids, picks = noise  # [P], [B, J, K]
      counted = (pool_ids[picks] != rows[..., None]) & inside[..., None]
      weight = jnp.zeros((B, pool), jnp.float32).at[jnp.arange(B)[:, None, None], picks].add(counted)
      noise_ids = pool_ids
    else:
      counted = (noise != rows[..., None]) & inside[..., None]  # noise [B, J, K]
      weight, noise_ids = counted.reshape(B, J * K).astype(jnp.float32), noise.reshape(B, J * K)
    loss, (g_u, g_slots, g_noise) = jax.value_and_grad(pair_loss, argnums=(0, 1, 3))(
        U[centres], V[rows], inside, V[noise_ids], weight)
    if cap:
      g_noise = g_noise * jnp.minimum(1.0, cap / jnp.maximum(jnp.sum(weight, axis=0), 1.0))[:, None]
    V = V.at[rows.reshape(-1)].add(-lr * g_slots.reshape(-1, D)).at[noise_ids.reshape(-1)].add(
        -lr * g_noise.reshape(-1, D))
    U = U.at[centres].add(-lr * g_u)
    return {"embedding": U, "out_embedding": V}, (loss, jnp.sum(inside, dtype=jnp.int32))

  def steps(state, ids, sentences, b_CxB, lrs_C, first):
    C, B = b_CxB.shape

    def draw(j):
      key = jax.random.fold_in(noise_key, first + j)
      if not pool:
        return skipgram.noise_draw(key, *alias, (B, J, K))
      k_pool, k_picks = jax.random.split(key)
      return skipgram.noise_draw(k_pool, *alias, (pool,)), jax.random.randint(k_picks, (B, J, K), 0, pool)

    b = b_CxB.reshape(-1)

    def body(words, xs):
      lr, j, noise_j = xs
      at = jnp.arange(B) * C + j
      return step(words, ids, sentences, at, b[at], noise_j, lr)

    new, (losses, pairs) = jax.lax.scan(body, state["params"]["words"],
                                        (lrs_C, jnp.arange(C, dtype=jnp.int32), jax.vmap(draw)(jnp.arange(C))))
    opt_state = state["opt_state"]
    opt_state.hyperparams["learning_rate"] = lrs_C[-1]
    return ({"params": {**state["params"], "words": new}, "opt_state": opt_state, "step": state["step"] + C},
            (losses, pairs))

  return jax.jit(steps, donate_argnums=(0,))


class Streams(skipgram.SkipGramTask):
  """`SkipGramTask` (windows, one device, untied) with the step above."""

  pool, cap = 0, 0

  def __init__(self, config, sentences):
    super().__init__(config, sentences)
    _, noise_key = trainer.run_keys(config.seed)
    alias = tuple(map(jnp.asarray, skipgram.sg.alias_table(
        skipgram.sg.noise_distribution(self.counts, config.noise_power))))
    self.step_fn = make_step(alias, config.negatives, config.window, noise_key, self.pool, self.cap)


def main():
  config = w2v_untied.get_config()
  config.seed = int(sys.argv[1])
  Streams.pool = int(sys.argv[3]) if len(sys.argv) > 3 else 0
  option = sys.argv[4] if len(sys.argv) > 4 else ""
  Streams.cap = 1 if option == "damp" else int(option.removeprefix("cap=")) if option.startswith("cap=") else 0
  if option and not Streams.cap:
    sys.exit(f"unknown option {option!r}: damp or cap=N (N >= 1)")
  config.batching, config.batch_size, config.steps_per_call, config.num_devices = "windows", 64, 64, 1
  config.shared_negatives = Streams.pool > 0  # (names the scheme in the quality record: a pool is shared by a step)
  trainer.run(Streams(config, ptb.sentences("train", None, False)), config, sys.argv[2])


if __name__ == "__main__":
  main()
