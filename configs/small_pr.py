"""Small LSTM LM with projection regularisation (PR) — Press & Wolf (2017) Table 6, row "small + PR".

    python -m experiments.ptb --config=configs/small_pr.py --workdir=runs/small_pr

Paper: 4.69M parameters, train 50.8 / valid 116.0 / test 111.7.
"""
from configs import lm_base


def get_config():
  c = lm_base.get_config()
  c.name = "small_pr"
  c.words.mode = "projection"  # Press & Wolf, Weight Tying section (projection regularisation): P (H x H)
                              # before an untied output embedding
  return c
