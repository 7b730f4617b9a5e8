"""Mnih & Hinton (2007) log-bilinear LM on PTB, with one representation table for context and target words
(the original model: tied). `lbl_untied.py` uses separate tables.

    python -m experiments.ptb --config=configs/lbl.py --workdir=runs/lbl
"""
from configs import nnlm


def get_config():
  c = nnlm.get_config()
  c.name = "lbl"
  c.model = "lbl"
  c.words.mode = "tied"            # Mnih & Hinton: the same R for context and next word
  c.context = 4               # n − 1 (Mnih & Hinton: n − 1 = 5 on AP News)
  c.emb_size = 200            # m (ours; Mnih & Hinton: 100)
  c.dropout = 0.3             # ours
  return c
