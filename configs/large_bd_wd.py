"""Large BD LSTM LM with weight decay, untied — Press & Wolf (2017) Table 5, "Large + BD + WD".

    python -m experiments.ptb --config=configs/large_bd_wd.py --workdir=runs/large_bd_wd

Paper: 66M parameters, valid 78.1 / test 75.2.
"""
from configs import lm_base


def get_config():
  c = lm_base.large_bd()
  c.name = "large_bd_wd"
  c.weight_decay = 1e-7       # Gal / Press & Wolf code: weight_decay 1e-7, decoupled, once per step
  return c
