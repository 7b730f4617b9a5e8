"""Train and evaluate an attention NMT model, untied, decoder-tied or three-way tied (Press & Wolf Table 8).

    python -m experiments.nmt --config=configs/nmt_multi30k_baseline.py --workdir=runs/nmt/ende_baseline
    python -m experiments.nmt --config=configs/nmt_multi30k_three_way.py --config.tgt_lang=fr --workdir=...
    python -m experiments.nmt --config=configs/nmt_wmt.py:three_way,wmt15_ende --workdir=...   # '.[wmt]' extra

Writes <workdir>/results.json (parameters, vocabulary sizes, Table 1 subword overlap, valid/test BLEU with
the sacrebleu signature), {valid,test}.hyp.txt (beam-search translations), metrics.jsonl, curves.png,
subwords.{model,json} and checkpoints/ (resumes after the last finished epoch).
"""
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from experiments import check_folder, run_main
from wt_jax import parallel
from wt_jax.data import translation
from wt_jax.train import metrics, nmt, trainer

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a config file in configs/.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics, translations and results.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  check_folder(_WORKDIR.value, "--workdir")
  config = _CONFIG.value
  parallel.initialize_distributed()
  metrics.quiet_library_logs()
  logging.info("Config:\n%s", config)
  try:
    data = translation.load_corpus(config)
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  except trainer.STOPS as e:  # (the corpus is missing)
    sys.exit(str(e))
  try:
    nmt.fit_nmt(config, data, _WORKDIR.value)
  except trainer.STOPS as e:  # bad input, a busy workdir, divergence, SIGINT/SIGTERM (resumable): one line
    sys.exit(str(e))


if __name__ == "__main__":
  run_main(main)
