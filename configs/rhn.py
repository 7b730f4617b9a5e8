"""Recurrent Highway Network LM on PTB, untied — Zilly et al. (2017) as in Press & Wolf (2017) Table 5,
"RHN + BD"; the RHN authors' `ptb_sota` settings (jzilly/RecurrentHighwayNetworks, rhn_train.py).

    python -m experiments.ptb --config=configs/rhn.py --workdir=runs/rhn

31,782,400 parameters (paper: 32M). Paper: valid 71.2 / test 68.5. Days on an accelerator at full length.
"""
from configs import lm_base


def get_config():
  c = lm_base.rhn()
  return c
