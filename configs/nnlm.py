"""Bengio et al. (2003) feed-forward neural LM on PTB, untied (`nnlm_tied.py`: output matrix = input table C).

    python -m experiments.ptb --config=configs/nnlm.py --workdir=runs/nnlm

Bengio et al. used n = 6, m = 100, h = 60 on AP News with SGD; the sizes here are ours for PTB on a CPU,
with hidden = m so that the output layer acts in embedding space and can be tied without a projection.
"""
from configs import small


def get_config():
  c = small.get_config()
  c.name = "nnlm"
  c.model = "nnlm"
  c.context = 4               # n − 1 previous words (Bengio et al.: n = 5 or 6)
  c.emb_size = 200            # m (ours; Bengio et al.: 30–100)
  c.hidden_size = 200         # tanh units (ours; = m so tying needs no projection)
  c.output_projection = False  # True: an h×m projection before the (tied) output layer
  c.direct = False            # Bengio's direct connections from the context to the output (never tied)
  c.dropout = 0.3             # ours: PTB overfits a feed-forward LM quickly
  c.optimizer = "adam"        # ours (Bengio et al.: SGD with a decreasing rate)
  c.learning_rate = 1e-3
  c.lr_decay = 0.5
  c.decay_after_epoch = 4
  c.num_epochs = 10
  c.batch_size = 64           # ours: no recurrence, so wider batches are cheap
  c.bptt = 20                 # positions per window (the context crosses windows through the carry)
  return c
