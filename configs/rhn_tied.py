"""Recurrent Highway Network LM with weight tying — Press & Wolf (2017) Table 5, "RHN + BD + WT"; the RHN
authors' `ptb_sota` settings (`tied = True` there).

    python -m experiments.ptb --config=configs/rhn_tied.py --workdir=runs/rhn_tied

23,482,400 parameters (paper: 24M). Paper: valid 68.1 / test 66.0. On this project's 2-core CPU one epoch
takes hours; the numbers above need an accelerator.
"""
from configs import lm_base


def get_config():
  c = lm_base.rhn()
  c.name = "rhn_tied"
  c.words.mode = "tied"
  return c
