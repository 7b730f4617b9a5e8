"""Large BD LSTM LM with weight tying and no weight decay — Press & Wolf (2017) Table 5, "Large + BD + WT".

    python -m experiments.ptb --config=configs/large_bd_tied.py --workdir=runs/large_bd_tied

51,034,000 parameters (paper: 51M). Table 5's one tied BD row (train 28.2 / valid 75.8 / test 73.2) does not
say whether weight decay was used; the paper's text reports runs with and without it, similar, the one
without slightly better. `large_bd_wd_tied.py` is the other reading (the setting of the authors' code).
"""
from configs import lm_base


def get_config():
  c = lm_base.large_bd()
  c.name = "large_bd_tied"
  c.words.mode = "tied"            # Press & Wolf code: h2y:share(lookup table, 'weight', 'gradWeight')
  return c
