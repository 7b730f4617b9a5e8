"""Mnih & Hinton (2007) log-bilinear LM on PTB with separate context and target representation tables.

    python -m experiments.ptb --config=configs/lbl_untied.py --workdir=runs/lbl_untied
"""
from configs import lbl


def get_config():
  c = lbl.get_config()
  c.name = "lbl_untied"
  c.words.mode = "untied"
  return c
