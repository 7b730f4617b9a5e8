"""Bengio et al. (2003) feed-forward neural LM on PTB, untied (`nnlm_tied.py`: output matrix = input table C).

    python -m experiments.ptb --config=configs/nnlm.py --workdir=runs/nnlm

Sizes in the lecture notes (notes_neural_lm, "Number of Parameters", for Bengio et al. 2003): n − 1 = 5,
d ∈ {30, 60}, H ∈ {50, 100}, V ≈ 18,000; their count D = 461V + 30,100 ≈ 8.3M is d = 60, H = 100. The
notes' copy of Bengio et al.'s Brown-corpus Table 1 has n ∈ {3, 5}, h ∈ {0, 50, 100}, m ∈ {30, 60}. The
sizes here (n − 1 = 4, m = h = 200) are ours for PTB on a CPU, chosen with hidden = m so that the output
layer acts in embedding space and can be tied without a projection. Without direct connections (A = 0) the untied count is the notes' D with the A term dropped:
Vd + V + VH + H + (n − 1)dH = 4,170,200 at V = 10,000.
"""
from configs import lm_base


def get_config():
  c = lm_base.feedforward("nnlm")
  return c
