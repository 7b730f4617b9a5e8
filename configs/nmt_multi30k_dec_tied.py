"""Attention NMT on Multi30k EN→DE (EN→FR with --config.tgt_lang=fr), tying `decoder` — Press & Wolf (2017)
Table 8, row "decoder WT" (the paper's numbers are on WMT; see configs/nmt_multi30k.py).

    python -m experiments.nmt --config=configs/nmt_multi30k_dec_tied.py --workdir=runs/nmt/ende_dec_tied
"""
from configs import nmt_multi30k


def get_config():
  return nmt_multi30k.get_config("decoder")
