"""word2vec skip-gram with one matrix for input and output (tied) — Press & Wolf (2017) Table 2, "tied".

    python -m experiments.word2vec --config=configs/w2v_tied.py --workdir=runs/w2v_tied
"""
from configs import w2v_untied


def get_config():
  c = w2v_untied.get_config()
  c.name = "w2v_tied"
  c.tying = "tied"
  return c
