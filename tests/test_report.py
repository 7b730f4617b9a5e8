"""experiments.report: import finished runs, build the paper-vs-ours table, figure and README section."""
import json
from pathlib import Path

import pytest

from experiments import report


def _fake_run(folder: Path, config: str, seed: int, test: float, finished: bool = True) -> None:
  folder.mkdir(parents=True)
  (folder / "metrics.jsonl").write_text("".join(
      json.dumps({"kind": "epoch", "epoch": e, "step": 10 * e, "train_ppl": 100.0 / e,
                  "valid_ppl": 150.0 - e, "lr": 1.0}) + "\n" for e in (1, 2, 3)))
  (folder / "checkpoints").mkdir()
  (folder / "checkpoints" / "big").write_text("x")
  if finished:
    (folder / "results.json").write_text(json.dumps({
        "config": config, "seed": seed, "num_params": 2651600, "train_ppl": 35.0, "valid_ppl": 118.0,
        "test_ppl": test, "epochs": 3.0, "wall_s": 600.0, "train_tokens_per_s": 4000.0,
        "resumed_from_step": None, "versions": {"wt_jax_commit": "abc123"},
        "host": {"cpu": "Test CPU", "cpu_count": 2}}))


def test_report_imports_finished_runs_and_builds_table(tmp_path):
  runs = tmp_path / "runs"
  _fake_run(runs / "small_tied_seed0", "small_tied", 0, 112.0)
  _fake_run(runs / "small_tied_seed1", "small_tied", 1, 114.0)
  _fake_run(runs / "small_seed0", "small", 0, 999.0, finished=False)
  readme = tmp_path / "README.md"
  readme.write_text("intro\n<!-- report:ptb_table6:begin -->\nstale\n<!-- report:ptb_table6:end -->\nend\n")

  tab = report.build("ptb_table6", tmp_path / "results", runs, readme)

  out = tmp_path / "results" / "ptb_table6"
  assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["small_tied_seed0", "small_tied_seed1"]
  assert not (out / "small_tied_seed0" / "checkpoints").exists()  # never copies checkpoints
  assert (out / "valid_curves.png").stat().st_size > 1000
  row = next(l for l in tab.splitlines() if l.startswith("| small + WT |"))
  assert "2,651,600" in row and "112.4 / 113.0 (112.0, 114.0)" in row and "+0.6" in row
  assert "| small | 4.65M | — | none yet |" in tab
  text = readme.read_text()
  assert "stale" not in text and text.startswith("intro\n") and text.endswith("end\n")
  assert "![validation curves](results/ptb_table6/valid_curves.png)" in text
  runs_md = (out / "README.md").read_text()
  assert "commit `abc123`" in runs_md and "Test CPU, 2 cores" in runs_md
  assert "--config=configs/small_tied.py --config.seed=1" in runs_md

  # Rebuilding from the committed files alone gives the same table.
  assert report.build("ptb_table6", tmp_path / "results", None, None) == tab


def test_report_rejects_runs_of_other_configs(tmp_path):
  _fake_run(tmp_path / "results" / "ptb_table6" / "medium_seed0", "medium", 0, 80.0)
  with pytest.raises(ValueError, match="medium"):
    report.build("ptb_table6", tmp_path / "results")
