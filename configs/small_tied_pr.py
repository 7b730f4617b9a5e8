"""Small LSTM LM with weight tying and projection regularisation — Press & Wolf (2017) Table 6,
row "small + WT + PR".

    python -m experiments.ptb --config=configs/small_tied_pr.py --workdir=runs/small_tied_pr

Paper: 2.69M parameters, train 53.5 / valid 104.9 / test 100.9.
"""
from configs import lm_base


def get_config():
  c = lm_base.get_config()
  c.name = "small_tied_pr"
  c.words.mode = "tied_projection"  # Press & Wolf, Weight Tying section (projection regularisation): P
                                   # before the tied output embedding
  return c
