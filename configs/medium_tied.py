"""Medium LSTM LM with weight tying — Press & Wolf (2017) Table 5, row "Medium + WT".

    python -m experiments.ptb --config=configs/medium_tied.py --workdir=runs/medium_tied

Untied: 19,775,200 parameters; tied: 13,275,200. Compare with Press & Wolf (2017) Table 5's medium rows.
"""
from configs import medium


def get_config():
  c = medium.get_config()
  c.name = "medium_tied"
  c.words.mode = "tied"
  return c
