"""Medium (650-unit) Zaremba LSTM LM with weight tying (WT).

    python -m experiments.ptb --config=configs/medium_tied.py --workdir=runs/medium_tied

Untied: 19,775,200 parameters; tied: 13,275,200. No paper row is this model: Press & Wolf (2017) report only
the small (Tables 3, 6, 7) and large (Tables 4, 5) Zaremba models, and their Table 5 has no medium row. The
nearest published numbers are Inan et al. (2017), Table 1, medium (650 units) VD-LSTM + RE on PTB, valid 77.1 /
test 73.9 — a different model (variational dropout, tied without an output bias; `configs/inan.py:medium,re`).
"""
from configs import lm_base


def get_config():
  c = lm_base.zaremba("medium")
  c.name = "medium_tied"
  c.words.mode = "tied"
  return c
