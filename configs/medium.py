"""Zaremba et al. (2014) medium LSTM LM on PTB (650 units, dropout 0.5), untied.

    python -m experiments.ptb --config=configs/medium.py --workdir=runs/medium

Zaremba et al. (2014) Table 1, medium regularised LSTM: valid 86.2 / test 82.7 (the TensorFlow reference
code's docstring reports train 48.45 / valid 86.16 / test 82.07). 19,775,200 parameters untied.
"""
from configs import lm_base


def get_config():
  c = lm_base.zaremba("medium")
  return c
