"""Large LSTM LM with variational ("Bayesian") dropout, untied — Press & Wolf (2017) Table 5, "Large + BD"
(Gal's Torch code, `BayesianRNN/1500main_new_dropout_SOTA.lua`, with 1500 units).

    python -m experiments.ptb --config=configs/large_bd.py --workdir=runs/large_bd

Weeks of CPU time at full size: for accelerators. 66,034,000 parameters (Gal's cell has a bias on both
the input and the recurrent Linear of each gate: 8H biases per layer, 12,000 more than the Zaremba cell).
The paper reports no "+BD" row without weight decay for the large model; see large_bd_wd.py (78.1 / 75.2).
"""
from configs import large


def get_config():
  c = large.get_config()
  c.name = "large_bd"
  c.model = "bd_lstm_lm"
  c.dropout = 0.0             # (unused: Zaremba's per-step dropout is replaced by the four variational rates)
  c.dropout_x = 0.3           # Gal / Press & Wolf code: word-type embedding dropout 0.3
  c.dropout_i = 0.5           # ... each layer's input, one mask per gate: 0.5
  c.dropout_h = 0.3           # ... recurrent state, one mask per gate: 0.3
  c.dropout_o = 0.5           # ... top layer's output: 0.5
  c.mask_per_gate = True      # Gal's code: separate masks per gate (its faster shared-mask variant is worse)
  c.tie_state_masks = False   # True: Inan et al. (2017)'s VD-LSTM (one mask per state, up and across)
  c.init_scale = 0.04         # Gal code: every parameter, biases included, U(-0.04, 0.04)
  c.learning_rate = 1.0       # Gal code: lr 1
  c.lr_decay = 1.0 / 1.15     # Gal code: lr / 1.15 per epoch once decaying
  c.decay_after_epoch = 10    # Gal code: max_epoch 10 (decays after epoch 11 ends; same convention as small)
  c.num_epochs = 55           # Gal code: max_max_epoch 55
  c.clip_norm = 10.0          # Gal code: max_grad_norm 10
  c.bptt = 35                 # Gal code: seq_length 35
  c.weight_decay = 0.0        # this row: no weight decay (large_bd_wd.py has 1e-7)
  c.weight_decay_mode = "decoupled"  # Gal code: paramx:add(-wd, paramx) after each SGD step
  # Press & Wolf Table 5's BD train values (24.3 / 28.2) lie far below the dropout-on running perplexity that
  # Gal's code prints (76.7 at the end of his log): record the training text without dropout beside it.
  c.eval_train = True
  return c
