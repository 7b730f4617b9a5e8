"""Where a run's augmented-loss target puts its mass, and how large its embedding rows are.

    python -m experiments.al_target --checkpoints=runs/inan/small_re/checkpoints [--which=last] [--tau=20]

For a PTB LM checkpoint, prints one JSON object: the row norms of the input embedding L [V, D] (mean, and
the five largest with their words) and, over the `--words` most frequent training words w, Inan et al.'s
AL target ỹ_w = softmax(L·l_w / τ): its mean entropy (ln V = uniform), the share of words whose ỹ peaks on
the word itself, the word on which most ỹ's peak (a "hub"), and that word's mean mass. Used to diagnose
the diverged REAL run (BUILD_NOTES §11): with a tied matrix and no output bias, a few frequent words' rows
grew until they dominated every target.
"""
import json

import numpy as np
from absl import app, flags

from wt_jax.analysis import al_sweep
from wt_jax.data import ptb
from wt_jax.train.checkpoint import Checkpoints

_CHECKPOINTS = flags.DEFINE_string("checkpoints", None, "A run's checkpoints/ directory.")
_WHICH = flags.DEFINE_enum("which", "last", ["last", "best"], "Which saved checkpoint to read.")
_TAU = flags.DEFINE_float("tau", 20.0, "The AL temperature τ (Inan: 20).")
_WORDS = flags.DEFINE_integer("words", 2000, "How many of the most frequent training words to average over.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "PTB folder (default: WT_JAX_DATA, then the user cache).")
flags.mark_flag_as_required("checkpoints")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  corpus = ptb.load(_DATA_DIR.value, download=False)
  ckpts = Checkpoints(_CHECKPOINTS.value, read_only=True)
  state, _ = ckpts.restore_saved(_WHICH.value)
  ckpts.close()
  L, _ = al_sweep.embedding_matrices(state["params"])
  norms = np.linalg.norm(L, axis=1)
  top = np.argsort(-norms)[:5]
  frequent = al_sweep.most_frequent(corpus.train, _WORDS.value)
  stats = al_sweep.target_stats(L, frequent, _TAU.value)
  stats["hub"] = corpus.vocab.words[stats["hub"]]
  print(json.dumps({"checkpoint": f"{_CHECKPOINTS.value}/{_WHICH.value}", "step": int(state["step"]),
                    "row_norm_mean": float(norms.mean()),
                    "largest_rows": [[corpus.vocab.words[i], round(float(norms[i]), 2)] for i in top],
                    "tau": _TAU.value, "words": len(frequent), **stats}))


if __name__ == "__main__":
  app.run(main)
