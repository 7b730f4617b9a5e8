"""word2vec skip-gram with negative sampling, untied (input U and output V) — Press & Wolf (2017) Table 2.

    python -m experiments.word2vec --config=configs/w2v_untied.py --workdir=runs/w2v_untied

Defaults are word2vec.c's for skip-gram (`-cbow 0`), which gensim shares.
"""
import ml_collections


def get_config():
  c = ml_collections.ConfigDict()
  c.name = "w2v_untied"
  c.model = "skipgram"
  c.tying = "untied"          # untied | tied (one matrix for both roles)
  c.dim = 100                 # word2vec.c -size 100 (gensim vector_size=100)
  c.window = 5                # word2vec.c -window 5: dynamic window b ~ U{1..5}
  c.min_count = 5             # word2vec.c -min-count 5
  c.sample = 1e-3             # word2vec.c -sample 1e-3 (frequent-word subsampling)
  c.negatives = 5             # word2vec.c -negative 5
  c.noise_power = 0.75        # word2vec.c: unigram^0.75 noise
  c.learning_rate = 0.025     # word2vec.c skip-gram -alpha 0.025, decaying linearly to 1e-4 of it
  c.num_epochs = 5            # word2vec.c -iter 5
  c.batching = "pairs"        # ours: pairs (shuffled host pairs) | windows (the text in order, windows formed on the
  #                             device: wt_jax.train.skipgram)
  c.shared_negatives = False  # windows: one noise set a window (BlazingText, Gupta & Khare 2017) instead of a set a
  #                             pair (word2vec.c)
  c.batch_size = 256          # ours: pairs (batching=pairs) or centres (windows) per SGD step (word2vec.c updates
  #                             after every pair)
  c.steps_per_call = 64       # ours: SGD steps per compiled call (a scan; the same updates as one per call)
  c.sparse_updates = True     # SGD on the touched rows only, as word2vec.c (False: optax's dense update)
  c.seed = 0
  c.num_devices = 0           # data parallelism over the first N devices; 0: all
  # Data.
  c.dataset = "ptb"           # ptb (train split, a line a sentence) | wikitext2 (train, a paragraph a sentence)
                              # | text8 (Press & Wolf's corpus for Table 2; 1,000-word pieces as word2vec.c)
  c.data_dir = ""             # "" -> $WT_JAX_DATA -> ~/.cache/wt_jax
  c.download = True
  c.log_every = 500           # steps between progress lines (and at least every 30 s)
  c.allow_resume_changes = False  # ours: resume with a config that differs from the folder's run.json (the
  #                                   changes are recorded there); otherwise such a resume stops with one line
  c.checkpoint_every_steps = 0  # mid-epoch checkpoints (0: only at epoch ends)
  c.profile_steps = 0         # >0: trace this many compiled calls (after the first) into <workdir>/profile
  c.plot = False              # (no validation curve to draw)
  return c
