"""The word-level LM corpora by name (`config.dataset`), for the training entry point and the benchmark.

Each loader `(data_dir, download=...)` returns a corpus with `train` / `valid` / `test` id streams and its
vocabulary; the data root is resolved as everywhere (`--config.data_dir`, then $WT_JAX_DATA, then the cache).
`text` is a folder of your own text, `--config.data_dir=DIR` (`wt_jax.data.text_corpus`).
"""
import functools

from wt_jax.data import bbc, imdb, ptb, text_corpus, wikitext2
from wt_jax.errors import InputError

CORPORA = {"ptb": ptb.load,              # Mikolov's PTB, 10k vocabulary
           "wikitext2": wikitext2.load,  # Merity et al. (2017), 33,278 types (set --config.vocab_size=33278)
           # Inan et al. (2017) Table 2: the first / second half of WikiText-2's training text (cut at an
           # article boundary, wt_jax/data/wikitext2.py); WikiText-2's valid, test and vocabulary (33,278)
           "wikitext2_half1": functools.partial(wikitext2.load_half, 1),
           "wikitext2_half2": functools.partial(wikitext2.load_half, 2),
           "bbc": bbc.load,              # BBC News, our split and 10k vocabulary (wt_jax/data/bbc.py)
           "imdb": imdb.load}            # IMDB reviews, our split and 10k vocabulary (wt_jax/data/imdb.py)
DATASETS = (*CORPORA, "text")            # text: train.txt, valid.txt, test.txt of --config.data_dir


def load_corpus(config):
  """The corpus named by `config.dataset`, read from `config.data_dir` (or the usual resolution)."""
  if config.dataset == "text":
    return text_corpus.load(config)
  if config.dataset not in CORPORA:
    raise InputError(f"Unknown dataset {config.dataset!r}; known: {', '.join(DATASETS)}.")
  if config.get("tokenizer", "word") != "word":
    raise InputError(f"tokenizer={config.tokenizer!r} is for dataset=text (a folder of your own text); "
                     f"{config.dataset} is read by its own reader.")
  return CORPORA[config.dataset](config.data_dir or None, download=config.download)
