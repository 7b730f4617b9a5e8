"""Zaremba et al. (2014) large LSTM LM on PTB (1500 units, dropout 0.65), untied.

    python -m experiments.ptb --config=configs/large.py --workdir=runs/large

Paper (Press & Wolf Table 5): Large 66M, valid 82.2 / test 78.4 (the 66,022,000 count is exact here).
"""
from configs import lm_base


def get_config():
  c = lm_base.zaremba("large")
  return c
