"""Press & Wolf (2017) Table 8's full-size NMT (DL4MT on WMT), for users with a network and an accelerator.

    pip install -e '.[wmt]'      # tensorflow-datasets and TensorFlow (TFDS's WMT builders need it)
    python -m experiments.nmt --config=configs/nmt_wmt.py:three_way,wmt15_ende --workdir=runs/nmt/wmt15_ende_3way
    python -m experiments.nmt --config=configs/nmt_wmt.py:decoder,wmt14_enfr --workdir=runs/nmt/wmt14_enfr_dec

The argument after ':' is `tying,dataset` (tying: none | decoder | three_way; dataset: wmt14_enfr | wmt15_ende).
Paper (Table 8): baseline, decoder WT (≈28% fewer parameters) and three-way WT (≈52% fewer) with BLEU unchanged.
Not run here (the CPU cannot train it); the values are DL4MT's, as the paper used them.
"""
from configs import nmt_multi30k


def get_config(arg: str = "none,wmt15_ende"):
  tying, dataset = (arg.split(",") + ["wmt15_ende"])[:2]
  c = nmt_multi30k.get_config(tying)
  c.name = f"nmt_{dataset}_{tying}"
  c.dataset = dataset
  c.src_lang, c.tgt_lang = "en", {"wmt14_enfr": "fr", "wmt15_ende": "de"}.get(dataset, "de")
  c.bpe_vocab_size = 90000    # paper: 89,500 joint BPE merges; sentencepiece counts pieces (≈ merges + characters)
  c.max_len = 50              # DL4MT maxlen
  c.emb_size = 500            # DL4MT dim_word
  c.hidden_size = 1000        # DL4MT dim
  c.dropout = 0.0             # DL4MT default (use_dropout=False)
  c.optimizer = "adadelta"    # DL4MT / the paper
  c.learning_rate = 1.0
  c.batch_size = 80           # DL4MT batch_size
  c.num_epochs = 5            # ours (DL4MT stops by patience on validation cost)
  c.eval_batch_size = 80
  c.max_train_pairs = 0       # > 0: keep only the first N training pairs (a quick look at the pipeline)
  return c
