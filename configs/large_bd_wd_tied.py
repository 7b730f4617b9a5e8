"""Large BD LSTM LM with weight decay and weight tying — Press & Wolf (2017) Table 5, "Large + BD + WT"
(`BayesianRNN/1500_yes_decay_main_new_dropout_SOTA_WT_loggingplus.lua`).

    python -m experiments.ptb --config=configs/large_bd_wd_tied.py --workdir=runs/large_bd_wd_tied

Paper: 51M parameters, train 28.2 / valid 75.8 / test 73.2 (the row does not say whether weight decay was
used; `large_bd_tied.py` is the other reading). The decay touches the tied matrix once per step.
"""
from configs import lm_base


def get_config():
  c = lm_base.large_bd()
  c.name = "large_bd_wd_tied"
  c.weight_decay = 1e-7       # Gal / Press & Wolf code: weight_decay 1e-7, decoupled, once per step
  c.words.mode = "tied"
  return c
