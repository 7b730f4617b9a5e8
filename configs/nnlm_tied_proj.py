"""Bengio et al. (2003) NNLM on PTB, output matrix tied to the input table C through an h×m projection P_o
(o = h·P_o, scored against C): the tied NNLM's output layer gets its own linear map into embedding space, as
Press & Wolf's PR gives the tied LSTM one (here without PR's penalty on it).

    python -m experiments.ptb --config=configs/nnlm_tied_proj.py --workdir=runs/ffnn/nnlm_tied_proj
"""
from configs import lm_base


def get_config():
  c = lm_base.feedforward("nnlm")
  c.name = "nnlm_tied_proj"
  c.words.mode = "tied"
  c.output_projection = True  # ours: P_o (200×200, no bias, no penalty) before the tied output layer
  return c
