"""Every language-model setting, declared once with its default, so any key can be overridden on the
command line for any LM config (`--config.al.alpha=13`, `--config.words.mode=tied`, ...). The config is
locked: the paper-row files below it only change values.

The defaults are Zaremba et al. (2014)'s small LSTM on PTB, untied, as Press & Wolf (2017) train it
(`configs/small.py`); the keys of the other model families (RHN, variational LSTM, NNLM/LBL) are declared
here with neutral values. Each family's settings are a function below (`zaremba`, `large_bd`, `rhn`,
`feedforward`) that a paper row's file starts from, so a row reads in two files: its own and this one. Groups:
  config.words  the embedding and output layer (`wt_jax.tying.WordEmbeddings`)
  config.al     Inan et al. (2017)'s augmented loss (`wt_jax.losses.make_lm_cost`)
  config.softmax  the training cost's softmax: full, or an approximation over the word matrix (`wt_jax.softmax`)
"""
import ml_collections


def get_config():
  c = ml_collections.ConfigDict()
  c.name = "lm"
  # Model.
  c.model = "lstm_lm"         # lstm_lm | bd_lstm_lm | rhn_lm | nnlm | lbl | transformer_lm (wt_jax.models)
  c.vocab_size = 10000        # PTB, Mikolov et al. (2011): 9,999 words + <eos>
  c.hidden_size = 200         # Zaremba small: 200 units; embedding size = hidden size
  c.num_layers = 2            # Zaremba: 2 LSTM layers
  c.dropout = 0.0             # Zaremba small: keep_prob 1.0 (no dropout); lstm_lm, nnlm, lbl
  c.init_scale = 0.1          # Zaremba small: U(-0.1, 0.1)
  c.compute_dtype = "float32"  # ours; "bfloat16": bf16 matmul inputs, f32 sums (wt_jax/precision.py)
  c.matmul_precision = "default"  # float32 matmuls: "default" (the backend's: TF32 on an A100/H100, one bf16
  #                                 pass on a TPU, exact on a CPU) | "float32" (exact everywhere, as the papers'
  #                                 pre-TF32 GPUs) | "tensorfloat32" (wt_jax/precision.py)
  # The word layers (`wt_jax.tying`): how input embedding and softmax share parameters.
  w = c.words = ml_collections.ConfigDict()
  w.mode = "untied"           # untied | tied | projection | tied_projection (Press & Wolf 2017)
  w.pr_lambda = 1.0 / 6.5     # Press & Wolf code: l2_loss(P) / (batch * 6.5); the paper rounds to 0.15
  w.proj_bias = True          # Press & Wolf code: proj_b (a bias after P)
  w.output_bias = True        # softmax bias; Inan et al. (2017) "reused embeddings" (RE): tied and no bias
  w.logit_scale = False       # optional D^-1/2 logit scale; not used by the papers
  w.input_scale = False       # optional D^1/2 scale of the looked-up embedding (Vaswani et al. 2017); transformer_lm
  w.init_scale = 0.0          # ours, off: >0 draws the embedding/output layer from U(-s, s) (lstm_lm, transformer_lm)
  w.row_norm = 0.0            # off; >0 holds every input-embedding row at this L2 norm (Inan Section 6.2: 1)
  w.lr_scale = 1.0            # ours, off (1): × the optimiser's steps of embedding and out_embedding
  # Inan et al. (2017)'s augmented loss: cost = w_ce·CE + α·KL(ỹ‖ŷ), ŷ = softmax(logits/τ),
  # ỹ = softmax(L·u_y/τ).
  a = c.al = ml_collections.ConfigDict()
  a.alpha = 0.0               # α, the AL's weight; 0 turns it off (Inan: α = γτ; γ's ranges: configs/inan.py)
  a.tau = 20.0                # τ, the temperature (Inan Appendix A; blank in our text: configs/inan.py)
  a.embedding = "input"       # which matrix builds ỹ in an untied model: input (Inan's L) | output
  a.target_gradient = False   # False: ỹ is a fixed target (gradient through ŷ only)
  a.ce_weight = 1.0           # w_ce, the cross-entropy's weight (Inan Section 6.2 mixes (1 − β)·CE + ...)
  # The training cost's softmax (`wt_jax.softmax`); evaluation is always exact. Not in the papers, which
  # train with the full softmax: the approximations of the lecture notes' "Softmax approximations".
  s = c.softmax = ml_collections.ConfigDict()
  s.kind = "full"             # full | sampled (importance sampling of the normaliser, Bengio & Senécal 2008, the
  #                             target's term exact: not TensorFlow's sampled_softmax_loss, which also corrects
  #                             the target by log Q) | nce (Mnih & Teh 2012) | class (Goodman 2001)
  s.num_samples = 1000        # K draws per step from Q, with replacement, shared by the batch (sampled, nce); ours:
  #                             ~V/10 on PTB, a tenth of the full output layer's multiply-adds. K = 1,000
  #                             log-uniform draws on PTB are ≈ 537 distinct rows (softmax.expected_distinct)
  s.proposal = "log_uniform"  # Q: log_uniform over frequency rank (TensorFlow's default sampler) | unigram
  s.unigram_power = 0.75      # Q ∝ count^power with proposal=unigram (Mikolov et al. 2013's 3/4)
  s.remove_accidental_hits = True  # sampled: drop candidates equal to the target (TensorFlow's default)
  s.nce_start_normalised = True  # nce: the output bias starts at −log V (+ the usual U(−s, s)), so Σ_w exp s_w ≈ 1
  #                             from the first step; rows NCE never scores keep it (BUILD_NOTES §23: without it the
  #                             unreached rows keep s ≈ 0 and swamp the exact normaliser)
  s.num_classes = 100         # class: frequency bins, ≈ √V (Mikolov et al. 2011)
  s.class_power = 0.5         # class: bins of equal Σ count^power; 0.5 is the RNNLM toolkit's default, 1 plain
  #                             frequency binning
  s.class_bounds = ()         # class: filled from the training counts at the start (wt_jax.softmax.resolve)
  # Variational dropout (bd_lstm_lm, rhn_lm): drop probabilities, one mask per window (Gal 2015).
  c.dropout_x = 0.0           # word types of the embedding
  c.dropout_i = 0.0           # each layer's input
  c.dropout_h = 0.0           # the recurrent state
  c.dropout_o = 0.0           # the top layer's output
  c.mask_per_gate = True      # bd_lstm_lm: a mask per gate (Gal's code) or one shared
  c.tie_state_masks = False   # bd_lstm_lm: Inan et al.'s VD-LSTM (one mask per state, up and across)
  # Recurrent Highway Network (rhn_lm; Zilly et al. 2017).
  c.depth = 10                # micro-layers per time step
  c.transform_bias = -2.0     # transform-gate bias at start
  c.remat = False             # recompute each time step's micro-layers in the backward pass (memory)
  c.scan_unroll = 0           # ours: time steps per compiled loop iteration of the recurrences (lstm_lm,
  #                             bd_lstm_lm, rhn_lm); the same arithmetic, fewer loop trips. 0: automatic (the
  #                             whole window for the LSTMs on a GPU, else 1: lstm_lm.loop_unroll, BUILD_NOTES §24)
  # Feed-forward LMs (nnlm, lbl).
  c.context = 4               # n − 1 previous words
  c.emb_size = 200            # m
  c.output_projection = False  # nnlm: an h×m projection before the (tied) output layer
  c.direct = False            # nnlm: Bengio's direct connections from the context to the output
  # Transformer LM (transformer_lm; hidden_size is the model size, num_layers the blocks, dropout residual).
  c.num_heads = 4             # attention heads (hidden_size must be a multiple)
  c.mlp_size = 1024           # the feed-forward sub-layer's width (Vaswani et al.: 4 × the model size)
  c.memory = 0                # tokens of the previous window re-read as context (the carry; no loss on them)
  # Optimisation.
  c.optimizer = "sgd"         # Zaremba: plain SGD (or adam)
  c.learning_rate = 1.0       # Zaremba: lr 1
  c.lr_decay = 0.5            # Zaremba small: x0.5 per epoch once decay starts
  c.decay_after_epoch = 4     # Zaremba small: max_epoch 4 (epochs 1-5 at lr 1; see wt_jax/train/optim.py)
  c.num_epochs = 13           # Zaremba small: max_max_epoch 13
  c.clip_norm = 5.0           # Zaremba small: global-norm clip 5
  c.warmup_steps = 0          # >0: the learning rate rises linearly over the first N steps (Transformers)
  c.weight_decay = 0.0        # Zaremba: none
  c.weight_decay_mode = "decoupled"  # decoupled: p <- (p + u)(1 - wd) per step; loss: + wd/2 |theta|^2
  c.batch_size = 20           # Zaremba: batch 20
  c.bptt = 20                 # Zaremba small: num_steps 20
  c.seed = 0
  # Members (wt_jax.members): K models in one compiled program, sharing the data order. 0: one model.
  c.members = 0               # K > 0: K members, seeds seed … seed + K − 1 (unless member_values lists seeds)
  c.member_values = ""        # per-member values of keys that change no shape: "al.alpha=6.5,13;dropout_h=0.4,0.5"
  #                             (and per-member config names: "name=a,b", wt_jax.members.combine)
  c.member_devices = 0        # devices the member axis is split over (the rest split the batch); 0: gcd(K, devices)
  c.init_from = ""            # a folder of initial parameters (`python -m experiments.export --convert=...`)
  c.num_devices = 0           # data parallelism over the first N devices; 0: all (of every process)
  c.max_steps = 0             # >0: stop after this many train steps, then evaluate (smoke runs)
  c.train_max_tokens = 0      # >0: train on the first N tokens of the training stream only (Inan Section 6.2)
  # Data and evaluation.
  c.dataset = "ptb"           # ptb | wikitext2[_half1 | _half2] | bbc | imdb | text (wt_jax.data.lm_corpora)
  c.data_dir = ""             # "" -> $WT_JAX_DATA -> ~/.cache/wt_jax (downloaded if missing); text: the folder of
  #                             train.txt, valid.txt, test.txt (wt_jax.data.text_corpus)
  # dataset=text only (ours): how your text becomes tokens; vocab_size is then the vocabulary's cap
  c.tokenizer = "word"        # word (whitespace, <eos> per line: PTB's reader) | sentencepiece (subword pieces)
  c.lowercase = False         # lower-case the text first
  c.numbers_as_n = False      # write each number token N, as Mikolov's PTB does
  c.min_count = 0             # word: words seen fewer times in the training text are <unk>
  c.subword_model = "bpe"     # sentencepiece: bpe (Sennrich et al. 2016) | unigram (Kudo 2018)
  c.download = True
  c.eval_batch_size = 20      # validation as the reference: 20 streams, bptt windows
  c.test_window = 200         # batch-1 test: window length (state carried, so it only affects speed)
  c.test_params = "final"     # Zaremba / Press & Wolf code: test the final parameters ("best": by valid)
  c.eval_max_tokens = 0       # >0: evaluate on only the first N valid/test (and eval_train) tokens (smoke runs)
  c.eval_mc_samples = 0       # >0: also test with Monte-Carlo dropout (Gal 2015), this many passes
  c.eval_train = False        # True: also the training text without dropout, tested parameters (`train_ppl_eval`)
  # Bookkeeping.
  c.log_every = 200           # steps between progress lines (and at least every 30 s)
  c.checkpoint_every_steps = 500  # mid-epoch checkpoints (0: only at epoch ends)
  c.allow_resume_changes = False  # ours: resume with a config that differs from the folder's run.json (the
  #                                   changes are recorded there); otherwise such a resume stops with one line
  c.checkpoint_every_epochs = 1  # `last` (and `best`, if it changed) at every N-th epoch end and the final one;
  #                               0: the final one only (runs that must finish in one window)
  c.profile_steps = 0         # >0: trace this many steps (after the first) into <workdir>/profile
  c.plot = True
  c.deterministic = False     # ours: XLA:GPU's deterministic kernels (XLA_FLAGS --xla_gpu_deterministic_ops=true,
  #                             set by experiments.ptb before JAX starts: experiments.apply_determinism); recorded in
  #                             run.json and results.json (`host.xla_flags`). The CPU is deterministic already
  return c.lock()  # every key is declared above: a misspelt or undeclared key is an error, not a new key


