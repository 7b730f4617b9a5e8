"""Large LSTM LM with weight tying — Press & Wolf (2017) Table 5, row "Large + WT".

    python -m experiments.ptb --config=configs/large_tied.py --workdir=runs/large_tied

Paper: 51M parameters, valid 77.7 / test 74.3.
"""
from configs import lm_base


def get_config():
  c = lm_base.zaremba("large")
  c.name = "large_tied"
  c.words.mode = "tied"
  return c
