"""Zaremba et al. (2014) small LSTM LM on PTB, untied — Press & Wolf (2017) Table 6, row "small".

    python -m experiments.ptb --config=configs/small.py --workdir=runs/small

Paper (Press & Wolf Table 6, no dropout): 4.65M parameters, train 38.0 / valid 120.7 / test 114.5.
The base settings (`configs/lm_base.py`) are this model's; every other small config starts from them and
changes only what its row changes.
"""
from configs import lm_base


def get_config():
  c = lm_base.get_config()
  c.name = "small"
  return c