# --- the model families: each paper row's file starts from one of these ------------------------------------

def zaremba(size: str):
  """Zaremba et al. (2014)'s LSTM LM of `size` small | medium | large (Press & Wolf Tables 5 and 6), untied."""
  c = get_config()
  c.name = size
  if size == "medium":
    c.hidden_size = 650         # Zaremba medium: 650 units
    c.dropout = 0.5             # Zaremba medium: keep_prob 0.5
    c.init_scale = 0.05         # Zaremba medium: U(-0.05, 0.05)
    c.lr_decay = 0.8            # Zaremba medium (TF reference): x0.8 per epoch
    c.decay_after_epoch = 6     # Zaremba medium: max_epoch 6
    c.num_epochs = 39           # Zaremba medium: max_max_epoch 39
    c.clip_norm = 5.0           # Zaremba medium: clip 5
    c.bptt = 35                 # Zaremba medium: num_steps 35
  elif size == "large":
    c.hidden_size = 1500        # Zaremba large: 1500 units
    c.dropout = 0.65            # Zaremba large: keep_prob 0.35
    c.init_scale = 0.04         # Zaremba large: U(-0.04, 0.04)
    c.lr_decay = 1.0 / 1.15     # Zaremba large: lr / 1.15 per epoch
    c.decay_after_epoch = 14    # Zaremba large: max_epoch 14
    c.num_epochs = 55           # Zaremba large: max_max_epoch 55
    c.clip_norm = 10.0          # Zaremba large: clip 10
    c.bptt = 35                 # Zaremba large: num_steps 35
  elif size != "small":
    raise ValueError(f"zaremba: size small | medium | large, not {size!r}.")
  return c


