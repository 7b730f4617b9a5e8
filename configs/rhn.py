"""Recurrent Highway Network LM on PTB, untied — Zilly et al. (2017) as in Press & Wolf (2017) Table 5,
"RHN + BD"; the RHN authors' `ptb_sota` settings (jzilly/RecurrentHighwayNetworks, rhn_train.py).

    python -m experiments.ptb --config=configs/rhn.py --workdir=runs/rhn

31,782,400 parameters (paper: 32M). Paper: valid 71.2 / test 68.5. Days on an accelerator at full length.
"""
from configs import small


def get_config():
  c = small.get_config()
  c.name = "rhn"
  c.model = "rhn_lm"
  c.num_layers = 1            # RHN code ptb_sota: num_layers 1
  c.depth = 10                # ... recurrence depth 10
  c.hidden_size = 830         # ... hidden_size 830 (embedding size = hidden size)
  c.dropout_x = 0.25          # ... drop_x (word-type embedding dropout)
  c.dropout_i = 0.75          # ... drop_i (layer input)
  c.dropout_h = 0.25          # ... drop_h (recurrent state, the same mask at every micro-layer)
  c.dropout_o = 0.75          # ... drop_o (output)
  c.init_scale = 0.04         # ... init_scale: U(-0.04, 0.04)
  c.transform_bias = -2.0     # ... init_bias: transform-gate biases start at -2
  c.remat = False             # ours: jax.checkpoint each time step (recompute the 10 micro-layers)
  c.learning_rate = 0.2       # ... learning_rate 0.2
  c.lr_decay = 1.0 / 1.02     # ... lr / 1.02 per epoch once decaying
  # RHN code: lr / lr_decay ** max(i - max_epoch + 1, 0) for 0-based epoch i, max_epoch 20: epochs 1-20 at
  # 0.2, decaying from epoch 21. In our convention (epochs 1..decay_after_epoch+1 at full lr) that is 19.
  c.decay_after_epoch = 19
  c.num_epochs = 500          # ... max_max_epoch 500 (trained to convergence, best-by-valid kept)
  c.clip_norm = 10.0          # ... max_grad_norm 10
  c.batch_size = 20           # ... batch_size 20
  c.bptt = 35                 # ... num_steps 35
  c.weight_decay = 1e-7       # ... weight_decay 1e-7, added to the cost as wd * sum(l2_loss(v))
  c.weight_decay_mode = "loss"
  c.test_params = "best"      # ... restores the best-by-valid model before the final test
  return c
