"""Zaremba et al. (2014) small LSTM LM on PTB, untied — Press & Wolf (2017) Table 6, row "small".

    python -m experiments.ptb --config=configs/small.py --workdir=runs/small

Paper (Press & Wolf Table 6, no dropout): 4.65M parameters, train 38.0 / valid 120.7 / test 114.5.
Every other small config starts from this one and changes only what its row changes.
"""
import ml_collections


def get_config():
  c = ml_collections.ConfigDict()
  c.name = "small"
  # Model.
  c.model = "lstm_lm"
  c.vocab_size = 10000        # PTB, Mikolov et al. (2011): 9,999 words + <eos>
  c.hidden_size = 200         # Zaremba small: 200 units; embedding size = hidden size
  c.num_layers = 2            # Zaremba: 2 LSTM layers
  c.dropout = 0.0             # Zaremba small: keep_prob 1.0 (no dropout)
  c.init_scale = 0.1          # Zaremba small: U(-0.1, 0.1)
  c.embedding_init_scale = 0.0  # ours, off: >0 draws the embedding/output layer from U(-s, s) instead
  c.embedding_row_norm = 0.0  # off; >0 holds every input-embedding row at this L2 norm (Inan §6.2: 1)
  c.tying = "untied"          # untied | tied | projection | tied_projection (Press & Wolf 2017)
  c.pr_lambda = 1.0 / 6.5     # Press & Wolf code: l2_loss(P) / (batch * 6.5); the paper rounds to 0.15
  c.proj_bias = True          # Press & Wolf code: proj_b (a bias after P)
  c.logit_scale = False       # optional D^-1/2 logit scale; not used by the papers
  c.output_bias = True        # softmax bias; Inan et al. (2017) "reused embeddings" (RE): tied and no bias
  # Inan et al. (2017) augmented loss (AL): cost += α·KL(ỹ‖ŷ), ŷ = softmax(logits/τ), ỹ = softmax(L·u_y/τ).
  c.al_gamma = 0.0            # α = γ·τ; 0 turns AL off (Inan: γ 0.5–0.8 on PTB, 1.0–1.5 on WikiText-2)
  c.al_tau = 20.0             # τ, Inan: 20
  c.al_embedding = "input"    # which matrix builds ỹ in an untied model: input (Inan's L) | output
  c.al_target_gradient = False  # ours: ỹ is a fixed target (no gradient through it); the paper leaves it open
  c.compute_dtype = "float32"  # ours; "bfloat16": bf16 matmul inputs, f32 sums (wt_jax/precision.py)
  # Optimisation.
  c.optimizer = "sgd"         # Zaremba: plain SGD
  c.learning_rate = 1.0       # Zaremba: lr 1
  c.lr_decay = 0.5            # Zaremba small: x0.5 per epoch once decay starts
  c.decay_after_epoch = 4     # Zaremba small: max_epoch 4 (epochs 1-5 at lr 1; see wt_jax/train/optim.py)
  c.num_epochs = 13           # Zaremba small: max_max_epoch 13
  c.clip_norm = 5.0           # Zaremba small: global-norm clip 5
  c.weight_decay = 0.0        # Zaremba: none
  c.weight_decay_mode = "decoupled"  # decoupled: p <- (p + u)(1 - wd) per step; loss: + wd/2 |theta|^2
  c.batch_size = 20           # Zaremba: batch 20
  c.bptt = 20                 # Zaremba small: num_steps 20
  c.seed = 0
  c.num_devices = 0           # data parallelism over the first N devices; 0: all (of every process)
  c.max_steps = 0             # >0: stop after this many train steps, then evaluate (smoke runs)
  # Data and evaluation.
  c.dataset = "ptb"
  c.data_dir = ""             # "" -> $WT_JAX_DATA -> ~/.cache/wt_jax (downloaded if missing)
  c.download = True
  c.eval_batch_size = 20      # validation as the reference: 20 streams, bptt windows
  c.test_window = 200         # batch-1 test: window length (state carried, so it only affects speed)
  c.test_params = "final"     # Zaremba / Press & Wolf code: test the final parameters ("best": by valid)
  c.eval_max_tokens = 0       # >0: evaluate on only the first N valid/test tokens (smoke runs; recorded)
  c.eval_mc_samples = 0       # >0: also test with Monte-Carlo dropout (Gal 2015), this many passes
  # Bookkeeping.
  c.log_every = 200           # steps between progress lines
  c.checkpoint_every_steps = 500  # mid-epoch checkpoints (0: only at epoch ends)
  c.plot = True
  return c