def large_bd():
  """The large LSTM with Gal (2015)'s variational dropout (`bd_lstm_lm`), as Press & Wolf's Table 5 trains it
  ("BD"; Gal's code), untied and without weight decay."""
  c = zaremba("large")
  c.name = "large_bd"
  c.model = "bd_lstm_lm"
  c.dropout = 0.0             # (unused: Zaremba's per-step dropout is replaced by the four variational rates)
  c.dropout_x = 0.3           # Gal / Press & Wolf code: word-type embedding dropout 0.3
  c.dropout_i = 0.5           # ... each layer's input, one mask per gate: 0.5
  c.dropout_h = 0.3           # ... recurrent state, one mask per gate: 0.3
  c.dropout_o = 0.5           # ... top layer's output: 0.5
  c.mask_per_gate = True      # Gal's code: separate masks per gate (its faster shared-mask variant is worse)
  c.tie_state_masks = False   # True: Inan et al. (2017)'s VD-LSTM (one mask per state, up and across)
  c.init_scale = 0.04         # Gal code: every parameter, biases included, U(-0.04, 0.04)
  c.learning_rate = 1.0       # Gal code: lr 1
  c.lr_decay = 1.0 / 1.15     # Gal code: lr / 1.15 per epoch once decaying
  c.decay_after_epoch = 10    # Gal code: max_epoch 10 (decays after epoch 11 ends; same convention as small)
  c.num_epochs = 55           # Gal code: max_max_epoch 55
  c.clip_norm = 10.0          # Gal code: max_grad_norm 10
  c.bptt = 35                 # Gal code: seq_length 35
  c.weight_decay = 0.0        # this row: no weight decay (large_bd_wd.py has 1e-7)
  c.weight_decay_mode = "decoupled"  # Gal code: paramx:add(-wd, paramx) after each SGD step
  # Press & Wolf Table 5's BD train values (24.3 / 28.2) lie far below the dropout-on running perplexity that
  # Gal's code prints (76.7 at the end of his log): record the training text without dropout beside it.
  c.eval_train = True
  return c


