"""Inan, Khosravi & Socher (2017) Section 6.2: how the augmented loss (AL) pulls the output projection into
the input embedding's subspace. A 2-layer, 300-unit LSTM LM, untied and without regularisation, trained on a
short contiguous span of PTB with the loss (1 − β)·CE + β·τ²·|V|·KL(ỹ‖ŷ) (AL proportion β, temperature τ;
the paper's eq. (18)), the rows of L held at norm 1; after training, the subspace distance between the input
embedding L and the output projection W (`wt_jax.analysis.embeddings.subspace_distance`). Swept by
`python -m experiments.studies.inan_sweep`.

    python -m experiments.studies.inan_sweep --workdir=runs/inan_sec62_paper          # both sweeps (Inan Figure 1)
    python -m experiments.ptb --config=configs/inan_sec62.py --workdir=/tmp/one  # one point: β=0.5, τ=10

The paper gives the model (2 × 300 LSTM, no regularisation, a random 20,000-word contiguous span, L's rows
at norm 1) and the loss, not the schedule or which span; those values are ours and marked so.
"""
from configs import lm_base


def get_config():
  c = lm_base.get_config()
  c.name = "inan_sec62"
  c.hidden_size = 300         # Inan Section 6.2: 2-layer LSTM, 300 units
  c.num_layers = 2
  c.dropout = 0.0             # Inan Section 6.2: no regularisation
  c.words.mode = "untied"          # the measured distance is between L and W, so they must be two leaves
  c.train_max_tokens = 20000  # Inan: a 20,000-word contiguous span (theirs random; ours the first 20k of train)
  c.words.row_norm = 1.0  # Inan Section 6.2: each row of the input embedding constrained to norm 1
  c.num_epochs = 20           # ours: 49 steps per epoch (20 rows of 1,000 tokens, 20 × 20 windows), 980 in all
  c.decay_after_epoch = 10    # ours: lr 1 for 11 epochs, then × 0.5 per epoch (Zaremba small's shape)
  # One point, β = 0.5 at τ = 10: cost (1 − β)·CE + α·KL with Inan's α = β·τ²·|V| (eq. (18)). The sweep
  # sets all three per point.
  c.al.tau = 10.0             # Inan Figure 1a: τ = 10
  c.al.alpha = 0.5 * c.al.tau ** 2 * 10000  # β·τ²·|V|
  c.al.ce_weight = 0.5        # 1 − β
  c.eval_max_tokens = 10000   # ours: validate / test on the first 10k tokens (the measurement is the distance)
  c.checkpoint_every_steps = 0
  c.log_every = 50
  c.plot = False
  return c
