"""A CPU-sized tied Transformer LM (`wt_jax.models.transformer_lm`): tying and the embedding-scale question.

    python -m experiments.ptb --config=configs/transformer.py --workdir=runs/transformer/ptb_tied_none
    python -m experiments.ptb --config=configs/transformer.py:untied,sqrt_d,wikitext2 --workdir=runs/...

Argument: MODE[,SCALE[,DATASET]] with MODE a tying mode (untied | tied | projection | tied_projection;
default tied), SCALE where the shared matrix's size is corrected:
  none    (default) neither (GPT-2)
  sqrt_d  the looked-up embedding × √D before the first block (Vaswani et al. 2017, Section 3.4; Gemma)
  logits  the logits × 1/√D (`words.logit_scale`; T5's scale), at the init of every other matrix
  t5      the logits × 1/√D with T5's embedding init, standard deviation 1 (`words.init_scale` = √3)
  t5_steps  t5, with the word matrix's Adam steps × its init scale over the other matrices' (≈ 49.5,
          `words.lr_scale`): its steps relative to its size as the others', as T5's Adafactor gives it
and DATASET ptb (default) | wikitext2.

Not a paper row: every value below is ours, chosen so that one PTB run fits about an hour on a 2-core CPU
(4 blocks of D = 256, 4 heads, feed-forward 1024: Vaswani et al.'s base proportions at half the width and a
third of the depth). Adam with a linear warm-up, then ×0.5 per epoch after the third. Windows of 64 tokens,
each preceded by the previous window's last 32 as context (`memory`), so every scored token sees 32–95
earlier tokens; the batch-1 test uses the same windows (`test_window = bptt`; learned positions cover
memory + bptt slots).

Expected on PTB (seed 0, 6 epochs, ≈ 45 min each on 2 CPU cores; valid / test, batch-1 test protocol above;
results/transformer_ptb): tied none 120.3 / 112.9, sqrt_d 114.0 / 106.9, logits 285.3 / 267.9,
t5 194.7 / 185.2, t5_steps 121.6 / 113.7; untied none 131.4 / 123.5, sqrt_d 122.7 / 114.4; tied_projection
none 140.6 / 132.1. On WikiText-2 (2–3 h each alone on 2 CPU cores; results/transformer_wikitext2): tied sqrt_d
133.1 / 125.2, untied sqrt_d 154.2 / 145.4.
"""
from configs import lm_base

MODES = ("untied", "tied", "projection", "tied_projection")
SCALES = ("none", "sqrt_d", "logits", "t5", "t5_steps")


def get_config(arg: str = "tied,none,ptb"):
  parts = arg.split(",")
  mode, scale, dataset = (parts + ["tied", "none", "ptb"][len(parts):])[:3]
  if mode not in MODES or scale not in SCALES or dataset not in ("ptb", "wikitext2") or len(parts) > 3:
    raise ValueError(f"configs/transformer.py:{arg}: expected MODE[,SCALE[,DATASET]] with MODE in {list(MODES)}, "
                     f"SCALE in {list(SCALES)}, DATASET ptb or wikitext2.")
  c = lm_base.get_config()
  c.name = f"transformer_{mode}_{scale}" + ("" if dataset == "ptb" else f"_{dataset}")
  c.model = "transformer_lm"
  c.dataset = dataset
  c.vocab_size = 10000 if dataset == "ptb" else 33278
  c.words.mode = mode
  c.words.input_scale = scale == "sqrt_d"
  c.words.logit_scale = scale in ("logits", "t5", "t5_steps")
  c.words.init_scale = 3 ** 0.5 if scale in ("t5", "t5_steps") else 0.0  # U(−√3, √3): std 1 (T5's init)
  c.hidden_size = 256         # ours: the model size D (= the embedding size)
  c.num_layers = 4            # ours: blocks
  c.num_heads = 4             # ours: heads of 64
  c.mlp_size = 1024           # 4·D (Vaswani et al.)
  c.memory = 32               # ours: tokens of the previous window in front of each window
  c.dropout = 0.3             # ours: embedding and residual dropout (PTB overfits a Transformer of this size)
  c.init_scale = 0.035        # U(−0.035, 0.035): standard deviation 0.02 (GPT-2's)
  c.words.lr_scale = c.words.init_scale / c.init_scale if scale == "t5_steps" else 1.0  # ≈ 49.5
  c.optimizer = "adam"
  c.learning_rate = 1e-3      # ours
  c.warmup_steps = 500        # ours: linear warm-up
  c.lr_decay = 0.5            # ours: ×0.5 per epoch once decaying
  c.decay_after_epoch = 2     # ours: epochs 1–3 at the full rate
  c.num_epochs = 6            # ours: about an hour on PTB on a 2-core CPU
  c.clip_norm = 1.0           # ours
  c.batch_size = 20
  c.bptt = 64                 # ours
  c.eval_batch_size = 20
  c.test_window = 64          # the batch-1 test on the training windows' shape (module docstring)
  return c