def rhn():
  """Zilly et al. (2017)'s Recurrent Highway Network LM (Press & Wolf Table 5, "RHN + BD"), untied: the RHN
  authors' `ptb_sota` settings (jzilly/RecurrentHighwayNetworks, rhn_train.py)."""
  c = get_config()
  c.name = "rhn"
  c.model = "rhn_lm"
  c.num_layers = 1            # RHN code ptb_sota: num_layers 1
  c.depth = 10                # ... recurrence depth 10
  c.hidden_size = 830         # ... hidden_size 830 (embedding size = hidden size)
  c.dropout_x = 0.25          # ... drop_x (word-type embedding dropout)
  c.dropout_i = 0.75          # ... drop_i (layer input)
  c.dropout_h = 0.25          # ... drop_h (recurrent state, the same mask at every micro-layer)
  c.dropout_o = 0.75          # ... drop_o (output)
  c.init_scale = 0.04         # ... init_scale: U(-0.04, 0.04)
  c.transform_bias = -2.0     # ... init_bias: transform-gate biases start at -2
  c.remat = False             # ours: jax.checkpoint each time step (recompute the 10 micro-layers)
  c.learning_rate = 0.2       # ... learning_rate 0.2
  c.lr_decay = 1.0 / 1.02     # ... lr / 1.02 per epoch once decaying
  # RHN code: lr / lr_decay ** max(i - max_epoch + 1, 0) for 0-based epoch i, max_epoch 20: epochs 1-20 at
  # 0.2, decaying from epoch 21. In our convention (epochs 1..decay_after_epoch+1 at full lr) that is 19.
  c.decay_after_epoch = 19
  c.num_epochs = 500          # ... max_max_epoch 500 (trained to convergence, best-by-valid kept)
  c.clip_norm = 10.0          # ... max_grad_norm 10
  c.batch_size = 20           # ... batch_size 20
  c.bptt = 35                 # ... num_steps 35
  c.weight_decay = 1e-7       # ... weight_decay 1e-7, added to the cost as wd * sum(l2_loss(v))
  c.weight_decay_mode = "loss"
  c.test_params = "best"      # ... restores the best-by-valid model before the final test
  return c


