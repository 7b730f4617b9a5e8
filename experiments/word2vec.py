"""Train word2vec skip-gram (negative sampling), tied or untied.

    python -m experiments.word2vec --config=configs/w2v_untied.py --workdir=runs/w2v_untied
    python -m experiments.word2vec --config=configs/w2v_tied.py --workdir=runs/w2v_tied

Writes <workdir>/results.json, metrics.jsonl, vocab.txt and checkpoints/ (resumes at epoch ends).
"""
import logging

from absl import app, flags
from ml_collections import config_flags

from experiments import run_main, start
from wt_jax.data import ptb, text8, wikitext2
from wt_jax.train import skipgram, trainer

log = logging.getLogger(__name__)

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a config file in configs/.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and results.")
flags.mark_flags_as_required(["config", "workdir"])

DATASETS = {  # config.dataset → word2vec's sentences
    "ptb": lambda c: ptb.sentences("train", c.data_dir or None, c.download),              # one per line
    "wikitext2": lambda c: wikitext2.sentences("train", c.data_dir or None, c.download),  # one per paragraph
    "text8": lambda c: text8.sentences(c.data_dir or None, c.download),                   # 1,000-word pieces
}


def main(argv):
  config = _CONFIG.value
  start(argv, _WORKDIR.value, config)
  if config.dataset not in DATASETS:
    raise app.UsageError(f"Unknown dataset {config.dataset!r}; known: {', '.join(DATASETS)}.")
  corpus = DATASETS[config.dataset](config)  # (a corpus it cannot read: one line, before the config's lines)
  log.info("Config:\n%s", config)
  skipgram.fit_skipgram(config, corpus, _WORKDIR.value)


if __name__ == "__main__":
  run_main(main, stops=trainer.STOPS)
