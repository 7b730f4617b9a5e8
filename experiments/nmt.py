"""Train and evaluate an attention NMT model, untied, decoder-tied or three-way tied (Press & Wolf Table 8).

    python -m experiments.nmt --config=configs/nmt_multi30k_baseline.py --workdir=runs/nmt/ende_baseline
    python -m experiments.nmt --config=configs/nmt_multi30k_three_way.py --config.tgt_lang=fr --workdir=...
    python -m experiments.nmt --config=configs/nmt_wmt.py:three_way,wmt15_ende --workdir=...   # '.[wmt]' extra

Writes <workdir>/results.json (parameters, vocabulary sizes, Table 1 subword overlap, valid/test BLEU with
the sacrebleu signature), {valid,test}.hyp.txt (beam-search translations), metrics.jsonl, curves.png,
subwords.{model,json} and checkpoints/ (resumes after the last finished epoch).
"""
import logging

from absl import flags
from ml_collections import config_flags

from experiments import run_main, start
from wt_jax.data import translation
from wt_jax.train import nmt, trainer

log = logging.getLogger(__name__)

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a config file in configs/.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics, translations and results.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  config = _CONFIG.value
  start(argv, _WORKDIR.value, config)
  corpus = translation.load_corpus(config)  # (a corpus it cannot read: one line, before the config's lines)
  log.info("Config:\n%s", config)
  nmt.fit_nmt(config, corpus, _WORKDIR.value)


if __name__ == "__main__":
  run_main(main, stops=trainer.STOPS)
