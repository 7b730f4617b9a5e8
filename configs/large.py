"""Zaremba et al. (2014) large LSTM LM on PTB (1500 units, dropout 0.65), untied.

    python -m experiments.ptb --config=configs/large.py --workdir=runs/large

Paper (Press & Wolf Table 5): Large 66M, valid 82.2 / test 78.4 (the 66,022,000 count is exact here).
"""
from configs import small


def get_config():
  c = small.get_config()
  c.name = "large"
  c.hidden_size = 1500        # Zaremba large: 1500 units
  c.dropout = 0.65            # Zaremba large: keep_prob 0.35
  c.init_scale = 0.04         # Zaremba large: U(-0.04, 0.04)
  c.lr_decay = 1.0 / 1.15     # Zaremba large: lr / 1.15 per epoch
  c.decay_after_epoch = 14    # Zaremba large: max_epoch 14
  c.num_epochs = 55           # Zaremba large: max_max_epoch 55
  c.clip_norm = 10.0          # Zaremba large: clip 10
  c.bptt = 35                 # Zaremba large: num_steps 35
  return c
