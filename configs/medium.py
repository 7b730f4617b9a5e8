"""Zaremba et al. (2014) medium LSTM LM on PTB (650 units, dropout 0.5), untied.

    python -m experiments.ptb --config=configs/medium.py --workdir=runs/medium

Zaremba et al. (2014) Table 1, medium regularised LSTM: valid 86.2 / test 82.7 (the TensorFlow reference
code's docstring reports train 48.45 / valid 86.16 / test 82.07). 19,775,200 parameters untied.
"""
from configs import small


def get_config():
  c = small.get_config()
  c.name = "medium"
  c.hidden_size = 650         # Zaremba medium: 650 units
  c.dropout = 0.5             # Zaremba medium: keep_prob 0.5
  c.init_scale = 0.05         # Zaremba medium: U(-0.05, 0.05)
  c.lr_decay = 0.8            # Zaremba medium (TF reference): x0.8 per epoch
  c.decay_after_epoch = 6     # Zaremba medium: max_epoch 6
  c.num_epochs = 39           # Zaremba medium: max_max_epoch 39
  c.clip_norm = 5.0           # Zaremba medium: clip 5
  c.bptt = 35                 # Zaremba medium: num_steps 35
  return c
