"""The pairs step with each epoch's pairs unshuffled (PTB, untied): what the order alone does to the trained matrices'
quality, next to the windows step, which reads the text in order.

    WT_JAX_DATA=... python experiments/bench_helpers/w2v_pairs_in_order.py SEED WORKDIR [ORDER]
    python -m experiments.studies.w2v_quality DIR        # then its quality.json (DIR holding WORKDIR)

Not a config switch: the trainer shuffles pairs; this subclass feeds the same pairs in one of two orders (ORDER):
- 'drawn' (the default): as `sg.skipgram_pairs` draws them — every distance-1 pair through the text, then every
  distance-2 pair, and so on — so a batch of 256 holds 256 different centres, each with one of its contexts;
- 'centre': sorted by the centre's place in the kept text, so a batch holds some 40 consecutive centres with all
  their window's pairs, as a step of the windows step does;
- 'spread': sorted by the centre's place modulo 1024, then by place, so a batch holds some 40 centres 1024 tokens
  apart with all their window's pairs (a centre's pairs in one step, but no two centres' windows overlapping).
Everything else as `configs/w2v_untied.py`.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from configs import w2v_untied  # noqa: E402
from wt_jax.data import ptb  # noqa: E402
from wt_jax.data import skipgram as sg  # noqa: E402
from wt_jax.train import skipgram, trainer  # noqa: E402


class InTextOrder(skipgram.SkipGramTask):
  """`SkipGramTask` with the pairs batches unshuffled, in the order `ORDER` (see the module docstring)."""

  order = "drawn"

  def _pairs(self, epoch):
    """The epoch's pairs as `SkipGramTask._pairs` draws them (the same generator calls: subsampling, then the
    windows), drawn on the kept tokens' places so that they can be sorted by the centre's."""
    rng = np.random.default_rng([self.config.seed, epoch])
    ids, sent = sg.subsample(self.ids, self.sent, self.keep, rng)
    centre_at, context_at = sg.skipgram_pairs(np.arange(len(ids)), sent, self.config.window, rng)
    key = {"drawn": np.arange(len(centre_at)), "centre": centre_at,
           "spread": (centre_at % 1024).astype(np.int64) * len(ids) + centre_at}[self.order]
    order = np.argsort(key, kind="stable")
    return ids[centre_at[order]], ids[context_at[order]], rng

  def _pair_batches(self, epoch, start):
    B = self.config.batch_size
    centers, contexts, _ = self._pairs(epoch)
    n = min(len(centers) // B, self.steps_per_epoch)
    for i0 in range(start, n, self.K):
      k = min(self.K, n - i0)
      idx = np.arange(i0 * B, (i0 + k) * B)
      first = (epoch - 1) * self.steps_per_epoch + i0
      yield (*self.dp.shard_batch((centers[idx].reshape(k, B), contexts[idx].reshape(k, B)), 1),
             self._lrs(first, k), jnp.int32(first)), k


def main():
  config = w2v_untied.get_config()
  config.seed = int(sys.argv[1])
  InTextOrder.order = sys.argv[3] if len(sys.argv) > 3 else "drawn"
  trainer.run(InTextOrder(config, ptb.sentences("train", None, False)), config, sys.argv[2])


if __name__ == "__main__":
  main()
