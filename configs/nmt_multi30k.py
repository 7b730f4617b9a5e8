"""Attention NMT on Multi30k (task 1), sized to train in about an hour on a 2-core CPU — the base of the
three tying configs of Press & Wolf (2017) Table 8 (`nmt_multi30k_{baseline,dec_tied,three_way}.py`).

    python -m experiments.nmt --config=configs/nmt_multi30k_baseline.py --workdir=runs/nmt/ende_baseline
    python -m experiments.nmt --config=configs/nmt_multi30k_three_way.py --config.tgt_lang=fr --workdir=...

The paper's models are DL4MT's on WMT (embedding 500, hidden 1000, Adadelta, joint BPE with 89,500 merges;
see nmt_wmt.py). Multi30k is ~100× smaller, so the sizes here are scaled down (ours, not the paper's).
"""
import ml_collections


def get_config(tying: str = "none"):
  c = ml_collections.ConfigDict()
  c.name = f"nmt_multi30k_{tying}"
  c.tying = tying             # none | decoder (Press & Wolf "decoder WT") | three_way (Press & Wolf "three-way WT")
  c.joint_vocab = tying == "three_way"  # one vocabulary for both sides (required by three_way; Table 1 uses it)
  # Data.
  c.dataset = "multi30k"      # multi30k (../shared/data/multi30k) | wmt14_enfr | wmt15_ende (tensorflow-datasets)
  c.src_lang = "en"           # Press & Wolf translate EN→FR and EN→DE
  c.tgt_lang = "de"
  c.data_dir = ""             # "" → $WT_JAX_DATA → ~/.cache/wt_jax
  c.download = True
  c.bpe_vocab_size = 8000     # ours: joint sentencepiece BPE pieces (paper: 89,500 merges on WMT)
  c.buckets = (8, 16, 24, 32, 48, 64)  # ours: batches are padded to one of these lengths (one compile each)
  c.max_len = 50              # DL4MT maxlen 50: longer training pairs (in subwords) are skipped
  # Model (DL4MT: dim_word 500, dim 1000; scaled to the data and the CPU).
  c.emb_size = 256
  c.hidden_size = 256
  c.attention_size = 0        # 0 → hidden_size (DL4MT: the attention layer has the hidden size)
  c.dropout = 0.2             # ours (Nematus option; DL4MT's paper runs used none on WMT); Multi30k overfits
  c.init_scale = 0.01         # embeddings U(−s, s) (DL4MT: N(0, 0.01²))
  c.output_bias_init = "log_unigram"  # ours: start the softmax bias at log unigram frequencies (uniform: U(−s, s));
                                      # without it Adam saturates the decoder and training stalls (BUILD_NOTES §10)
  # Training.
  c.optimizer = "adam"        # adadelta (DL4MT / the paper) | adam (faster to converge in a CPU hour; ours)
  c.learning_rate = 1e-3      # adam: 1e-3; adadelta: 1.0 (a step scale; DL4MT's adadelta has none)
  c.adadelta_rho = 0.95       # DL4MT
  c.adadelta_eps = 1e-6       # DL4MT
  c.clip_norm = 1.0           # DL4MT clip_c = 1
  c.batch_size = 64           # sentence pairs (DL4MT batch_size 80)
  c.num_epochs = 10
  c.seed = 0
  c.num_devices = 0           # data parallelism over the first N devices; 0: all
  # Evaluation and decoding.
  c.eval_batch_size = 100
  c.beam_size = 5             # Nematus/DL4MT translate.py -k 5
  c.length_alpha = 1.0        # normalise finished hypotheses by length^α (Nematus -n: α = 1)
  c.decode_max_len = 128      # cap on 2·source length + 10
  c.log_every = 100           # steps between progress lines (and at least every 30 s)
  c.allow_resume_changes = False  # ours: resume with a config that differs from the folder's run.json (the
  #                                   changes are recorded there); otherwise such a resume stops with one line
  c.checkpoint_every_steps = 0  # mid-epoch checkpoints (0: only at epoch ends)
  c.profile_steps = 0         # >0: trace this many steps (after the first) into <workdir>/profile
  c.plot = True
  return c
