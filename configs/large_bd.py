"""Large LSTM LM with variational ("Bayesian") dropout, untied — Press & Wolf (2017) Table 5, "Large + BD"
(Gal's Torch code, `BayesianRNN/1500main_new_dropout_SOTA.lua`, with 1500 units).

    python -m experiments.ptb --config=configs/large_bd.py --workdir=runs/large_bd

Weeks of CPU time at full size: for accelerators. 66,034,000 parameters (Gal's cell has a bias on both
the input and the recurrent Linear of each gate: 8H biases per layer, 12,000 more than the Zaremba cell).
The paper reports no "+BD" row without weight decay for the large model; see large_bd_wd.py (78.1 / 75.2).
"""
from configs import lm_base


def get_config():
  c = lm_base.large_bd()
  return c
