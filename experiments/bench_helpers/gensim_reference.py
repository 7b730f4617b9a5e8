"""gensim's word2vec on the same sentences and settings as a wt_jax skip-gram config: the reference users
know, for words/s (run with a Python that has gensim; gensim is not a dependency of wt_jax).

    /path/to/gensim/python experiments/bench_helpers/gensim_reference.py --config=configs/w2v_untied.py [--epochs=1]

That Python needs gensim, numpy, ml_collections and etils (`python -m venv G && G/bin/pip install gensim
ml_collections etils`: wt_jax.data reads paths with etils).

Prints one JSON line: training seconds (vocabulary building excluded) and words/s counted three ways:
in-vocabulary words (what `experiments.word2vec` reports as words_per_s), raw words, and gensim's
"effective" words (after subsampling). Reads PTB through wt_jax.data.ptb (NumPy only).
"""
import argparse
import importlib.util
import json
import logging
import os
import sys
import time

# The checkout's root (this file is experiments/bench_helpers/): wt_jax.data.ptb without installing wt_jax.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from gensim.models import Word2Vec  # noqa: E402

from wt_jax.data import ptb  # noqa: E402


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--config", required=True)
  ap.add_argument("--epochs", type=int, default=0, help="0: the config's num_epochs")
  ap.add_argument("--workers", type=int, default=os.cpu_count())
  args = ap.parse_args()
  spec = importlib.util.spec_from_file_location("cfg", args.config)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  c = mod.get_config()
  sentences = ptb.sentences("train", c.data_dir or None, c.download)
  epochs = args.epochs or c.num_epochs
  logging.basicConfig(level=logging.WARNING)
  model = Word2Vec(sg=1, hs=0, negative=c.negatives, ns_exponent=c.noise_power, vector_size=c.dim,
                   window=c.window, min_count=c.min_count, sample=c.sample, alpha=c.learning_rate,
                   min_alpha=c.learning_rate * 1e-4, workers=args.workers, seed=c.seed)
  model.build_vocab(sentences)
  in_vocab = sum(model.wv.get_vecattr(w, "count") for w in model.wv.index_to_key)  # per epoch
  t0 = time.perf_counter()
  effective, raw = model.train(sentences, total_examples=model.corpus_count, epochs=epochs)
  train_s = time.perf_counter() - t0
  print(json.dumps({"bench": "gensim_word2vec", "gensim": __import__("gensim").__version__,
                    "workers": args.workers, "epochs": epochs, "vocab": len(model.wv),
                    "train_s": round(train_s, 2),
                    "in_vocab_words_per_s": round(in_vocab * epochs / train_s, 1),
                    "raw_words_per_s": round(raw / train_s, 1),
                    "effective_words_per_s": round(effective / train_s, 1),
                    "dim": c.dim, "window": c.window, "negative": c.negatives, "sample": c.sample}))

if __name__ == "__main__":
  main()
