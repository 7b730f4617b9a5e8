"""Small LSTM LM with weight tying (WT) — Press & Wolf (2017) Table 6, row "small + WT".

    python -m experiments.ptb --config=configs/small_tied.py --workdir=runs/small_tied

Paper: 2.65M parameters, train 36.4 / valid 117.5 / test 112.4.
"""
from configs import lm_base


def get_config():
  c = lm_base.get_config()
  c.name = "small_tied"
  c.words.mode = "tied"            # Press & Wolf: one matrix for the input lookup and the softmax
  return c
