"""Large BD LSTM LM with weight tying — Press & Wolf (2017) Table 5, "Large + BD + WT" (no weight decay).

    python -m experiments.ptb --config=configs/large_bd_tied.py --workdir=runs/large_bd_tied

51,034,000 parameters (paper: 51M).
"""
from configs import large_bd


def get_config():
  c = large_bd.get_config()
  c.name = "large_bd_tied"
  c.words.mode = "tied"            # Press & Wolf code: h2y:share(lookup table, 'weight', 'gradWeight')
  return c
