"""The tying surface's measures of its trained cells, read from each run folder's tested checkpoint.

    python -m experiments.studies.tying_surface_measures runs/tying_surface [--frequent=2000]

Writes measures.json into every finished cell run of the folder that has none: each run folder, or member folder
`members/<k>/` that did not diverge, whose results.json names a config of configs/tying_surface.py (`arg_of`;
`experiments/studies/tying_surface.sh` names them `<ARM>_d<D>_<VOCAB>_seed<S>`, a GPU queue by its job); the report
imports it beside results.json. A grid point's run (`lr=`/`dropout=` in its argument) is measured only where it
trained its cell's config (`trains_the_cell`) and the cell has no run of its own for that seed.

  test      the test targets' log-probabilities (`trained_lm.score_split`, the run's own test protocol) summed:
            Σ NLL in nats and bits per byte, Σ NLL / ln 2 / bytes of the test text, beside results.json's (from the
            perplexity); then the same split by the target's count in the training text (`BUCKETS`): each
            bucket's targets, types and bits per byte. The buckets' bits per byte add up to the whole, so a
            tied − untied gap splits into theirs.
  matrices  each word matrix ('input' and 'output' untied, 'tied' tied) over the types seen in training:
            Spearman ρ of the row norms against the training counts, and the anisotropy (the mean cosine of two
            distinct rows); untied, the input against the output matrix (`likeness`).
  untied    a tied or tied_wide run with a finished untied run of the same D, vocabulary and seed (its results.json's
            seed): its matrix against that run's input and output matrices (`likeness`); added when that run
            finishes later.

`likeness` of two [V, ·] matrices: linear CKA and the subspace distance over the types seen in training, Press &
Wolf's Table-4 ρ over the `--frequent` most frequent (all V² pairs would be 5·10⁸ at WikiText-2's words).
"""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
from absl import app, flags

from configs import tying_surface
from experiments import quiet_library_logs, run_main
import wt_jax.files as files
import wt_jax.tying as tying
import wt_jax.trained_lm as trained_lm
from wt_jax.train.members_run import MEMBERS_DIR
from wt_jax.analysis import embeddings
from wt_jax.errors import InputError

log = logging.getLogger(__name__)

_FREQUENT = flags.DEFINE_integer("frequent", 2000, "Table-4 ρ over this many of the most frequent training types.")

RECORD = "measures.json"
BUCKETS = (0, 1, 100, 1000, 10_000)  # lower edges of a target's training count: unseen, 1–99, ..., ≥ 10,000


def frequency_split(logp: np.ndarray, targets: np.ndarray, counts: np.ndarray, test_bytes: int) -> list[dict]:
  """logp[N] of the test targets[N] (token ids), split by the target's training count counts[targets] into
  `BUCKETS`: per bucket {'from' (its lower count), 'targets', 'types' (distinct target ids), 'nll' (Σ −logp, nats),
  'bits_per_byte' (nll / ln 2 / test_bytes)}; the buckets' nll and bits per byte sum to the whole."""
  which = np.searchsorted(BUCKETS, counts[targets], side="right") - 1
  out = []
  for b, lower in enumerate(BUCKETS):
    inside = which == b
    nll = float(-np.sum(logp[inside], dtype=np.float64))
    out.append({"from": lower, "targets": int(inside.sum()), "types": int(np.unique(targets[inside]).size),
                "nll": nll, "bits_per_byte": nll / math.log(2) / test_bytes})
  return out


def likeness(A: np.ndarray, B: np.ndarray, seen: np.ndarray, frequent: np.ndarray) -> dict:
  """Two [V, ·] word matrices (rows the same types; widths may differ): linear CKA and the subspace distance (of
  B's column space from A's) over the `seen` rows, Table-4 ρ over the `frequent` rows."""
  return {"cka": embeddings.linear_cka(A[seen], B[seen]),
          "subspace_distance": embeddings.subspace_distance(B[seen], A[seen]),
          "table4_rho": embeddings.pairwise_distance_rho(A[frequent], B[frequent])}


def _matrices(lm) -> dict[str, np.ndarray]:
  """{'input', 'output'} of an untied run, {'tied'} of a tied one: [V, D] float64 host copies."""
  if lm.config.words.mode == "untied":
    return {role: np.asarray(tying.word_matrix(lm.params, role), np.float64) for role in ("input", "output")}
  return {"tied": np.asarray(tying.word_matrix(lm.params, "input"), np.float64)}


def _load(folder: Path):
  return trained_lm.load(folder, trained_lm.tested_checkpoint(folder))


