"""The pairs step with each epoch's pairs in text order instead of shuffled (PTB, untied): what the order alone does
to the trained matrices' quality, next to the windows step, which reads the text in order.

    WT_JAX_DATA=... python experiments/bench_helpers/w2v_pairs_in_order.py SEED WORKDIR
    python -m experiments.studies.w2v_quality DIR        # then its quality.json (DIR holding WORKDIR)

Not a config switch: the trainer shuffles pairs; this subclass feeds them in the order `sg.skipgram_pairs` draws them
(centre by centre through the text), everything else as `configs/w2v_untied.py`.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from configs import w2v_untied  # noqa: E402
from wt_jax.data import ptb  # noqa: E402
from wt_jax.train import skipgram, trainer  # noqa: E402


class InTextOrder(skipgram.SkipGramTask):
  """`SkipGramTask` with the pairs batches in the order they were drawn."""

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
  trainer.run(InTextOrder(config, ptb.sentences("train", None, False)), config, sys.argv[2])


if __name__ == "__main__":
  main()
