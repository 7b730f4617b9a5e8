"""The windows step turned round (PTB, one device): the centre's input vector predicts its window's words and noise
words, as the pairs step scores a pair, instead of word2vec.c's orientation (a context's input vector predicts its
centre). Everything else is the windows step's: the kept text in order, BLOCK centres a product, one noise set a
window, the same keys. What the orientation alone does to the trained matrices' quality.

    WT_JAX_DATA=... python experiments/bench_helpers/w2v_windows_centre_input.py SEED WORKDIR [TYING]
    python -m experiments.studies.w2v_quality DIR        # then its quality.json (DIR holding WORKDIR)

Not a config switch: a subclass of the task whose step is the one below; batch 64, 64 steps a call, as the
`windows_shared_1device` scheme of experiments/studies/w2v_quality.sh.

The loss, for block centres g with window rows t (mask inside[t, g]) and noise words k drawn for g:
Σ_{t,g} inside·[−log σ(u_g·v_t)] + Σ_g c_g Σ_k counted·[−log σ(−u_g·v_k)], c_g = Σ_t inside[t, g] — the pairs
step's loss of the window's c_g pairs (g, t), each scored against the window's one noise set.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from configs import w2v_tied, w2v_untied  # noqa: E402
from wt_jax.data import ptb  # noqa: E402
from wt_jax.train import skipgram, trainer  # noqa: E402


def centre_input_loss(u, v_rows, v_neg, inside, counted):
  """u[N, G, D] centres' input vectors, v_rows[N, T, D] the block's text rows' output vectors, v_neg[N, G, K, D]
  each window's noise output vectors, inside[N, T, G], counted[N, G, K] → the summed loss (scalar)."""
  pos = jnp.einsum("ngd,ntd->ntg", u, v_rows)
  neg = jnp.einsum("ngd,ngkd->ngk", u, v_neg)
  pairs = jnp.sum(inside, axis=1)  # [N, G]
  return -(jnp.sum(jnp.where(inside, jax.nn.log_sigmoid(pos), 0.0))
           + jnp.sum(jnp.where(counted, jax.nn.log_sigmoid(-neg), 0.0) * pairs[..., None]))


def make_step(model, noise, negatives, window, noise_key):
  out_name = "embedding" if model.tying == "tied" else "out_embedding"
  G, K, W = skipgram.BLOCK, negatives, window

  def step(words, ids, sentences, b, neg, lr):
    centres, rows, inside = skipgram.window_blocks(ids, sentences, b, W, G)
    neg = neg.reshape(*centres.shape, K)
    counted = neg != centres[..., None]
    U, V = words["embedding"], words[out_name]
    loss, (g_u, g_rows, g_neg) = jax.value_and_grad(centre_input_loss, argnums=(0, 1, 2))(
        U[centres], V[rows], V[neg], inside, counted)
    D = U.shape[-1]
    V = V.at[rows.reshape(-1)].add(-lr * g_rows.reshape(-1, D)).at[neg.reshape(-1)].add(-lr * g_neg.reshape(-1, D))
    U = (V if model.tying == "tied" else U).at[centres.reshape(-1)].add(-lr * g_u.reshape(-1, D))
    return ({"embedding": U} if model.tying == "tied" else {"embedding": U, "out_embedding": V},
            (loss, jnp.sum(inside, dtype=jnp.int32)))

  def steps(state, ids, sentences, b_CxB, lrs_C, first):
    C, B = b_CxB.shape
    neg = jax.vmap(lambda j: skipgram.noise_draw(jax.random.fold_in(noise_key, first + j), *noise, (B, K)))(
        jnp.arange(C)).reshape(C * B, K)
    b = b_CxB.reshape(-1)

    def body(words, xs):
      lr, j = xs
      cut = lambda x, size: jax.lax.dynamic_slice_in_dim(x, j * B, size)
      return step(words, cut(ids, B + 2 * W), cut(sentences, B + 2 * W), cut(b, B), cut(neg, B), lr)

    new, (losses, pairs) = jax.lax.scan(body, state["params"]["words"], (lrs_C, jnp.arange(C, dtype=jnp.int32)))
    opt_state = state["opt_state"]
    opt_state.hyperparams["learning_rate"] = lrs_C[-1]
    return ({"params": {**state["params"], "words": new}, "opt_state": opt_state, "step": state["step"] + C},
            (losses, pairs))

  return jax.jit(steps, donate_argnums=(0,))


class CentreInput(skipgram.SkipGramTask):
  """`SkipGramTask` (windows, shared noise, one device) with the step above."""

  def __init__(self, config, sentences):
    super().__init__(config, sentences)
    _, noise_key = trainer.run_keys(config.seed)
    alias = tuple(map(jnp.asarray, skipgram.sg.alias_table(
        skipgram.sg.noise_distribution(self.counts, config.noise_power))))
    self.step_fn = make_step(self.model, alias, config.negatives, config.window, noise_key)


def main():
  tying = sys.argv[3] if len(sys.argv) > 3 else "untied"
  config = (w2v_tied if tying == "tied" else w2v_untied).get_config()
  config.seed = int(sys.argv[1])
  config.batching, config.shared_negatives, config.batch_size, config.steps_per_call = "windows", True, 64, 64
  config.num_devices = 1
  trainer.run(CentreInput(config, ptb.sentences("train", None, False)), config, sys.argv[2])


if __name__ == "__main__":
  main()
