"""word2vec's quality beside its speed: the five word-similarity ρ of each trained run, wt_jax's and gensim's.

    python -m experiments.studies.w2v_quality runs/w2v_quality [--data_dir=DIR]

Writes quality.json into every finished run folder of RUNS_DIR that has none (`experiments/studies/w2v_quality.sh`
trains them): a wt_jax run (`experiments.word2vec`: results.json, run.json, its last checkpoint and vocab.txt) or a
gensim one (`experiments/bench_helpers/gensim_reference.py --vectors_out`: gensim.json, vectors.npz, vocab.txt).
The record: {'run', 'scheme', 'tying', 'dataset', 'seed', 'devices', 'epochs', 'train_s', 'words_per_s', 'settings',
'similarity': {role: {set: {'rho', 'covered', 'pairs'}}}} — roles 'input' and 'output' untied, 'tied' tied; scheme
'gensim' or wt_jax's step ('pairs', 'windows': noise a pair, 'windows_shared': noise a window); settings, what the
schemes may differ in (batch, steps a call). `python -m experiments.report word2vec_speed --runs=RUNS_DIR` imports it.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
from absl import app, flags

from experiments import quiet_library_logs, run_main
from experiments.embeddings import run_embeddings, run_vocab, similarity_table
import wt_jax.files as files
from wt_jax.errors import InputError

log = logging.getLogger(__name__)

RECORD = "quality.json"
ROLES = {"untied": ("input", "output"), "tied": ("tied",)}


def wt_jax_run(folder: Path) -> tuple[dict, dict[str, np.ndarray], dict[str, int]]:
  """(record fields, {role: matrix}, vocabulary) of an `experiments.word2vec` run."""
  results = json.loads((folder / "results.json").read_text())
  config = json.loads((folder / "run.json").read_text())["config"]
  mats, _ = run_embeddings(folder)
  scheme = config.get("batching", "pairs")
  if scheme == "windows" and config.get("shared_negatives"):
    scheme = "windows_shared"
  roles = ({"tied": mats["embedding"]} if "out_embedding" not in mats else
           {"input": mats["embedding"], "output": mats["out_embedding"]})
  return ({"scheme": scheme, "tying": results["tying"], "dataset": config["dataset"], "seed": results["seed"],
           "devices": results["num_devices"], "epochs": results["epochs"], "train_s": results["train_s"],
           "words_per_s": results["words_per_s"], "host": results.get("host"),
           "settings": {k: config[k] for k in ("batch_size", "steps_per_call", "learning_rate", "dim", "window",
                                                "negatives", "sample", "min_count")}},
          roles, run_vocab(folder))


def gensim_run(folder: Path) -> tuple[dict, dict[str, np.ndarray], dict[str, int]]:
  """(record fields, {role: matrix}, vocabulary) of a `gensim_reference.py --vectors_out` folder."""
  g = json.loads((folder / "gensim.json").read_text())
  with np.load(folder / "vectors.npz") as v:
    roles = {"input": v["embedding"], "output": v["out_embedding"]}
  words = (folder / "vocab.txt").read_text().splitlines()
  return ({"scheme": "gensim", "tying": "untied", "dataset": g["dataset"], "seed": g["seed"],
           "devices": g["workers"], "epochs": g["epochs"], "train_s": g["train_s"],
           "words_per_s": g["in_vocab_words_per_s"], "gensim": g["gensim"],
           "settings": {"dim": g["dim"], "window": g["window"], "negatives": g["negative"], "sample": g["sample"]}},
          roles, {w: i for i, w in enumerate(words)})


def measure(folder: Path, data_dir) -> dict | None:
  """The quality record of one run folder, or None for a folder that holds no finished run."""
  if (folder / "gensim.json").is_file() and (folder / "vectors.npz").is_file():
    fields, roles, vocab = gensim_run(folder)
  elif (folder / "results.json").is_file():
    fields, roles, vocab = wt_jax_run(folder)
  else:
    return None
  return {"run": folder.name, **fields, "similarity": similarity_table(roles, vocab, data_dir)}


def main(argv):
  if len(argv) != 2:
    raise app.UsageError("usage: python -m experiments.studies.w2v_quality RUNS_DIR")
  quiet_library_logs()
  runs_dir = Path(argv[1])
  if not runs_dir.is_dir():
    raise InputError(f"{runs_dir} is not a directory.")
  for folder in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
    if (folder / RECORD).is_file():
      continue
    record = measure(folder, flags.FLAGS.data_dir)  # (experiments.embeddings' flag: the word-similarity sets' root)
    if record is None:
      log.info("skipping %s: no finished run", folder)
      continue
    files.write_json(folder / RECORD, record)
    log.info("%s: %s", folder.name, {role: round(np.mean([c["rho"] for c in sets.values()]), 3)
                                    for role, sets in record["similarity"].items()})


if __name__ == "__main__":
  run_main(main)
