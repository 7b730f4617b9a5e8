"""Split a tied model's embedding gradient into its output (logits) part and its input (lookup) part.

    python -m experiments.grad_parts --config=configs/small_tied_pr.py [--checkpoint=RUN/checkpoints] [--windows=5]

For consecutive PTB training windows (from the checkpoint's position, state carried), prints one JSON line
each with: the global gradient norm (what optax clips), the norm TensorFlow 0.8's `clip_by_global_norm`
would have used (a shared variable's gradient there is an IndexedSlices of the concatenated dense output part
and the *per-occurrence* lookup rows, so repeated words are not summed before the norm), the norms of the
output part, of the lookup part (summed per word, and per occurrence), and of every other parameter.
Used to test whether the reference's clipping differs from ours (BUILD_NOTES.md, Table 6 investigation).
"""
import json

import jax
import jax.numpy as jnp
import optax
from absl import app, flags
from ml_collections import config_flags

from wt_jax import losses, models, tying
from wt_jax.data import batching, ptb
from wt_jax.train import loop, optim
from wt_jax.train.checkpoint import Checkpoints

_CONFIG = config_flags.DEFINE_config_file("config", None, "A tied config.", lock_config=True)
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "A run's checkpoints/ directory (default: init).")
_WINDOWS = flags.DEFINE_integer("windows", 5, "Training windows to analyse.")
flags.mark_flag_as_required("config")


def main(argv):
  del argv
  config = _CONFIG.value
  corpus = ptb.load(config.data_dir or None, download=False)
  model = models.build(config)
  B, T = config.batch_size, config.bptt
  windows = batching.lm_windows(corpus.train, B, T)
  params = loop.init_params(model, jax.random.split(jax.random.key(config.seed))[0], B, T)
  carry, start = model.initial_carry(B), 0
  if _CHECKPOINT.value:
    tx = optim.make_optimizer(config, len(windows))
    target = {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32),
              "carry": carry}
    restored, _ = Checkpoints(_CHECKPOINT.value, read_only=True).restore("last", target)
    params, carry, start = restored["params"], restored["carry"], int(restored["step"])

  def cost(p, x_offset, carry, x, y):
    """The training cost; x_offset [T, B, H] is added to the looked-up vectors, so ∂cost/∂x_offset is the
    per-occurrence lookup gradient."""
    words = model.bind({"params": p}).words
    original = type(words).embed

    def embed(self, ids):
      return original(self, ids) + x_offset

    type(words).embed = embed
    try:
      (logits, _), aux = model.apply({"params": p}, x, carry, train=True,
                                     rngs={"dropout": jax.random.key(0)}, mutable=[tying.PENALTIES])
    finally:
      type(words).embed = original
    return losses.zaremba_cost(losses.token_nll(logits, y)) + losses.total_penalty(aux.get(tying.PENALTIES, {})) / B

  S = params["words"]["embedding"]
  for i in range(start % len(windows), start % len(windows) + _WINDOWS.value):
    x, y = windows.x[i], windows.y[i]
    offset = jnp.zeros((T, B, S.shape[1]))
    g, g_occ = jax.grad(cost, argnums=(0, 1))(params, offset, carry, x, y)
    g_emb = g["words"]["embedding"]
    lookup = jnp.zeros_like(S).at[x.T.reshape(-1)].add(g_occ.reshape(-1, S.shape[1]))
    output = g_emb - lookup
    total = float(optax.tree.norm(g))
    rest = float(jnp.sqrt(jnp.maximum(total ** 2 - jnp.sum(g_emb ** 2), 0.0)))
    tf08 = float(jnp.sqrt(rest ** 2 + jnp.sum(output ** 2) + jnp.sum(g_occ ** 2)))
    print(json.dumps({"step": start, "window": int(i), "global_norm": round(total, 4), "tf08_global_norm": round(tf08, 4),
                      "emb": round(float(jnp.linalg.norm(g_emb)), 4), "emb_output_part": round(float(jnp.linalg.norm(output)), 4),
                      "emb_lookup_summed": round(float(jnp.linalg.norm(lookup)), 4),
                      "emb_lookup_per_occurrence": round(float(jnp.linalg.norm(g_occ)), 4),
                      "other_params": round(rest, 4)}))
    _, carry = model.apply({"params": params}, x, carry)


if __name__ == "__main__":
  app.run(main)