def run_measures(lm, counts: np.ndarray, seen: np.ndarray, frequent: np.ndarray) -> dict:
  """A finished cell run's own measures (module docstring: test, matrices), given its training counts[V], the
  type ids `seen` in training and the `frequent` ones."""
  scored = trained_lm.score_split(lm, "test", per_token=True)
  logp = np.array([t["logp"] for t in scored["per_token"]], np.float64)
  test_bytes = lm.results["corpus"]["test"]["bytes"]
  nll = float(-logp.sum())
  test = {"targets": int(logp.size), "nll": nll, "bits_per_byte": nll / math.log(2) / test_bytes,
          "results_bits_per_byte": lm.results.get("test_bits_per_byte"), "checkpoint": lm.checkpoint,
          "by_training_count": frequency_split(logp, trained_lm.split_stream(lm, "test")[1:], counts, test_bytes)}
  mats = _matrices(lm)
  out = {"test": test, "types_seen": int(seen.size), "frequent_types": int(frequent.size),
         "matrices": {role: {"norm_count_rho": embeddings.norm_count_rho(E[seen], counts[seen]),
                             "anisotropy": embeddings.anisotropy(E[seen])} for role, E in mats.items()}}
  if "output" in mats:
    out["input_vs_output"] = likeness(mats["input"], mats["output"], seen, frequent)
  return out


def against_untied(lm, untied: Path, seen: np.ndarray, frequent: np.ndarray) -> dict:
  """A tied run's matrix against the untied run's input and output matrices (`likeness` each)."""
  tied, pair = _matrices(lm)["tied"], _matrices(_load(untied))
  return {role: likeness(pair[role], tied, seen, frequent) for role in ("input", "output")}


def _record(path: Path) -> dict | None:
  """A run's measures.json, or None where there is none, or where it is damaged (set aside as
  measures.json.damaged, to be measured again: it holds nothing that cannot be)."""
  if not path.is_file():
    return None
  try:
    return json.loads(path.read_text())
  except (UnicodeDecodeError, json.JSONDecodeError):
    log.warning("%s is damaged; set aside, measuring again", path)
    files.set_aside(path)
    return None


def cell_runs(runs_dir: Path) -> dict[tuple, Path]:
  """(arm, D, vocabulary, seed) → the folder of each finished cell run in `runs_dir` (module docstring), known by
  its results.json's config name, whatever the folder's: the cell's own run of a seed, else a grid point's run
  alone that trains the cell."""
  own, points = {}, {}
  for path in sorted([*runs_dir.glob("*/results.json"), *runs_dir.glob(f"*/{MEMBERS_DIR}/*/results.json")]):
    if (path.parent / MEMBERS_DIR).is_dir():  # (a members run's own results.json: its members' numbers as [K])
      continue
    results = json.loads(path.read_text())
    arg = tying_surface.arg_of(results.get("config", ""))
    if arg is None or (results.get("member") or {}).get("diverged"):
      continue
    arm, width, vocab, *settings = arg.split(",")
    if not settings:
      own[arm, width, vocab, results["seed"]] = path.parent
    elif not results.get("member") and tying_surface.trains_the_cell(arg):
      points[arm, width, vocab, results["seed"]] = path.parent
  return {**points, **own}


def measure_folder(runs_dir: Path, frequent_types: int) -> list[Path]:
  """Write (or complete with its `untied` part) the measures.json of every finished cell run in `runs_dir`; returns
  the run folders written."""
  runs, written = cell_runs(runs_dir), []
  for (arm, width, vocab, seed), folder in runs.items():
    untied = runs.get(("untied", width, vocab, seed))
    pair_due = arm != "untied" and untied is not None
    record = _record(folder / RECORD)
    if record is not None and (not pair_due or "untied" in record):
      continue
    log.info("measuring %s", folder)
    lm = _load(folder)
    counts = np.bincount(trained_lm.split_stream(lm, "train"), minlength=lm.config.vocab_size)
    seen, frequent = np.flatnonzero(counts), np.argsort(-counts, kind="stable")[:frequent_types]
    record = record or run_measures(lm, counts, seen, frequent)
    if pair_due:
      record["untied"] = {"run": untied.relative_to(runs_dir).as_posix(), **against_untied(lm, untied, seen, frequent)}
    files.write_json(folder / RECORD, record)
    written.append(folder)
  return written


def main(argv):
  if len(argv) != 2:
    raise app.UsageError("usage: python -m experiments.studies.tying_surface_measures RUNS_DIR [--frequent=N]")
  quiet_library_logs()
  runs_dir = Path(argv[1])
  if not runs_dir.is_dir():
    raise InputError(f"{runs_dir} is not a folder of tying-surface runs (experiments/studies/tying_surface.sh).")
  for folder in measure_folder(runs_dir, _FREQUENT.value):
    print(folder / RECORD)


if __name__ == "__main__":
  run_main(main)
