"""Bengio et al. (2003) feed-forward neural LM on PTB, untied (`nnlm_tied.py`: output matrix = input table C).

    python -m experiments.ptb --config=configs/nnlm.py --workdir=runs/nnlm

Sizes in the lecture notes (notes_neural_lm, "Number of Parameters", for Bengio et al. 2003): n − 1 = 5,
d ∈ {30, 60}, H ∈ {50, 100}, V ≈ 18,000; their count D = 461V + 30,100 ≈ 8.3M is d = 60, H = 100. The
notes' copy of Bengio et al.'s Brown-corpus Table 1 has n ∈ {3, 5}, h ∈ {0, 50, 100}, m ∈ {30, 60}. The
sizes here (n − 1 = 4, m = h = 200) are ours for PTB on a CPU, chosen with hidden = m so that the output
layer acts in embedding space and can be tied without a projection. Without direct connections (A = 0) the untied count is the notes' D with the A term dropped:
Vd + V + VH + H + (n − 1)dH = 4,170,200 at V = 10,000.
"""
from configs import small


def get_config():
  c = small.get_config()
  c.name = "nnlm"
  c.model = "nnlm"
  c.context = 4               # n − 1 previous words (notes: n − 1 = 5; Brown table n = 3 or 5)
  c.emb_size = 200            # m = d (ours; notes: 30 or 60)
  c.hidden_size = 200         # h = H tanh units (ours, = m so tying needs no projection; notes: 50 or 100)
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
