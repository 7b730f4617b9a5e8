"""gensim's word2vec on the same sentences and settings as a wt_jax skip-gram config: the reference users
know, for words/s (run with a Python that has gensim; gensim is not a dependency of wt_jax).

    /path/to/gensim/python experiments/bench_helpers/gensim_reference.py --config=configs/w2v_untied.py [--epochs=1]
        [--dataset=wikitext2] [--seed=1] [--vectors_out=DIR]

That Python needs gensim, numpy, ml_collections and etils (`python -m venv G && G/bin/pip install gensim
ml_collections etils`: wt_jax.data reads paths with etils).

Prints one JSON line: training seconds (vocabulary building excluded) and words/s counted three ways:
in-vocabulary words (what `experiments.word2vec` reports as words_per_s), raw words, and gensim's
"effective" words (after subsampling). Reads PTB or WikiText-2's training sentences through wt_jax.data (NumPy
only). --vectors_out=DIR also writes the trained matrices, DIR/vectors.npz (`embedding`: the input vectors,
`out_embedding`: the output ones, gensim's syn1neg) with DIR/vocab.txt (a word a line, in row order) and the JSON
line as DIR/gensim.json, for `experiments.studies.w2v_quality`.
"""
import argparse
import importlib.util
import json
import logging
import os
import resource
import sys
import time
from pathlib import Path

# The checkout's root (this file is experiments/bench_helpers/): wt_jax.data.ptb without installing wt_jax.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402
from gensim.models import Word2Vec  # noqa: E402

from wt_jax.data import ptb, wikitext2  # noqa: E402


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--config", required=True)
  ap.add_argument("--epochs", type=int, default=0, help="0: the config's num_epochs")
  ap.add_argument("--workers", type=int, default=os.cpu_count())
  ap.add_argument("--dataset", choices=("ptb", "wikitext2"), default="", help="'': the config's dataset")
  ap.add_argument("--seed", type=int, default=None, help="default: the config's seed")
  ap.add_argument("--vectors_out", default="", help="a folder for the trained matrices (see the docstring)")
  args = ap.parse_args()
  spec = importlib.util.spec_from_file_location("cfg", args.config)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  c = mod.get_config()
  dataset, seed = args.dataset or c.dataset, c.seed if args.seed is None else args.seed
  sentences = {"ptb": ptb, "wikitext2": wikitext2}[dataset].sentences("train", c.data_dir or None, c.download)
  epochs = args.epochs or c.num_epochs
  logging.basicConfig(level=logging.WARNING)
  model = Word2Vec(sg=1, hs=0, negative=c.negatives, ns_exponent=c.noise_power, vector_size=c.dim,
                   window=c.window, min_count=c.min_count, sample=c.sample, alpha=c.learning_rate,
                   min_alpha=c.learning_rate * 1e-4, workers=args.workers, seed=seed)
  model.build_vocab(sentences)
  in_vocab = sum(model.wv.get_vecattr(w, "count") for w in model.wv.index_to_key)  # per epoch
  t0 = time.perf_counter()
  effective, raw = model.train(sentences, total_examples=model.corpus_count, epochs=epochs)
  train_s = time.perf_counter() - t0
  line = json.dumps({"bench": "gensim_word2vec", "gensim": __import__("gensim").__version__, "dataset": dataset,
                     "seed": seed, "workers": args.workers, "epochs": epochs, "vocab": len(model.wv),
                     "train_s": round(train_s, 2),
                     "in_vocab_words_per_s": round(in_vocab * epochs / train_s, 1),
                     "raw_words_per_s": round(raw / train_s, 1),
                     "effective_words_per_s": round(effective / train_s, 1),
                     "dim": c.dim, "window": c.window, "negative": c.negatives, "sample": c.sample,
                     "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)})
  print(line)
  if args.vectors_out:
    out = Path(args.vectors_out)
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "vectors.npz", embedding=model.wv.vectors, out_embedding=model.syn1neg)
    (out / "vocab.txt").write_text("".join(w + "\n" for w in model.wv.index_to_key))
    (out / "gensim.json").write_text(line + "\n")


if __name__ == "__main__":
  main()
