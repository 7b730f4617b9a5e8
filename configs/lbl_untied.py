"""Mnih & Hinton (2007) log-bilinear LM on PTB with separate context and target representation tables.

    python -m experiments.ptb --config=configs/lbl_untied.py --workdir=runs/lbl_untied
"""
from configs import lm_base


def get_config():
  c = lm_base.feedforward("lbl")
  c.name = "lbl_untied"
  return c