def feedforward(model: str):
  """A feed-forward LM on PTB: Bengio et al. (2003)'s NNLM (`model` "nnlm") or Mnih & Hinton (2007)'s
  log-bilinear LM ("lbl"), untied. Neither paper reports PTB: the sizes and schedule are ours where marked
  (the lecture notes' values in brackets)."""
  c = get_config()
  c.name = model
  c.model = model
  c.context = 4               # n − 1 previous words (notes: n − 1 = 5; Brown table n = 3 or 5)
  c.emb_size = 200            # m = d (ours; notes: 30 or 60)
  c.hidden_size = 200         # nnlm: h = H tanh units (ours, = m so tying needs no projection; notes: 50 or 100)
  c.output_projection = False  # nnlm: True puts an h×m projection before the (tied) output layer
  c.direct = False            # nnlm: Bengio's direct connections from the context to the output (never tied)
  c.dropout = 0.3             # ours: PTB overfits a feed-forward LM quickly
  c.optimizer = "adam"        # ours (Bengio et al.: SGD with a decreasing rate)
  c.learning_rate = 1e-3
  c.lr_decay = 0.5
  c.decay_after_epoch = 4
  c.num_epochs = 10
  c.batch_size = 64           # ours: no recurrence, so wider batches are cheap
  c.bptt = 20                 # positions per window (the context crosses windows through the carry)
  return c
