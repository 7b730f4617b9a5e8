"""Bengio et al. (2003) NNLM on PTB with the output matrix tied to the input table C (Press & Wolf's idea
applied to a feed-forward LM).

    python -m experiments.ptb --config=configs/nnlm_tied.py --workdir=runs/nnlm_tied
"""
from configs import lm_base


def get_config():
  c = lm_base.feedforward("nnlm")
  c.name = "nnlm_tied"
  c.words.mode = "tied"
  return c
