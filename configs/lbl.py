"""Mnih & Hinton (2007) log-bilinear LM on PTB, with one representation table for context and target words
(the original model: tied). `lbl_untied.py` uses separate tables.

    python -m experiments.ptb --config=configs/lbl.py --workdir=runs/lbl

Parameters Vd + (n − 1)d² + V = 2,170,000 at V = 10,000, d = 200, n − 1 = 4. The lecture notes' count
(notes_neural_lm, "Log-Bilinear Language Model") is Vd + (n − 1)d² + d + V = 2,170,200: their score adds a
d-dimensional bias b to each projected context vector, which this model leaves out because the per-word
output bias already absorbs it (wt_jax/models/ffnn_lm.py).
"""
from configs import lm_base


def get_config():
  c = lm_base.feedforward("lbl")
  c.words.mode = "tied"       # Mnih & Hinton: the same R for context and next word
  return c
