"""Inan, Khosravi & Socher (2017) Section 6.2: how the augmented loss (AL) pulls the output projection into
the input embedding's subspace. A 2-layer, 300-unit LSTM LM, untied and without regularisation, trained on a
short contiguous span of PTB with the loss (1 − β)·CE + β·τ·KL(ỹ‖ŷ) (AL proportion β, temperature τ); after
training, the subspace distance between the input embedding L and the output projection W
(`wt_jax.analysis.embeddings.subspace_distance`). Swept by `python -m experiments.inan_sweep`.

    python -m experiments.inan_sweep --workdir=runs/inan_sec62               # both sweeps (Inan Figure 1)
    python -m experiments.ptb --config=configs/inan_sec62.py --workdir=/tmp/one  # one point: β=0.5, τ=20

The paper gives the model (2 × 300 LSTM, no regularisation) but, as far as this project knows, not the
span's length, the schedule or the exact mixing; those values are ours and marked so.
"""
from configs import small


def get_config():
  c = small.get_config()
  c.name = "inan_sec62"
  c.hidden_size = 300         # Inan Section 6.2: 2-layer LSTM, 300 units
  c.num_layers = 2
  c.dropout = 0.0             # Inan Section 6.2: no regularisation
  c.tying = "untied"          # the measured distance is between L and W, so they must be two leaves
  c.train_max_tokens = 20000  # ours: the "short contiguous span" (the first 20k tokens of PTB train)
  c.num_epochs = 20           # ours: 50 steps per epoch at 20 × 20, 1,000 steps in all
  c.decay_after_epoch = 10    # ours: lr 1 for 11 epochs, then × 0.5 per epoch (Zaremba small's shape)
  c.al_gamma = 0.5            # AL proportion β: cost (1 − β)·CE + β·τ·KL, i.e. α = γτ with γ = β
  c.al_ce_weight = 0.5        # 1 − β (the sweep sets both)
  c.al_tau = 20.0             # Inan: τ = 20
  c.eval_max_tokens = 10000   # ours: validate / test on the first 10k tokens (the measurement is the distance)
  c.checkpoint_every_steps = 0
  c.log_every = 50
  c.plot = False
  return c
