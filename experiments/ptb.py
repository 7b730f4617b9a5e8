"""Train a language model on Penn Treebank (or another word-level corpus: --config.dataset=wikitext2 | bbc | imdb |
wikitext2_half1 | wikitext2_half2, the halves of WikiText-2's training text, wt_jax/data/lm_corpora.py; or your own
text: --config.dataset=text --config.data_dir=DIR, DIR holding train.txt, valid.txt, test.txt).

    python -m experiments.ptb --config=configs/small_tied.py --workdir=runs/small_tied
    python -m experiments.ptb --config=configs/small_tied.py --workdir=/tmp/smoke --config.max_steps=50
    python -m experiments.ptb --config=configs/small_tied.py --config.dataset=bbc --workdir=runs/bbc_small_tied
    python -m experiments.ptb --config=configs/small.py --config.dataset=wikitext2 --config.vocab_size=33278 ...
    python -m experiments.ptb --config=configs/small_tied.py --config.dataset=text --config.data_dir=my_text \
        --config.tokenizer=sentencepiece --config.vocab_size=8000 --workdir=runs/my_text_small_tied

Writes <workdir>/results.json, metrics.jsonl, curves.png and checkpoints/ (resumes from them if present).
--config.deterministic=true asks XLA:GPU for deterministic kernels (the same bits run to run on one card).
"""
import logging

from absl import flags
from ml_collections import config_flags

from experiments import run_main, start
from wt_jax.data import lm_corpora
from wt_jax.train import lm, trainer

log = logging.getLogger(__name__)

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a config file in configs/.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and results.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  config = _CONFIG.value
  start(argv, _WORKDIR.value, config)
  corpus = lm_corpora.load_corpus(config)  # (a corpus it cannot read: one line, before the config's lines)
  log.info("Config:\n%s", config)
  lm.fit(config, corpus, _WORKDIR.value)


if __name__ == "__main__":
  run_main(main, stops=trainer.STOPS)
