"""experiments/studies/tying_surface_measures.py: the frequency split by hand, then two trained cells' measures —
bits per byte recomputed from the per-token scores against the run's own, and the tied/untied pair."""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from experiments.studies import tying_surface_measures as measures
from tests.conftest import REPO
from tests.test_text_corpus import write_text


def test_the_frequency_split_sums_to_the_whole_and_buckets_by_training_count():
  counts = np.array([0, 5, 150, 20_000, 99, 100])
  targets = np.array([0, 1, 1, 2, 3, 3, 3, 4, 5])
  logp = -np.arange(1.0, 10.0)
  split = measures.frequency_split(logp, targets, counts, test_bytes=12)
  assert [b["from"] for b in split] == [0, 1, 100, 1000, 10_000]
  assert [b["targets"] for b in split] == [1, 3, 2, 0, 3]            # count 0 | 5, 5, 99 | 150, 100 | — | 20,000 ×3
  assert [b["types"] for b in split] == [1, 2, 2, 0, 1]
  assert [b["nll"] for b in split] == [1.0, 2 + 3 + 8, 4 + 9, 0.0, 5 + 6 + 7]
  assert sum(b["bits_per_byte"] for b in split) == pytest.approx(45 / math.log(2) / 12, rel=1e-12)


def test_a_grid_points_run_is_measured_as_its_cell_only_at_the_cells_config_and_where_the_cell_has_no_run(tmp_path):
  """cell_runs: a run is known by its results.json's config name, not its folder's; a grid point at its arm's
  chosen settings stands for the cell's seed, one at other settings does not; the cell's own run of a seed replaces
  it; another config's run is not a cell."""
  from configs import tying_surface
  lr, dropout = tying_surface.CHOSEN["tied"]
  point = f"tied_d64_4000_lr{lr:g}_dropout{dropout:g}"
  for folder, config, seed in ((f"{point}_seed0", point, 0), (f"{point}_seed1", point, 1),
                               ("tied_d64_4000_lr9e-3_dropout0.1_seed2", "tied_d64_4000_lr9e-3_dropout0.1", 2),
                               ("tied_d64_4000_seed1", "tied_d64_4000", 1),
                               ("a_queue_job/members/1", "untied_d768_16000", 3), ("small_tied", None, 0)):
    (tmp_path / folder).mkdir(parents=True)
    results = {"seed": seed, "config": f"surface_{config}" if config else "small_tied"}
    (tmp_path / folder / "results.json").write_text(json.dumps(results))
  assert {k: p.relative_to(tmp_path).as_posix() for k, p in measures.cell_runs(tmp_path).items()} == {
      ("tied", "64", "4000", 0): f"{point}_seed0",
      ("tied", "64", "4000", 1): "tied_d64_4000_seed1",
      ("untied", "768", "16000", 3): "a_queue_job/members/1"}


@pytest.mark.slow
def test_two_trained_cells_bits_per_byte_from_their_tokens_and_the_tied_matrix_against_the_untied_pair(tmp_path):
  """A tied cell and an untied one of two seeds as members (configs/tying_surface.py, shrunk), trained a few steps
  on a small text: the measures' bits per byte, Σ −log p of the per-token scores / ln 2 / bytes, equal
  results.json's (from the perplexity, summed in float32: 1e-5) and the buckets add up to it; the tied run is read
  against the untied member of its seed once that exists, a second pass writes nothing, and a damaged record is set
  aside and measured again (to the same numbers)."""
  train = "".join(f"the {w} saw {v} on day {i % 9}\n" for i, (w, v) in enumerate(
      zip(["cat", "dog", "cow", "hen", "fox"] * 40, ["a hen", "the fox", "one cat", "two dogs"] * 50)))
  text = write_text(tmp_path / "text", train=train, valid=train[:300], test=train[-500:] + "a zebra\n")
  runs = tmp_path / "runs"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  tied, untied = runs / "tied_d64_1000_seed0", runs / "untied_d64_1000_seeds0-1"  # (seeds 0 and 1 as members)
  for arm, workdir, extra in (("tied", tied, []), ("untied", untied, ["--config.members=2"])):
    done = subprocess.run(
        [sys.executable, "-m", "experiments.ptb", f"--config=configs/tying_surface.py:{arm},64,1000",
         f"--config.data_dir={text}", "--config.vocab_size=60", "--config.hidden_size=16", "--config.mlp_size=32",
         "--config.memory=4", "--config.bptt=8", "--config.test_window=8", "--config.batch_size=4",
         "--config.eval_batch_size=4", "--config.max_steps=4", "--config.plot=false", *extra, f"--workdir={workdir}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    written = measures.measure_folder(runs, frequent_types=20)
    assert written == ([tied] if arm == "tied" else [tied, untied / "members" / "0", untied / "members" / "1"])
  records = {name: json.loads((folder / "measures.json").read_text())
             for name, folder in (("tied", tied), ("untied", untied / "members" / "0"))}
  for record in records.values():
    test = record["test"]
    assert test["bits_per_byte"] == pytest.approx(test["results_bits_per_byte"], rel=1e-5)
    assert sum(b["bits_per_byte"] for b in test["by_training_count"]) == pytest.approx(test["bits_per_byte"],
                                                                                       rel=1e-12)
    assert sum(b["targets"] for b in test["by_training_count"]) == test["targets"]
  tied_m, untied_m = records["tied"], records["untied"]
  assert set(tied_m["matrices"]) == {"tied"} and set(untied_m["matrices"]) == {"input", "output"}
  assert tied_m["untied"]["run"] == "untied_d64_1000_seeds0-1/members/0"  # (the untied run of its seed)
  for pair in (tied_m["untied"]["input"], tied_m["untied"]["output"], untied_m["input_vs_output"]):
    assert 0 <= pair["cka"] <= 1 and 0 <= pair["subspace_distance"] <= 1 and -1 <= pair["table4_rho"] <= 1
  assert measures.measure_folder(runs, frequent_types=20) == []
  (tied / "measures.json").write_text('{"test": ')  # a damaged record: set aside and measured again
  assert measures.measure_folder(runs, frequent_types=20) == [tied]
  assert json.loads((tied / "measures.json").read_text()) == tied_m
  assert (tied / "measures.json.damaged").read_text() == '{"test": '
