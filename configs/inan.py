"""Inan, Khosravi & Socher (2017) Table 1: VD-LSTM language models with the augmented loss (AL), reused
embeddings (RE) and both (REAL), on PTB or WikiText-2.

    python -m experiments.ptb --config=configs/inan.py:small,real --workdir=runs/inan/small_real
    python -m experiments.ptb --config=configs/inan.py:medium,vd,wikitext2 --workdir=runs/inan/wt2_medium_vd

Argument: SIZE,VARIANT[,DATASET] with SIZE small (200 units) | medium (650) | large (1500); VARIANT vd (the
baseline VD-LSTM) | al | re | real; DATASET ptb (default) | wikitext2.
Paper (perplexity valid / test): PTB small 92.6 / 87.3 → REAL 86.3 / 82.7; medium 82.0 / 77.7 → 75.7 / 73.2;
large 76.8 / 72.6 → 71.1 / 68.5; WikiText-2 small 112.2 / 105.9 → 105.6 / 98.9.
Values marked "ours" are not taken from the paper (its optimisation details are not all reproduced here);
the schedule and clipping are Gal's (configs/large_bd.py), scaled to the model size as Zaremba's are.
"""
from configs import large_bd

SIZES = {  # hidden units (Inan), bptt / epochs / decay start / lr decay / init (Zaremba's per size; ours)
    "small": dict(hidden_size=200, bptt=20, num_epochs=40, decay_after_epoch=6, init_scale=0.1, dropout=0.5),
    "medium": dict(hidden_size=650, bptt=35, num_epochs=50, decay_after_epoch=10, init_scale=0.05,
                   dropout=0.5),
    "large": dict(hidden_size=1500, bptt=35, num_epochs=60, decay_after_epoch=10, init_scale=0.04,
                  dropout=0.65),
}
VARIANTS = ("vd", "al", "re", "real")


def get_config(arg: str = "small,vd"):
  parts = arg.split(",")
  size = parts[0]
  variant = parts[1] if len(parts) > 1 else "vd"
  dataset = parts[2] if len(parts) > 2 else "ptb"
  if size not in SIZES or variant not in VARIANTS or dataset not in ("ptb", "wikitext2"):
    raise ValueError(f"configs/inan.py:{arg}: expected SIZE,VARIANT[,DATASET] with SIZE in {list(SIZES)}, "
                     f"VARIANT in {list(VARIANTS)}, DATASET ptb or wikitext2.")
  s = SIZES[size]
  c = large_bd.get_config()
  c.name = f"inan_{size}_{variant}" + ("" if dataset == "ptb" else f"_{dataset}")
  c.dataset = dataset
  c.vocab_size = 10000 if dataset == "ptb" else 33278  # PTB / WikiText-2 v1 (with <unk>, <eos>)
  c.hidden_size = s["hidden_size"]                     # Inan: 200 / 650 / 1500
  c.bptt, c.num_epochs, c.decay_after_epoch, c.init_scale = s["bptt"], s["num_epochs"], s["decay_after_epoch"], \
      s["init_scale"]                                  # ours (Zaremba's per-size values)
  # VD-LSTM as Inan describe it: one mask per layer state, no dropout on the input embedding.
  c.mask_per_gate = False
  c.tie_state_masks = True
  c.dropout_i = 0.0           # Inan: no dropout on the input embedding
  c.dropout_x = 0.0           # (no word-type dropout either)
  c.dropout_h = s["dropout"]  # ours: the state masks' drop probability
  c.dropout_o = s["dropout"]  # (unused with tie_state_masks: the top state's mask is used)
  c.weight_decay = 0.0
  c.words.mode = "tied" if variant in ("re", "real") else "untied"
  c.words.output_bias = variant not in ("re", "real")      # Inan RE: W = Lᵀ and no output bias
  c.al.tau = 20.0             # Inan: τ = 20
  # Inan: α = γτ with γ in 0.5–0.8 (PTB) / 1.0–1.5 (WikiText-2); γ the middle of each range (ours)
  gamma = {"ptb": 0.65, "wikitext2": 1.25}[dataset]
  c.al.alpha = gamma * c.al.tau if variant in ("al", "real") else 0.0
  # Ours (the paper does not say): the AL target ỹ carries a gradient. With a fixed target and a tied matrix
  # without output bias, frequent words' rows can grow into hubs that dominate every ỹ (BUILD_NOTES §11).
  c.al.target_gradient = variant in ("al", "real")
  return c
