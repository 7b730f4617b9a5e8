"""experiments.report: import finished runs, build the paper-vs-ours table, figure and study page (and a README
section on request); the top-level README and the study pages: short, every link and number traceable."""
import json
import math
import re
import shutil
from pathlib import Path

import pytest

from configs import inan as inan_config
from experiments import report
from experiments.reports import inan, lm_tables, nmt, records, softmax_study, tpu_memory
from tests.conftest import REPO


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

  tab = lm_tables.build("ptb_table6", tmp_path / "results", runs, readme)

  out = tmp_path / "results" / "ptb_table6"
  assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["small_tied_seed0", "small_tied_seed1"]
  # results.json and the per-epoch curve only: never checkpoints or the per-step log
  assert sorted(p.name for p in (out / "small_tied_seed0").iterdir()) == ["curve.jsonl", "results.json"]
  assert [json.loads(l)["epoch"] for l in (out / "small_tied_seed0" / "curve.jsonl").read_text().splitlines()] \
      == [1, 2, 3]
  assert (out / "valid_curves.png").stat().st_size > 1000
  row = next(l for l in tab.splitlines() if l.startswith("| small + WT |"))
  assert "2,651,600" in row and "112.4 / 113.0 ± 1.4 (112.0, 114.0)" in row and "+0.6" in row
  assert "| small | 4.65M | — | none yet |" in tab
  text = readme.read_text()
  assert "stale" not in text and text.startswith("intro\n") and text.endswith("end\n")
  assert "![validation curves](results/ptb_table6/valid_curves.png)" in text
  runs_md = (out / "README.md").read_text()
  assert "commit `abc123`" in runs_md and "Test CPU, 2 cores" in runs_md
  assert "--config=configs/small_tied.py --config.seed=1 --workdir=runs/ptb_table6/small_tied_seed1`" in runs_md
  # No page yet: written whole, the title, then the table part and the run records each in its markers.
  assert runs_md.startswith(f"# {lm_tables.REPORTS['ptb_table6'].title}\n\n<!-- report:ptb_table6:begin -->\nPaper: ")
  assert ("![validation curves](valid_curves.png)\n\nRebuild: `python -m experiments.report ptb_table6`\n"
          "<!-- report:ptb_table6:end -->\n\n<!-- report:ptb_table6:runs:begin -->\n## Runs\n\n- `small_tied_seed0`"
          in runs_md)
  assert runs_md.endswith("<!-- report:ptb_table6:runs:end -->\n")

  # Rebuilding from the committed files alone gives the same table.
  assert lm_tables.build("ptb_table6", tmp_path / "results", None, None) == tab


def test_a_page_reads_each_difference_against_twice_the_larger_seed_sd():
  """records.differences: b's mean minus a's, beyond or within twice the larger sample sd of the two sides (one
  verdict when a side has one seed); lm_tables reads a spec's comparisons with it, skipping a row without runs."""
  assert records.differences({"test": [100.0, 102.0]}, {"test": [95.0, 97.0]}) == (
      "test -5.0, beyond twice the larger seed sd (2.8)")  # sd √2: 2 × 1.41
  assert records.differences({"test": [100.0, 104.0]}, {"test": [98.0, 100.0]}) == (
      "test -3.0, within twice the larger seed sd (5.7)")
  assert records.differences({"valid": [1.0], "test": [2.0]}, {"valid": [2.0, 3.0], "test": [3.0, 5.0]}) == (
      "valid +1.5, test +2.0; one seed on a side: no spread to read it against")
  run = lambda seed, valid, test: {"seed": seed, "valid_ppl": valid, "test_ppl": test}
  text = lm_tables.spread_readings(lm_tables.REPORTS["ptb_table6"], {
      "small": [run(0, 120.0, 116.0), run(1, 121.0, 117.0)], "small_tied": [run(0, 117.0, 112.0), run(1, 118.0, 113.0)]})
  assert text.endswith("\n\n- small + WT − small (seeds 0, 1 / 0, 1): valid -3.0, beyond twice the larger seed sd "
                       "(1.4); test -4.0, beyond twice the larger seed sd (1.4).")  # (the PR rows have no runs)


def test_report_imports_a_collected_gpu_record_whose_epochs_are_in_curve_jsonl(tmp_path):
  """experiments.gpu.run_queue collects a run as results.json + curve.jsonl (its epoch records), without the
  workdir's metrics.jsonl: the import takes the epochs from curve.jsonl, so the figure has the run's curve."""
  run = tmp_path / "records" / "small_tied_seed0"
  _fake_run(run, "small_tied", 0, 112.0)
  (run / "metrics.jsonl").rename(run / "curve.jsonl")
  lm_tables.build("ptb_table6", tmp_path / "results", tmp_path / "records", None)
  curve = (tmp_path / "results" / "ptb_table6" / "small_tied_seed0" / "curve.jsonl").read_text().splitlines()
  assert [json.loads(l)["valid_ppl"] for l in curve] == [149.0, 148.0, 147.0]


def test_train_cell_adds_the_no_dropout_training_perplexity_only_when_every_run_has_it(tmp_path):
  runs = tmp_path / "runs"
  _fake_run(runs / "small_tied_seed0", "small_tied", 0, 112.0)
  _fake_run(runs / "small_seed0", "small", 0, 115.0)
  r = json.loads((runs / "small_tied_seed0" / "results.json").read_text())
  (runs / "small_tied_seed0" / "results.json").write_text(json.dumps({**r, "train_ppl_eval": 20.5}))
  tab = lm_tables.build("ptb_table6", tmp_path / "results", runs, None)
  assert "| 36.4 / 35.0 (no dropout: 20.5) |" in next(l for l in tab.splitlines() if l.startswith("| small + WT |"))
  assert "no dropout" not in next(l for l in tab.splitlines() if l.startswith("| small |"))


def test_valid_axis_keeps_every_drawn_minimum_in_view_and_never_goes_below_zero():
  # a curve from 2,000 down to 76 and paper lines at 68 and 82: autoscale top ≈ 2,100, capped at 200
  bottom, top = lm_tables.valid_axis_limits([76.1, 68.1, 82.2], 2100.0)
  assert top == 200.0 and 0.0 < bottom < 68.1 and bottom == pytest.approx(68.1 - 0.05 * (200 - 68.1))
  assert lm_tables.valid_axis_limits([1.5], 2100.0)[0] == 0.0  # a margin below 1.5 would go negative
  assert lm_tables.valid_axis_limits([90.0], 150.0) == (pytest.approx(87.0), 150.0)


def test_rebuild_keeps_the_prose_around_the_markers_of_the_study_page(tmp_path):
  """A study page's hand-written text stays; only what lies between the report's markers is regenerated."""
  _fake_run(tmp_path / "runs" / "small_tied_seed0", "small_tied", 0, 112.0)
  page = tmp_path / "results" / "ptb_table6" / "README.md"
  page.parent.mkdir(parents=True)
  page.write_text("# My title\n\nIntro prose.\n\n<!-- report:ptb_table6:begin -->\nstale table\n"
                  "<!-- report:ptb_table6:end -->\n\nThe reading, after the table.\n\n"
                  "<!-- report:ptb_table6:runs:begin -->\nstale runs\n<!-- report:ptb_table6:runs:end -->\n\nFooter.\n")
  tab = lm_tables.build("ptb_table6", tmp_path / "results", tmp_path / "runs", None)
  text = page.read_text()
  assert "stale" not in text
  head, rest = text.split("<!-- report:ptb_table6:begin -->\n", 1)
  body, rest = rest.split("\n<!-- report:ptb_table6:end -->", 1)
  assert head == "# My title\n\nIntro prose.\n\n"
  assert body.startswith("Paper: Press & Wolf") and tab in body and "## Runs" not in body
  assert body.endswith("![validation curves](valid_curves.png)\n\nRebuild: `python -m experiments.report ptb_table6`")
  middle, rest = rest.split("<!-- report:ptb_table6:runs:begin -->\n", 1)
  runs, tail = rest.split("\n<!-- report:ptb_table6:runs:end -->", 1)
  assert middle == "\n\nThe reading, after the table.\n\n" and tail == "\n\nFooter.\n"
  assert runs.startswith("## Runs\n\n- `small_tied_seed0`: `python -m experiments.ptb") and "commit `abc123`" in runs
  # A second rebuild changes nothing.
  lm_tables.build("ptb_table6", tmp_path / "results", None, None)
  assert page.read_text() == text

  # A page with the report's markers but no runs markers gets the run records inside the report's markers.
  page.write_text("Prose.\n<!-- report:ptb_table6:begin -->\n<!-- report:ptb_table6:end -->\nMore prose.\n")
  lm_tables.build("ptb_table6", tmp_path / "results", None, None)
  text = page.read_text()
  assert text.startswith("Prose.\n<!-- report:ptb_table6:begin -->\nPaper: ")
  assert text.endswith("commit `abc123`, machine: Test CPU, 2 cores; 3 epochs, 10 min wall, 4,000 train tokens/s\n"
                       "<!-- report:ptb_table6:end -->\nMore prose.\n")
  assert "Rebuild: `python -m experiments.report ptb_table6`\n\n## Runs\n\n- `small_tied_seed0`" in text

  # A page without the markers is replaced by a whole one (title, both parts in their markers).
  page.write_text("an old page without markers\n")
  lm_tables.build("ptb_table6", tmp_path / "results", None, None)
  text = page.read_text()
  assert "an old page" not in text and text.startswith("# Press & Wolf (2017), Table 6")
  assert text.count("<!-- report:ptb_table6:begin -->") == text.count("<!-- report:ptb_table6:runs:end -->") == 1


def test_inan_table1_names_the_config_argument(tmp_path):
  """Inan's runs come from one config file with an argument (configs/inan.py:small,real,ptb,gal), not <config>.py;
  the Appendix A rows have a first session and footnote 4's second one, started from the first's parameters."""
  _fake_run(tmp_path / "runs" / "small_real", "inan_small_real", 0, 84.0)
  _fake_run(tmp_path / "appA" / "small_vd_keep", "inan_small_vd_keep", 0, 90.0)
  _fake_run(tmp_path / "appA" / "small_vd_keep_s2", "inan_small_vd_keep_s2", 0, 88.0)
  _fake_run(tmp_path / "appA" / "small_vd_keep_seed1_s2", "inan_small_vd_keep_s2", 1, 86.0)
  lm_tables.build("inan_ptb_table1", tmp_path / "results", tmp_path / "appA", None)
  tab = lm_tables.build("inan_ptb_table1", tmp_path / "results", tmp_path / "runs", None)
  assert "| + REAL (RE + AL), earlier recipe | — | 2,651,600 | 0 | — / 35.0 | 86.3 / 118.0 | 82.7 / 84.0 | +1.3 |" in tab
  assert "| VD-LSTM (small), App. A | — | 2,651,600 | 0 | — / 35.0 | 92.6 / 118.0 | 87.3 / 90.0 | +2.7 |" in tab
  assert ("| VD-LSTM (small), App. A, retrained (footnote 4) | — | 2,651,600 | 0, 1 | — / 35.0 ± 0.0 (35.0, 35.0) "
          "| 92.6 / 118.0 ± 0.0 (118.0, 118.0) | 87.3 / 87.0 ± 1.4 (88.0, 86.0) | -0.3 |") in tab
  assert "| + AL, App. A, retrained (footnote 4) | — | — | none yet | — / — | 86.3 / — | 82.9 / — | — |" in tab
  runs_md = (tmp_path / "results" / "inan_ptb_table1" / "README.md").read_text()
  # The workdir is where the README's commands put the run (runs/inan/), not runs/<report name>/.
  assert ("`python -m experiments.ptb --config=configs/inan.py:small,real,ptb,gal --config.seed=0 "
          "--workdir=runs/inan/small_real`") in runs_md
  assert ("`python -m experiments.ptb --config=configs/inan.py:small,vd --config.name=inan_small_vd_keep_s2 "
          "--config.init_from=runs/inan_appA/small_vd_keep/init_s2 --config.seed=0 "
          "--workdir=runs/inan_appA/small_vd_keep_s2`") in runs_md
  assert ("`python -m experiments.ptb --config=configs/inan.py:small,vd --config.name=inan_small_vd_keep_s2 "
          "--config.init_from=runs/inan_appA/small_vd_keep_seed1/init_s2 --config.seed=1 "
          "--workdir=runs/inan_appA/small_vd_keep_seed1_s2`") in runs_md


def test_report_rejects_runs_of_other_configs(tmp_path):
  _fake_run(tmp_path / "results" / "ptb_table6" / "medium_seed0", "medium", 0, 80.0)
  with pytest.raises(ValueError, match="medium"):
    lm_tables.build("ptb_table6", tmp_path / "results")


def _fake_nmt_run(folder: Path, tgt: str, tying: str, params: int, bleu: float) -> None:
  folder.mkdir(parents=True)
  (folder / "metrics.jsonl").write_text("".join(
      json.dumps({"kind": "epoch", "epoch": e, "valid_ppl": 20.0 - e, "valid_bleu_greedy": bleu - 3 + e})
      + "\n" for e in (1, 2, 3)))
  (folder / "test.hyp.txt").write_text("ein Hund .\n")
  joint = tying == "three_way"
  (folder / "results.json").write_text(json.dumps({
      "config": f"nmt_multi30k_{tying}", "tying": tying, "src_lang": "en", "tgt_lang": tgt,
      "num_params": params, "joint_vocab": joint, "bpe_vocab_size": 8000,
      "subword_overlap": {"source_only": 10, "target_only": 20, "both": 30, "total": 60, "both_fraction": 0.5},
      "epochs": 3, "best_epoch": 3, "beam": 5, "length_alpha": 1.0, "valid_bleu": bleu + 0.5,
      "test_bleu": bleu, "valid_ppl": 9.0, "test_ppl": 10.0, "bleu_signature": "nrefs:1|tok:13a",
      "train_s": 3000.0, "wall_s": 3300.0, "versions": {"wt_jax_commit": "abc123"},
      "host": {"cpu": "Test CPU", "cpu_count": 2}}))


def test_nmt_report_table8_relative_sizes_and_table1(tmp_path):
  runs = tmp_path / "runs"
  _fake_nmt_run(runs / "ende_baseline", "de", "none", 1000, 30.0)
  _fake_nmt_run(runs / "ende_three_way", "de", "three_way", 480, 31.0)
  readme = tmp_path / "README.md"
  readme.write_text("<!-- report:nmt_table8:begin -->\n<!-- report:nmt_table8:end -->\n")

  tab = nmt.build_nmt("nmt_table8", tmp_path / "results", runs, readme)

  out = tmp_path / "results" / "nmt_table8"
  assert sorted(p.name for p in (out / "ende_baseline").iterdir()) == ["curve.jsonl", "results.json"]
  assert (out / "valid_bleu.png").stat().st_size > 1000
  lines = tab.splitlines()
  assert any(l.startswith("| en→de | baseline | 1,000 | 100% |") and "| 30.5 | 30.0 |" in l for l in lines)
  assert any(l.startswith("| en→de | three-way WT | 480 | 48% |") for l in lines)
  assert any(l.startswith("| en→de | decoder WT | — |") and "not run yet" in l for l in lines)
  assert any(l.startswith("| en→fr | baseline | — |") for l in lines)
  assert "| en–de | 8,000 | 10 | 20 | 30 | 50.0% | 3K / 11K / 80K |" in tab  # Table 1, ours and the paper's
  assert "| en–fr | — |" in tab and tab.rstrip().endswith("| 2K / 7K / 85K |")
  # The paper's Table 8 (WMT) beside every row, run or not.
  assert any(l.startswith("| en→de | baseline |") and l.endswith("| 165M, 20.96 / 16.79 |") for l in lines)
  assert any(l.startswith("| en→fr | three-way WT | — |") and l.endswith("| 80M, 29.43 / 33.46 |") for l in lines)
  assert "--config=configs/nmt_multi30k_three_way.py --config.tgt_lang=de" in (out / "README.md").read_text()
  assert ("- en→de, three-way WT − baseline (seeds 0 / 0): valid +1.0, test +1.0; one seed on a side: no spread to "
          "read it against.") in tab
  assert "valid_bleu.png" in readme.read_text()
  assert nmt.build_nmt("nmt_table8", tmp_path / "results") == tab


def test_bbc_report_paper_column_not_comparable_and_dataset_check(tmp_path):
  runs = tmp_path / "runs"
  _fake_run(runs / "small_seed0", "small", 0, 150.0)
  r = json.loads((runs / "small_seed0" / "results.json").read_text())
  (runs / "small_seed0" / "results.json").write_text(json.dumps({**r, "dataset": "bbc"}))
  tab = lm_tables.build("bbc_table7", tmp_path / "results", runs, None)
  # The paper's BBC row beside ours, but no Δ: their split and vocabulary are not ours.
  row = next(l for l in tab.splitlines() if l.startswith("| small |"))
  assert "| 28.6 / 35.0 |" in row and "| 110.8 / 150.0 | not comparable |" in row
  # The whole of the paper's Table 7 follows, with the vocabulary caveat.
  assert "| text8 | train | 90.4 | 95.6 | 92.6 | 95.3 |" in tab and "|  | valid | - | - | - | - |" in tab
  assert "| IMDB | train | 71.3 |" in tab and "|  | test | 110.8 | 106.8 | 108.7 | 98.9 |" in tab
  assert "Miyamoto & Cho (2016)" in tab and "not strictly comparable" in tab
  assert "--config.dataset=bbc" in (tmp_path / "results" / "bbc_table7" / "README.md").read_text()
  # A PTB run (or one from before results.json named its corpus) cannot enter the BBC report, and vice versa.
  _fake_run(tmp_path / "results" / "bbc_table7" / "small_seed1", "small", 1, 150.0)
  with pytest.raises(ValueError, match="'ptb'"):
    lm_tables.build("bbc_table7", tmp_path / "results")
  with pytest.raises(ValueError, match="'bbc'"):
    lm_tables.build("ptb_table6", tmp_path / "results2", tmp_path / "results" / "bbc_table7")


def test_tpu_memory_report_from_compile_outputs(tmp_path):
  """experiments.compile's AOT_JSON lines → results/tpu_memory/*.json → the table, rows in config order."""
  def record(config, topology, chips, total, **search):
    program = {"platform": "tpu", "batch_size": 20, "total_bytes": total, "argument_bytes": 1, "output_bytes": 1,
               "alias_bytes": 1, "temp_bytes": 2**20, "compile_s": 3.5}
    return {"config": config, "topology": topology, "chips": chips, "device_kind": "TPU v5 lite",
            "versions": {"jax": "0.10.2", "libtpu": "0.0.42.1"}, "hbm_bytes_per_chip": 16 * 2**30, "fits": True,
            "programs": {"train_step": program, "eval_step": {**program, "total_bytes": 2**20}}, **search}
  src = tmp_path / "compiles"
  src.mkdir()
  (src / "a.out").write_text("noise\nAOT_JSON " + json.dumps(record("rhn_tied", "v5e:2x2", 4, 3 * 2**20,
                             max_batch=7168, max_batch_per_chip=1792, smallest_not_fitting=8192)) + "\n")
  (src / "b.out").write_text("AOT_JSON " + json.dumps(record("small", "v5e:1x1", 1, 2**21)) + "\n")
  (src / "c.out").write_text("a failed compile prints no record\n")
  readme = tmp_path / "README.md"
  readme.write_text("x\n<!-- report:tpu_memory:begin -->\nold\n<!-- report:tpu_memory:end -->\ny\n")
  tab = tpu_memory.build_tpu_memory("tpu_memory", tmp_path / "results", src, readme)
  rows = tab.splitlines()[2:]
  assert rows == ["| small | v5e:1x1 | 20 | 2.0 (1.0) | 1.0 | yes | 3.5, 3.5 | not searched |",
                  "| rhn_tied | v5e:2x2 | 20 | 3.0 (1.0) | 1.0 | yes | 3.5, 3.5 | 1,792 (7,168; 8,192) |"]
  assert sorted(p.name for p in (tmp_path / "results" / "tpu_memory").glob("*.json")) == [
      "rhn_tied_v5e_2x2.json", "small_v5e_1x1.json"]
  text = readme.read_text()
  assert "old" not in text and "jax 0.10.2 / libtpu 0.0.42.1" in text and rows[1] in text
  page = tmp_path / "results" / "tpu_memory" / "README.md"
  text = page.read_text()
  assert text.startswith("# ") and "<!-- report:tpu_memory:begin -->\nTPU v5e memory per chip" in text
  assert text.endswith("Rebuild: `python -m experiments.report tpu_memory`\n<!-- report:tpu_memory:end -->\n")
  page.write_text(f"Prose before.\n\n{text}\nProse after.\n")
  assert tpu_memory.build_tpu_memory("tpu_memory", tmp_path / "results") == tab  # rebuilt from the records alone
  assert page.read_text() == f"Prose before.\n\n{text}\nProse after.\n"


@pytest.mark.parametrize("name", ["transformer_ptb", "transformer_wikitext2"])
def test_transformer_report_rows_name_the_configs_their_commands_build(name):
  """Each row's --config value builds a config whose name is the row's key and whose corpus is the report's:
  the report can find the runs its own commands produce."""
  from configs import transformer
  spec = lm_tables.REPORTS[name]
  for row in spec.rows:
    config = transformer.get_config(row.flag.removeprefix("configs/transformer.py:"))
    assert (config.name, config.dataset) == (row.config, spec.dataset), row


# --- The committed pages ---------------------------------------------------------------------------------

ALL_REPORTS = [*report.REPORTS, *report.NMT_REPORTS, *report.OTHER_REPORTS]


@pytest.mark.parametrize("name", ALL_REPORTS)
def test_committed_study_pages_keep_their_prose_through_a_rebuild(name):
  """Each report's committed page holds its markers, so a rebuild regenerates only the parts between them."""
  text = (REPO / "results" / name / "README.md").read_text()
  keys = [name] if name in report.OTHER_REPORTS else [name, f"{name}:runs"]
  for key in keys:
    assert text.count(f"<!-- report:{key}:begin -->") == text.count(f"<!-- report:{key}:end -->") == 1, key


def _links(md: Path) -> list[str]:
  """Relative link targets of a Markdown file, outside code blocks."""
  text = re.sub(r"^```.*?^```", "", md.read_text(), flags=re.S | re.M)
  return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", t)]


def _anchors(md: Path) -> set[str]:
  """GitHub's anchors of a Markdown file's headings."""
  heads = re.findall(r"^#+ (.*)$", re.sub(r"^```.*?^```", "", md.read_text(), flags=re.S | re.M), re.M)
  return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def _pages() -> list[Path]:
  return [REPO / "README.md", *sorted((REPO / "results").glob("*/README.md"))]


@pytest.mark.parametrize("md", _pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(md):
  for target in _links(md):
    path, _, anchor = target.partition("#")
    dest = (md.parent / path).resolve() if path else md
    assert dest.exists(), f"{md.relative_to(REPO)}: {target}"
    if anchor and dest.suffix == ".md":
      assert anchor in _anchors(dest), f"{md.relative_to(REPO)}: {target} (no such heading)"


def test_readme_is_short_and_its_numbers_are_on_the_pages_it_links():
  """The README is the product page (at most 300 lines); each number of ours in its results table is on the
  study page that row links to, where the report tool keeps the run records."""
  readme = (REPO / "README.md").read_text()
  assert len(readme.splitlines()) <= 300
  # No report sections in it (the report tool writes the study pages; --readme is off by default).
  assert "<!-- report:" not in readme and report._README.default == "" and "<!-- api-example -->" in readme
  glance = readme.split("## Results at a glance", 1)[1].split("\n## ", 1)[0]
  rows = [l for l in glance.splitlines() if l.startswith("| ") and not l.startswith("| paper result")]
  assert len(rows) >= 10
  for row in rows:
    cells = [c.strip() for c in row.strip("|").split(" | ")]
    ours, study = cells[2], cells[-1]
    targets = re.findall(r"\[[^]]+\]\(([^)#]+)(?:#[^)]*)?\)", study)
    assert targets, row
    pages = "".join((REPO / t).read_text() for t in targets)
    for number in re.findall(r"\d+\.\d+", ours):
      assert number in pages, f"{number} ({row[:60]}…) is not on {targets}"


def test_softmax_study_table_reads_the_runs_table6_the_bench_and_table4(tmp_path):
  """The softmax study's table: each approximation's cell from its runs (the tied − untied gap, rows reached per
  step from the curves), the full-softmax cells from Table 6's results, ms/step from bench.jsonl, ρ from the
  embedding tables; a cell with no run says so."""
  out, runs = tmp_path / "results", tmp_path / "runs"
  for config, seed, test in (("small", 0, 117.0), ("small_tied", 0, 113.0)):
    _fake_run(tmp_path / "t6" / f"{config}_seed{seed}", config, seed, test)
  records.import_runs(tmp_path / "t6", out / "ptb_table6")
  settings = {"num_samples": 1000, "proposal": "log_uniform"}
  for config, tying, test, rows in (("small", "untied", 121.0, {"embedding": 230.0, "out_embedding": 680.0}),
                                    ("small_tied", "tied", 116.0, {"embedding": 690.0})):
    folder = runs / f"{config}_sampled_seed0"
    _fake_run(folder, config, 0, test)
    res = json.loads((folder / "results.json").read_text())
    (folder / "results.json").write_text(json.dumps(
        {**res, "softmax": "sampled", "softmax_settings": settings, "tying": tying}))
    (folder / "metrics.jsonl").write_text(json.dumps(
        {"kind": "epoch", "epoch": 1, "valid_ppl": 150.0, **{f"rows/grad/words/{k}": v for k, v in rows.items()},
         **{f"norm/grad/words/{k}": v / 200 for k, v in rows.items()}}) + "\n")
  (out / "softmax_study").mkdir(parents=True)
  (out / "softmax_study" / "bench.jsonl").write_text("".join(
      json.dumps({"softmax": kind, "train_ms_per_step": ms}) + "\n"
      for kind, ms in (("full", 60.0), ("sampled", 20.0), ("full", 70.0), ("sampled", 21.0))))
  (out / "softmax_study" / "embeddings_sampled").mkdir()
  (out / "softmax_study" / "embeddings_sampled" / "tables.json").write_text(json.dumps(
      {"table4": {"LM (ptb)": {"in_out": 0.1, "in_tied": 0.3, "out_tied": 0.7}}}))

  tab = softmax_study.build_softmax_study("softmax_study", out, runs)

  lines = tab.splitlines()
  row = lambda prefix: next(l for l in lines if l.startswith(prefix))
  assert row("| full softmax | tied |").split(" | ")[5] == "-4.0"  # 113.0 − 117.0, from Table 6's results
  assert "| all 10,000 |" in row("| full softmax | untied |")
  sampled_tied = row("| sampled softmax | tied |")
  assert "| -5.0 |" in sampled_tied and "| 690 (one matrix) |" in sampled_tied and "| 0.300 / 0.700 |" in sampled_tied
  assert "| 20.5 (×0.32) |" in sampled_tied  # medians over the rounds: 20.5 against 65.0
  assert "| 3.45 (one matrix) |" in sampled_tied  # the curve's gradient norm
  assert "| 680 | 230 | 3.40 / 1.15 |" in row("| sampled softmax | untied |")  # rows; gradient norms out / in
  assert "| all 10,000 | the batch's distinct words | — |" in row("| full softmax | untied |")  # not recorded
  page = (out / "softmax_study" / "README.md").read_text()
  assert "K = 1,000 draws (≈ 537 distinct) per step" in page  # with replacement, on a 10,000-word log-uniform Q
  assert "settings: num_samples=1000, proposal=log_uniform (recorded)" in page
  assert "concurrency not recorded" in page  # imported without a run.json
  assert row("| NCE | untied |").startswith("| NCE | untied | none yet |")
  assert "--config.softmax.kind=sampled --config.seed=0" in (out / "softmax_study" / "README.md").read_text()


def test_the_wikitext2_softmax_study_reads_only_its_corpus_and_gives_its_flags(tmp_path):
  """softmax_study_wt2: its cells from WikiText-2 runs only (no Table 6 rows: those are PTB), the full row's
  "all rows" is its vocabulary, each command carries the corpus flags; a PTB run there is refused."""
  out, runs = tmp_path / "results", tmp_path / "runs"
  settings = {"num_samples": 3300, "proposal": "log_uniform"}
  for config, tying, test in (("small", "untied", 130.0), ("small_tied", "tied", 124.5)):
    folder = runs / f"{config}_sampled_k3300_seed0"
    _fake_run(folder, config, 0, test)
    res = json.loads((folder / "results.json").read_text())
    (folder / "results.json").write_text(json.dumps(
        {**res, "dataset": "wikitext2", "softmax": "sampled", "softmax_settings": settings, "tying": tying}))
  _fake_run(tmp_path / "t6" / "small_seed0", "small", 0, 117.0)
  records.import_runs(tmp_path / "t6", out / "ptb_table6")

  tab = softmax_study.build_softmax_study("softmax_study_wt2", out, runs)

  assert "full softmax" not in tab and "Table 6" not in tab
  row = next(l for l in tab.splitlines()
             if l.startswith("| sampled softmax, log-uniform proposal, K = 3,300 draws (≈ 1,610 distinct) | tied |"))
  assert "| -5.5 |" in row
  assert ("--config=configs/small_tied.py --config.dataset=wikitext2 --config.vocab_size=33278 "
          "--config.softmax.kind=sampled --config.softmax.proposal=log_uniform --config.softmax.num_samples=3300 "
          "--config.seed=0 --workdir=runs/softmax_study_wt2/small_tied_sampled_k3300_seed0") in (
              out / "softmax_study_wt2" / "README.md").read_text()
  _fake_run(runs / "small_full_seed1", "small", 1, 117.0)  # a PTB run in the WikiText-2 study
  with pytest.raises(ValueError, match="'ptb', but this study is on 'wikitext2'"):
    softmax_study.build_softmax_study("softmax_study_wt2", out, runs)


def test_a_full_softmax_run_is_refused_where_table6_gives_the_full_rows_and_kept_where_it_does_not(tmp_path):
  """On PTB the study's full-softmax rows are Table 6's runs: a full-softmax run imported into the study is
  refused in one line, the page left as it was, not dropped without a word. On WikiText-2, where Table 6 has no
  runs, it is the full row, listed with its own command (not as a Table 6 run)."""
  from tests.in_process import main_ends_with
  out, runs = tmp_path / "results", tmp_path / "runs"
  _fake_run(tmp_path / "t6" / "small_tied_seed0", "small_tied", 0, 113.0)
  records.import_runs(tmp_path / "t6", out / "ptb_table6")
  settings = {"num_samples": 1000, "proposal": "log_uniform"}
  _fake_run(runs / "small_tied_sampled_seed0", "small_tied", 0, 116.0)
  res = json.loads((runs / "small_tied_sampled_seed0" / "results.json").read_text())
  (runs / "small_tied_sampled_seed0" / "results.json").write_text(json.dumps(
      {**res, "softmax": "sampled", "softmax_settings": settings, "tying": "tied"}))
  softmax_study.build_softmax_study("softmax_study", out, runs)
  page = {p: p.read_bytes() for p in (out / "softmax_study").rglob("*") if p.is_file()}
  full = tmp_path / "more" / "small_tied_full_seed1"
  _fake_run(full, "small_tied", 1, 110.0)
  (full / "results.json").write_text(json.dumps({**res, "seed": 1, "test_ppl": 110.0, "tying": "tied"}))
  ends = main_ends_with(report.main, ["report", "softmax_study"], runs=str(full.parent), out=str(out))
  assert ends is not None and "\n" not in ends, ends
  assert "is a full-softmax run; this study's full-softmax rows are Table 6's runs" in ends
  assert {p: p.read_bytes() for p in (out / "softmax_study").rglob("*") if p.is_file()} == page

  (full / "results.json").write_text(json.dumps({**res, "seed": 1, "test_ppl": 110.0, "tying": "tied",
                                                 "dataset": "wikitext2", "softmax": "full"}))
  tab = softmax_study.build_softmax_study("softmax_study_wt2", out, full.parent)
  assert next(l for l in tab.splitlines() if l.startswith("| full softmax | tied |")).split(" | ")[4] == "110.0"
  readme = (out / "softmax_study_wt2" / "README.md").read_text()
  assert ("--config.softmax.kind=full --config.seed=1 --workdir=runs/softmax_study_wt2/small_tied_full_seed1` — "
          "commit `abc123`, settings: none (recorded)") in readme
  assert "(Table 6's run; its record there)" not in readme and "The full-softmax rows are this study's runs on this corpus." in readme


def test_a_sampled_run_with_another_proposal_or_k_is_a_cell_of_its_own(tmp_path):
  out, runs = tmp_path / "results", tmp_path / "runs"
  settings = {"num_samples": 100, "proposal": "unigram", "unigram_power": 1.0}
  for config, tying, test in (("small", "untied", 125.0), ("small_tied", "tied", 122.0)):
    folder = runs / f"{config}_sampled_unigram_k100_seed0"
    _fake_run(folder, config, 0, test)
    res = json.loads((folder / "results.json").read_text())
    (folder / "results.json").write_text(json.dumps(
        {**res, "softmax": "sampled", "softmax_settings": settings, "tying": tying}))
  (out / "softmax_study").mkdir(parents=True)
  tab = softmax_study.build_softmax_study("softmax_study", out, runs)
  row = next(l for l in tab.splitlines() if l.startswith("| sampled softmax, unigram proposal (power 1), K = 100 draws | tied |"))
  assert "| -3.0 |" in row
  assert "| sampled softmax | tied | none yet |" in tab  # the study's own sampled cell stays apart
  assert ("--config.softmax.kind=sampled --config.softmax.proposal=unigram --config.softmax.unigram_power=1 "
          "--config.softmax.num_samples=100 --config.seed=0") in (out / "softmax_study" / "README.md").read_text()


# --- Inan et al.'s Tables 1 and 2 ------------------------------------------------------------------------

def _inan_run(folder: Path, config: str, seed: int, valid: float, test: float, dataset: str = "ptb",
              epochs: int = 3) -> None:
  """A finished run's workdir: results.json and metrics.jsonl (validation falling to `valid` at the end)."""
  folder.mkdir(parents=True)
  (folder / "metrics.jsonl").write_text("".join(
      json.dumps({"kind": "epoch", "epoch": e, "valid_ppl": valid + 10.0 * (epochs - e)}) + "\n"
      for e in range(1, epochs + 1)))
  (folder / "results.json").write_text(json.dumps({
      "config": config, "dataset": dataset, "seed": seed, "num_params": 19_775_200, "train_ppl": 50.0,
      "valid_ppl": valid, "test_ppl": test, "epochs": float(epochs), "wall_s": 1200.0, "train_tokens_per_s": 9e4,
      "versions": {"wt_jax_commit": "def456"}, "matmul_precision": "tensorfloat32", "device_kind": "NVIDIA H200",
      "host": {"cpu": "Test CPU", "cpu_count": 16, "platform": "gpu"}}))


def test_inan_page_tables_1_and_2_paper_beside_ours(tmp_path):
  """The Inan page: the small PTB rows read from results/inan_ptb_table1 (both sessions), the others from the
  page's own runs: one seed → its value, several → mean ± sample sd (each seed); a row without a run says
  'not run yet'; the paper's order claims checked per size and corpus; each own run's command."""
  out, runs = tmp_path / "results", tmp_path / "runs"
  small = tmp_path / "small"
  for v, test in (("vd", 88.0), ("al", 87.0), ("re", 86.0), ("real", 85.0)):
    _inan_run(small / f"small_{v}_keep", f"inan_small_{v}_keep", 0, test + 4.0, test + 0.5)
    _inan_run(small / f"small_{v}_keep_s2", f"inan_small_{v}_keep_s2", 0, test + 4.0, test)
  records.import_runs(small, out / "inan_ptb_table1")
  _inan_run(runs / "medium_vd", "inan_medium_vd_keep", 0, 84.0, 79.0)
  _inan_run(runs / "medium_vd_seed1", "inan_medium_vd_keep", 1, 86.0, 81.0)
  for v, test in (("vd", 150.0), ("al", 140.0), ("re", 145.0), ("real", 141.0)):
    _inan_run(runs / f"h2_{v}", f"inan_small_{v}_wikitext2_half2_keep", 0, test + 10.0, test, "wikitext2_half2")
  _inan_run(runs / "h2_re_seed1", "inan_small_re_wikitext2_half2_keep", 1, 157.0, 147.0, "wikitext2_half2")

  tab = inan.build_inan("inan_table1_2", out, runs)

  row = lambda prefix: next(l for l in tab.splitlines() if l.startswith(prefix))
  assert row("| 1 | PTB | small (200) | + RE, App. A, retrained (footnote 4) |").endswith(
      "| 0 | 89.9 / 90.0 | 85.1 / 86.0 | +0.9 |")
  assert row("| 1 | PTB | small (200) | + RE, App. A, first session |").endswith("| 85.1 / 86.5 | +1.4 |")
  medium = row("| 1 | PTB | medium (650) | VD-LSTM |").split(" | ")
  assert medium[4:] == ["19,775,200", "0, 1", "82.0 / 85.0 ± 1.4 (84.0, 86.0)", "77.7 / 80.0 ± 1.4 (79.0, 81.0)",
                        "+2.3 |"]
  assert row("| 1 | PTB | medium (650) | + AL |") == (
      "| 1 | PTB | medium (650) | + AL | — | not run yet | 77.4 / — | 74.7 / — | — |")
  assert row("| 2 | WikiText-2, second half | small (200) | VD-LSTM |").endswith(
      "| 163.19 / 160.0 | 148.6 / 150.0 | +1.4 |")
  assert row("| 1 | WikiText-2 | small (200) | + REAL |").endswith("| not run yet | 105.6 / — | 98.9 / — | — |")
  assert len([l for l in tab.splitlines() if l.startswith("| 1 | PTB | large (1500) |") and "not run yet" in l]) == 4
  claims = {l.split(": ", 1)[0]: l.split(": ", 1)[1] for l in tab.splitlines() if l.startswith("- Table")}
  # Each claim names the seeds behind the means it compares, and their spread where there are several.
  # (one seed on a side: no verdict; order_line's own test reads claims against seeds)
  not_read = "not read (one seed on a side)"
  assert claims["- Table 2, WikiText-2, second half, small, ours"] == (
      f"AL < VD: {not_read}, RE < VD: {not_read}, REAL lowest: {not_read} (AL 140.00 < REAL 141.00 < RE 146.00 < "
      "VD 150.00); seeds: VD 0, AL 0, RE 0 and 1 (test sd 1.41), REAL 0")
  assert claims["- Table 1, PTB, small, ours, App. A, retrained (footnote 4)"].startswith(
      f"AL < VD: {not_read}, RE < VD: {not_read}, REAL lowest: {not_read}")
  assert claims["- Table 1, PTB, medium, ours"] == "not run yet (1 of 4 rows)"
  assert claims["- Table 1, PTB, large, paper"] == (
      "AL < VD: yes, RE < VD: yes, REAL lowest: yes (REAL 68.5 < RE 69.0 < AL 71.2 < VD 72.6)")
  page = (out / "inan_table1_2" / "README.md").read_text()
  # The lead names the AL's τ and γ the config gives (not the transcription's values).
  al = inan_config.get_config("small,al").al
  assert f"τ = {al.tau:g} and γ = {al.alpha / al.tau:g} (PTB)" in page
  assert ("`python -m experiments.ptb --config=configs/inan.py:small,al,wikitext2_half2 --config.seed=0 "
          "--config.matmul_precision=tensorfloat32 --workdir=runs/inan_table1_2/h2_al` — commit `def456`, machine: "
          "NVIDIA H200") in page
  assert "[results/inan_ptb_table1](../inan_ptb_table1/README.md#runs)" in page
  assert (out / "inan_table1_2" / "figure2.png").is_file()
  assert inan.build_inan("inan_table1_2", out) == tab  # rebuilt from the imported records alone


def test_inan_page_with_no_run_and_the_runs_it_refuses(tmp_path):
  """No run anywhere: every row 'not run yet' and no figure. A run of a small PTB config (its place is
  results/inan_ptb_table1), of a config that is no row of the page, or on another corpus than its row's is
  refused with a clear message."""
  out = tmp_path / "results"
  tab = inan.build_inan("inan_table1_2", out)
  body = [l for l in tab.splitlines() if l.startswith("| 1 ") or l.startswith("| 2 ")]
  assert len(body) == 4 * 2 + 4 * 6 and all("| not run yet |" in l for l in body)
  assert not (out / "inan_table1_2" / "figure2.png").exists()
  for config, dataset, message in (("inan_small_vd_keep", "ptb", "its place is results/inan_ptb_table1"),
                                   ("inan_small_vd", "ptb", "no row of this page"),
                                   ("inan_small_vd_wikitext2_half1_keep", "wikitext2", "is a 'wikitext2_half1' row")):
    runs = tmp_path / f"runs_{config}_{dataset}"
    _inan_run(runs / "r", config, 0, 100.0, 95.0, dataset)
    with pytest.raises(ValueError, match=re.escape(message)):
      inan.build_inan("inan_table1_2", tmp_path / f"out_{config}_{dataset}", runs)


def test_inan_figure2_draws_the_small_rows_through_both_sessions():
  """A small PTB first session's curve goes on into its second session (epochs shifted by the first's); a second
  session without its first is drawn alone; a first session without a second ends where it ends."""
  first_row, second_row = [r for r in inan.rows() if r.config.startswith("inan_small_al_keep")]
  run = lambda config, seed, curve: {"config": config, "seed": seed, "_valid_curve": curve}
  by_config = {"inan_small_al_keep": [run("inan_small_al_keep", 0, [(1, 120.0), (2, 100.0)]),
                                      run("inan_small_al_keep", 1, [(1, 121.0), (2, 101.0)])],
               "inan_small_al_keep_s2": [run("inan_small_al_keep_s2", 0, [(1, 105.0), (2, 95.0)]),
                                         run("inan_small_al_keep_s2", 2, [(1, 106.0)])]}
  assert inan.curves(first_row, by_config) == [(0, [1, 2, 3, 4], [120.0, 100.0, 105.0, 95.0], 2),
                                               (1, [1, 2], [121.0, 101.0], 0)]
  assert inan.curves(second_row, by_config) == [(2, [1], [106.0], 0)]


def test_a_members_run_is_imported_member_by_member_and_shown_as_mean_sd(tmp_path):
  """A members run (wt_jax.members) keeps each member's run folder under <run>/members/<k>/: the import takes
  each finished member as a run of its own (`<run>_m<k>`), leaves out a member that diverged, and the row
  shows the mean ± the sample standard deviation, then each seed."""
  runs = tmp_path / "runs"
  for k, test in enumerate((110.0, 112.0, 117.0)):
    _fake_run(runs / "small_tied_k3" / "members" / str(k), "small_tied", k, test)
  sick = runs / "small_tied_k3" / "members" / "2" / "results.json"
  sick.write_text(json.dumps({**json.loads(sick.read_text()), "member": {"diverged": {"step": 7, "reason": "NaN"}}}))
  (runs / "small_tied_k3" / "summary.json").write_text("{}")
  assert [n for n, _ in records.finished_runs(runs)] == ["small_tied_k3_m0", "small_tied_k3_m1"]
  tab = lm_tables.build("ptb_table6", tmp_path / "results", runs, None)
  row = next(l for l in tab.splitlines() if l.startswith("| small + WT |"))
  assert "| 0, 1 |" in row and "111.0 ± 1.4 (110.0, 112.0)" in row
  assert records.seeds_cell([]) == "—" and records.seeds_cell([3.14159]) == "3.1"


def test_softmax_runs_without_recorded_settings_take_them_from_their_commit_or_are_refused(tmp_path):
  """A run from before results.json recorded `softmax_settings` gets the settings its commit ran with
  (softmax_study.UNRECORDED_SOFTMAX_SETTINGS), and the runs list says where they come from; a run from a commit the
  table does not know is refused rather than given the study's settings."""
  out, runs = tmp_path / "results", tmp_path / "runs"
  for config, tying, test in (("small", "untied", 121.0), ("small_tied", "tied", 116.0)):
    folder = runs / f"{config}_sampled_seed0"
    _fake_run(folder, config, 0, test)
    res = json.loads((folder / "results.json").read_text())
    (folder / "results.json").write_text(json.dumps(
        {**res, "softmax": "sampled", "tying": tying,
         "versions": {"wt_jax_commit": "95e93b48e5361abddb101a6f629e9f71b1f1d9b7"}}))
  (out / "softmax_study").mkdir(parents=True)
  tab = softmax_study.build_softmax_study("softmax_study", out, runs)
  assert "| sampled softmax | tied | 0 |" in tab
  assert ("settings: num_samples=1000, proposal=log_uniform (not recorded: commit 95e93b4's configs/lm_base.py "
          "defaults") in (out / "softmax_study" / "README.md").read_text()
  folder = runs / "small_nce_seed0"
  _fake_run(folder, "small", 0, 110.0)  # commit abc123: not in the table
  res = json.loads((folder / "results.json").read_text())
  (folder / "results.json").write_text(json.dumps({**res, "softmax": "nce", "tying": "untied"}))
  with pytest.raises(ValueError, match="small_nce_seed0: softmax 'nce' without softmax_settings"):
    softmax_study.build_softmax_study("softmax_study", out, runs)


def test_softmax_study_gives_the_gap_seed_by_seed_and_which_runs_shared_the_machine(tmp_path):
  """Seeds 0 and 1 of a pair: the table's gap is between the means, the line under it gives each seed's; the
  runs list says, from each run.json's start and the wall time, which study runs overlapped."""
  out, runs = tmp_path / "results", tmp_path / "runs"
  settings = {"num_samples": 1000, "proposal": "log_uniform"}
  starts = {("small", 0): "2026-01-01T10:00:00Z", ("small_tied", 0): "2026-01-01T10:05:00Z",  # overlap
            ("small", 1): "2026-01-01T12:00:00Z", ("small_tied", 1): "2026-01-01T12:20:00Z"}  # 10 min each: apart
  for (config, seed), test in {("small", 0): 121.0, ("small_tied", 0): 116.0,
                               ("small", 1): 120.0, ("small_tied", 1): 116.6}.items():
    folder = runs / f"{config}_sampled_seed{seed}"
    _fake_run(folder, config, seed, test)
    res = json.loads((folder / "results.json").read_text())
    (folder / "results.json").write_text(json.dumps(
        {**res, "softmax": "sampled", "softmax_settings": settings, "tying": "tied" if "tied" in config else "untied"}))
    (folder / "run.json").write_text(json.dumps({"started_utc": starts[(config, seed)], "resumes": []}))
  (out / "softmax_study").mkdir(parents=True)
  tab = softmax_study.build_softmax_study("softmax_study", out, runs)
  assert "| sampled softmax | tied | 0, 1 |" in tab and "| -4.2 |" in tab  # 116.3 − 120.5
  page = (out / "softmax_study" / "README.md").read_text()
  assert "sampled softmax -5.0 (seed 0), -3.4 (seed 1)." in page
  assert "started 2026-01-01T10:00:00Z, beside `small_tied_sampled_seed0`" in page
  assert ("`small_tied_sampled_seed1`: " in page and "started 2026-01-01T12:20:00Z, no other run of this study "
          "with a recorded start beside it") in page
  assert (out / "softmax_study" / "small_sampled_seed1" / "run.json").exists()  # imported with the run


def test_tpu_memory_page_lists_members_records_in_a_table_of_their_own(tmp_path):
  """A --find_max_members record (experiments.compile) is kept beside the plain record of the same config and
  topology (not over it) and shown as members per chip, with the smallest K refused."""
  program = {"platform": "tpu", "batch_size": 20, "total_bytes": 3 * 2**20, "argument_bytes": 1, "output_bytes": 1,
             "alias_bytes": 1, "temp_bytes": 2**20, "compile_s": 3.5}
  base = {"config": "rhn_tied", "topology": "v5e:1x1", "chips": 1, "device_kind": "TPU v5 lite",
          "versions": {"jax": "0.10.2", "libtpu": "0.0.42.1"}, "hbm_bytes_per_chip": 16 * 2**30, "fits": True,
          "programs": {"train_step": program, "eval_step": program}}
  src = tmp_path / "compiles"
  src.mkdir()
  (src / "plain.out").write_text("AOT_JSON " + json.dumps({**base, "max_batch": 1792, "max_batch_per_chip": 1792,
                                                           "smallest_not_fitting": 2048}) + "\n")
  (src / "members.out").write_text("AOT_JSON " + json.dumps({
      **base, "max_members": 32, "max_members_per_chip": 32, "max_members_capped": False, "members_not_fitting": 34,
      "members_tried": {"1": 400 * 2**20, "32": 15 * 2**30, "34": None}}) + "\n")
  page = tpu_memory.build_tpu_memory("tpu_memory", tmp_path / "results", src, None)
  assert sorted(p.name for p in (tmp_path / "results" / "tpu_memory").glob("*.json")) == [
      "rhn_tied_v5e_1x1.json", "rhn_tied_v5e_1x1_members.json"]
  assert page.count("| rhn_tied | v5e:1x1 |") == 1  # the plain table: the plain record only
  text = (tmp_path / "results" / "tpu_memory" / "README.md").read_text()
  assert "| rhn_tied | v5e:1x1 | 20 | 32 (34) | 400.0, 15,360.0 |" in text


def test_members_speed_page_from_bench_sweeps(tmp_path):
  """`experiments.bench --members_sweep` lines (bare, or wrapped by experiments/gpu/bench.sh) →
  results/members/<device>.jsonl → the table: one model's ms, then each K's time of one with every round's ms;
  re-importing adds nothing."""
  from experiments.reports import members_speed
  run = lambda ms: {"train_ms_per_step": ms}
  sweep = {"bench": "members_sweep", "config": "small_tied", "rounds": 2, "members": [0, 2],
           "train_ms_per_step_median": {"0": 100.0, "2": 150.0}, "time_of_one": {"0": 1.0, "2": 1.5},
           "device_kind": "NVIDIA H200", "jax": "0.11.2", "runs": {"0": [run(99.0), run(101.0)],
                                                                   "2": [run(140.0), run(160.0)]}}
  src = tmp_path / "bench"
  src.mkdir()
  (src / "bench.jsonl").write_text(json.dumps({"name": "small_tied members", "wall_s": 80, "result": sweep}) + "\n"
                                   + json.dumps({"bench": "wt_jax_lm", "config": "x"}) + "\n")
  page_dir = tmp_path / "results" / "members"
  page_dir.mkdir(parents=True)  # other records of the page's folder (batched_matmul.py's) are not sweeps
  (page_dir / "batched_matmul_cpu.jsonl").write_text(json.dumps({"shape": [20, 200, 800], "one_us": 102.3}) + "\n")
  tab = members_speed.build_members_speed("members", tmp_path / "results", src)
  assert ("| small_tied | NVIDIA H200 | 0.11.2 | not recorded | 2 | 100 (99, 101) | — | 1.50× (140, 160 ms) | — | — |"
          in tab)
  members_speed.build_members_speed("members", tmp_path / "results", src)
  assert len((page_dir / "NVIDIA_H200.jsonl").read_text().splitlines()) == 1
  assert "report:members:profile" not in (page_dir / "README.md").read_text()  # no profile records yet
  # A sweep of the same config by other code is a row of its own, named by its commit.
  (src / "again.jsonl").write_text(json.dumps({**sweep, "wt_jax_commit": "abcdef0123456789+dirty"}) + "\n")
  tab = members_speed.build_members_speed("members", tmp_path / "results", src)
  assert "| small_tied | NVIDIA H200 | 0.11.2 | abcdef0+dirty | 2 |" in tab and tab.count("| small_tied |") == 2


def test_members_page_profile_table_from_profile_records(tmp_path):
  """members_profile lines → results/members/profile_<device>.jsonl → the page's profile table: per K the
  medians over rounds, each with its ratio to one model, then the largest K's costliest ops; the prose around
  the markers is kept and a rebuild changes nothing."""
  from experiments.reports import members_speed
  op = lambda ms, product, source: {"op": "f", "ms": ms, "product": product, "shape": "f32[2,400,10000]",
                                    "source": source}
  line = lambda k, r, ms, products, other: {
      "bench": "members_profile", "config": "configs/small_tied.py", "device_kind": "cpu", "jax": "0.10.2",
      "members": k, "round": r, "ms_per_step": ms, "op_ms_per_step": products + other, "product_ms": products,
      "other_ms": other, "top_ops": [op(products, True, "logits/dot_general"), op(other, False, "add_any")]}
  src = tmp_path / "bench"
  src.mkdir()
  (src / "profile.jsonl").write_text("".join(json.dumps(l) + "\n" for l in [
      line(0, 0, 100, 140, 60), line(2, 0, 230, 330, 220), line(0, 1, 120, 160, 80), line(2, 1, 250, 350, 240),
      {"bench": "members_profile_ratios", "config": "configs/small_tied.py", "device_kind": "cpu", "jax": "0.10.2",
       "steps": 20, "rounds": 2}]))
  sweep = {"bench": "members_sweep", "config": "small_tied", "rounds": 1, "members": [0, 2],
           "train_ms_per_step_median": {"0": 100.0, "2": 150.0}, "time_of_one": {"0": 1.0, "2": 1.5},
           "device_kind": "cpu", "jax": "0.10.2", "runs": {"0": [{"train_ms_per_step": 100.0}],
                                                         "2": [{"train_ms_per_step": 150.0}]}}
  (src / "sweep.jsonl").write_text(json.dumps(sweep) + "\n")
  members_speed.build_members_speed("members", tmp_path / "results", src)
  page = tmp_path / "results" / "members" / "README.md"
  assert len((page.parent / "profile_cpu.jsonl").read_text().splitlines()) == 5
  text = page.read_text()
  row = "| configs/small_tied.py | cpu | 0.10.2 | not recorded | 20 | 2 |"
  assert f"{row} 0 | 110 | 220 | 150 | 70 |" in text
  assert f"{row} 2 | 240 (2.18×) | 570 (2.59×) | 340 (2.27×) | 230 (3.29×) |" in text
  assert ("- configs/small_tied.py (code not recorded), K = 2, round 1: 350.0 ms product f32[2,400,10000] "
          "`logits/dot_general`") in text
  # Rounds of other code are a group of their own, not pooled with these.
  (src / "profile2.jsonl").write_text("".join(json.dumps({**l, "wt_jax_commit": "1234567abcdef"}) + "\n" for l in [
      line(0, 0, 50, 70, 30), line(2, 0, 90, 120, 60)]))
  members_speed.build_members_speed("members", tmp_path / "results", src)
  text = page.read_text()
  assert f"{row} 2 | 240 (2.18×) | 570 (2.59×) | 340 (2.27×) | 230 (3.29×) |" in text
  assert "| configs/small_tied.py | cpu | 0.10.2 | 1234567 | — | 1 | 2 | 90 (1.80×) |" in text
  begin = "<!-- report:members:profile:begin -->"
  page.write_text(text.replace(begin, f"Prose kept.\n\n{begin}"))
  members_speed.build_members_speed("members", tmp_path / "results", src)
  again = page.read_text()
  assert "Prose kept." in again and again.count("report:members:profile:begin") == 1
  members_speed.build_members_speed("members", tmp_path / "results")
  assert page.read_text() == again


def test_the_report_command_stops_on_bad_input_with_one_line(tmp_path):
  """A page that cannot be built (no such --runs folder; no records to build it from) ends the command with the
  reason as its last line, exit status 1 and no traceback."""
  import subprocess
  import sys
  for args, says in ((["table5", f"--runs={tmp_path / 'missing'}"], "is not a directory"),
                     (["tpu_memory", f"--out={tmp_path / 'results'}"], "no compile records")):
    res = subprocess.run([sys.executable, "-m", "experiments.report", *args], cwd=REPO, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 1 and says in res.stderr.strip().splitlines()[-1], res.stderr[-2000:]
    assert "Traceback" not in res.stderr, res.stderr[-2000:]


def _softmax_run(runs: Path, run_json: str) -> None:
  """A finished sampled-softmax run of the softmax study in runs/, with `run_json` as its run.json."""
  folder = runs / "small_tied_sampled_seed9"
  _fake_run(folder, "small_tied", 9, 116.0)
  res = json.loads((folder / "results.json").read_text())
  (folder / "results.json").write_text(json.dumps({**res, "softmax": "sampled", "tying": "tied", "softmax_settings":
                                                   {"num_samples": 1000, "proposal": "log_uniform"}}))
  (folder / "run.json").write_text(run_json)


def _tree(root: Path) -> dict:
  return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("kind, page, bad", [
    ("not JSON", "ptb_table6", lambda d: (d / "results.json").write_text('{"config": "small", "se')),
    ("a list", "ptb_table6", lambda d: (d / "results.json").write_text("[1, 2]")),
    ("no epoch records", "ptb_table6", lambda d: (d / "metrics.jsonl").unlink()),
    ("a damaged metrics line", "ptb_table6", lambda d: (d / "metrics.jsonl").write_text('{"kind": "epo\n')),
    ("another corpus", "ptb_table6", lambda d: (d / "results.json").write_text(json.dumps(
        {**json.loads((d / "results.json").read_text()), "dataset": "wikitext2"}))),
    ("an incomplete compile record", "tpu_memory", lambda d: (d / "out.txt").write_text(
        'AOT_JSON {"config": "small", "topology": "v5e:2x2", "chips": 4}\n')),
    ("a damaged bench line", "members", lambda d: (d / "bench.jsonl").write_text('{"bench": "members_sw\n')),
    ("a damaged run.json", "softmax_study", lambda d: _softmax_run(d, run_json='{"started_utc": "2026-'))])
def test_a_damaged_record_is_refused_in_one_line_and_the_committed_page_is_as_it_was(kind, page, bad, tmp_path):
  """`python -m experiments.report PAGE --runs=DIR` (its `main`, in this process) with one damaged or foreign
  record among good ones: one line naming it, and every file of results/PAGE byte for byte as it was — the good
  records of DIR are not imported either, and a record already there with the same name is not replaced."""
  import shutil
  from tests.in_process import main_ends_with
  out = tmp_path / "results"
  shutil.copytree(REPO / "results" / page, out / page)
  runs = tmp_path / "runs"
  if page == "ptb_table6":
    _fake_run(runs / "small_seed0", "small", 0, 118.0)  # (the committed record of that name is replaced if taken)
    _fake_run(runs / "small_seed1", "small", 1, 119.0)
    bad(runs / "small_seed0")
  else:
    runs.mkdir()
    bad(runs)
  before = _tree(out)
  ends = main_ends_with(report.main, ["report", page], runs=str(runs), out=str(out))
  assert ends is not None and "\n" not in ends and ends.endswith(f"({out / page} is as it was)"), ends
  assert _tree(out) == before


def test_an_import_with_a_damaged_run_copies_nothing(tmp_path):
  """`records.import_runs` reads every run before it copies any: one damaged run (its results.json, or a study's
  measures.json beside it) among good ones raises `ReportError` naming it, and the destination is left as it was
  (a record of the same name not replaced); a good measures.json is copied with the run."""
  _fake_run(tmp_path / "first" / "small_seed0", "small", 0, 118.0)
  dest = tmp_path / "results" / "ptb_table6"
  records.import_runs(tmp_path / "first", dest)
  before = _tree(dest)
  _fake_run(tmp_path / "runs" / "small_seed0", "small", 0, 150.0)
  _fake_run(tmp_path / "runs" / "small_seed1", "small", 1, 119.0)
  (tmp_path / "runs" / "small_seed1" / "results.json").write_text('{"config": "sm')
  with pytest.raises(records.ReportError, match="small_seed1/results.json is not JSON"):
    records.import_runs(tmp_path / "runs", dest)
  assert _tree(dest) == before
  shutil.rmtree(tmp_path / "runs" / "small_seed1")  # mended; a study's measures.json, damaged
  _fake_run(tmp_path / "runs" / "small_seed1", "small", 1, 119.0)
  (tmp_path / "runs" / "small_seed0" / "measures.json").write_text('{"test": {"nll"')
  with pytest.raises(records.ReportError, match="small_seed0/measures.json is not JSON"):
    records.import_runs(tmp_path / "runs", dest)
  assert _tree(dest) == before
  (tmp_path / "runs" / "small_seed0" / "measures.json").write_text('{"test": {"nll": 1.5}}')
  records.import_runs(tmp_path / "runs", dest)
  assert json.loads((dest / "small_seed0" / "measures.json").read_text()) == {"test": {"nll": 1.5}}


def test_sampling_page_sets_each_runs_scores_and_samples_side_by_side(tmp_path):
  """A run folder's samples/*.jsonl and scores/*.json (as experiments/studies/sampling_study.sh writes them) are
  imported with its results.json; the page's scores table, its table over seeds and each prompt's table per training
  seed read those files; a damaged score stops the import with nothing copied."""
  from experiments.reports import samples
  runs = tmp_path / "runs"
  scores = {("small", 0): (117.25, 250.0), ("small_tied", 0): (110.5, 260.0), ("small", 1): (116.75, 258.0),
            ("small_tied", 1): (111.5, 262.0)}
  for (config, seed), (test, text) in scores.items():
    name = f"{config}_seed{seed}"
    _fake_run(runs / name, config, seed, test)
    results = json.loads((runs / name / "results.json").read_text())
    (runs / name / "results.json").write_text(json.dumps({**results, "steps": 30199, "test_params": "best (epoch 6)"}))
    run = {"workdir": str(runs / name), "checkpoint": "best", "step": 13938, "commit": "def456", "config": config}
    draw = lambda text, lp, t: {"text": text, "log_prob": lp, "prompt": "the company", "temperature": t, "seed": 0,
                                "max_len": 30, **run}
    (runs / name / "samples").mkdir()
    (runs / name / "samples" / "prompt0_greedy.jsonl").write_text(json.dumps(draw("said <unk>", -3.25, 0.0)) + "\n")
    (runs / name / "samples" / "prompt0_t1.jsonl").write_text(
        "".join(json.dumps(draw(f"{name} | {k}\nsaid", -10.0 - k, 1.0)) + "\n" for k in range(3)))
    (runs / name / "scores").mkdir()
    (runs / name / "scores" / "test.json").write_text(json.dumps({"ppl": test, "tokens": 82430, "oov": 0, **run}))
    (runs / name / "scores" / "text.json").write_text(
        json.dumps({"ppl": text, "tokens": 49, "oov": 1, "oov_words": ["spokesman"], **run}))
  tab = samples.build_sampling("sampling", tmp_path / "results", runs)
  assert ("| `small_tied_seed0` | small_tied | 3 epochs, 30,199 steps | 118.00 | 110.5000 (best (epoch 6)) | "
          "110.5000 (best, step 13,938; 82,430 tokens) | 260.0 (49 tokens, 1 OOV: spokesman) |") in tab
  page = (tmp_path / "results" / "sampling" / "README.md").read_text()
  assert "| small | 0, 1 | 117.00 ± 0.4 (117.25, 116.75) | 254.0 ± 5.7 (250.0, 258.0) |" in page
  assert "| small_tied | 0, 1 | 111.00 ± 0.7 (110.50, 111.50) | 261.0 ± 1.4 (260.0, 262.0) |" in page
  assert ("small → small_tied (tied minus untied): test -6.0, beyond twice the larger seed sd (1.4); "
          "text.txt +7.0, within twice the larger seed sd (11.3).") in page
  for seed in (0, 1):
    assert f"**Prompt: “the company”, models trained with seed {seed}**" in page
    assert (f"| sample 2 | small_seed{seed} &#124; 2 ⏎ said (log p -12.0) | small_tied_seed{seed} &#124; 2 ⏎ said "
            "(log p -12.0) |") in page
  assert "| greedy | said <unk> (log p -3.2) | said <unk> (log p -3.2) |" in page
  assert "commit `abc123`, machine: Test CPU, 2 cores; 10 min wall; sampled from its checkpoint `best` (step 13,938)" in page
  assert samples.build_sampling("sampling", tmp_path / "results") == tab  # from the committed files alone
  (runs / "small_seed0" / "scores" / "text.json").write_text('{"ppl": 250')
  with pytest.raises(records.ReportError, match="text.json line 1 is not JSON"):
    samples.build_sampling("sampling", tmp_path / "out2", runs)
  assert not (tmp_path / "out2" / "sampling" / "small_seed0" / "scores").exists()


def _fake_adapt_record(config: str, tying: str, seed: int, plain: float, cache: float, sgd: float) -> dict:
  grid = lambda key, values, best: [{key: v, "decay": 0.0, "valid_ppl": 100.0 if v == best else 101.0} for v in values]
  return {"run": {"workdir": f"runs/test_time/{config}_seed{seed}", "checkpoint": "last", "step": 30199,
                  "commit": "abc123"},
          "config": config, "tying": tying, "seed": seed, "valid_tokens": 73760, "test_tokens": 82430, "wall_s": 600.0,
          "plain": {"valid_ppl": 120.0, "test_ppl": plain},
          "cache": {"grid": [{"n": 500, "theta": th, "lambda": 0.1, "valid_ppl": 99.0 + th} for th in (0.1, 0.3)],
                    "best": {"n": 500, "theta": 0.1, "lambda": 0.1, "valid_ppl": 99.1}, "test_ppl": cache},
          "dynamic_sgd": {"grid": grid("lr", [0.01, 0.05, 0.1], 0.05), "test_ppl": sgd, "segment": 20,
                          "tuned_tokens": 20000, "best": {"lr": 0.05, "decay": 0.0, "valid_ppl": 100.0}}}


def test_test_time_page_gives_each_gain_and_reads_tied_against_untied_against_the_seed_spread(tmp_path):
  """The per-run records of experiments.studies.test_time: mean ± sd per config and method, the relative gain, the
  tied − untied difference in gain read against twice the larger seed sd, the tuned settings (a best on the grid's
  border said so), a variant subfolder's record against the same run's main one (one of another model stops
  the build), the bench's speeds; a damaged record stops the import with nothing copied, an unfinished study's
  partial record is not imported."""
  from experiments.reports import test_time
  runs = tmp_path / "records"
  runs.mkdir()
  for config, tying, seed, plain, cache, sgd in (("small", "untied", 0, 100.0, 90.0, 80.0),
                                                 ("small", "untied", 1, 100.0, 92.0, 80.0),
                                                 ("small_tied", "tied", 0, 100.0, 95.0, 79.0),
                                                 ("small_tied", "tied", 1, 100.0, 95.0, 81.0)):
    (runs / f"{config}_seed{seed}.json").write_text(json.dumps(_fake_adapt_record(config, tying, seed, plain, cache,
                                                                                  sgd)))
  wide = _fake_adapt_record("small", "untied", 0, 100.0, 90.0, 75.0)  # the same run, η grid extended upward
  wide["dynamic_sgd"].update(grid=[{**g, "lr": lr} for g, lr in zip(wide["dynamic_sgd"]["grid"], (0.05, 0.5, 0.1))],
                             best={"lr": 0.5, "decay": 0.0, "valid_ppl": 100.0})
  (runs / "wide_eta").mkdir()
  (runs / "wide_eta" / "small_seed0.json").write_text(json.dumps(wide))
  wide_tied = _fake_adapt_record("small_tied", "tied", 0, 100.0, 95.0, 79.0)
  (runs / "wide_eta" / "small_tied_seed0.json").write_text(json.dumps(wide_tied))
  (runs / "rms_mid").mkdir()  # a variant that reads the RMS rule alone: its SGD point is not a row
  (runs / "rms_mid" / "small_seed0.json").write_text(json.dumps(wide))
  (runs / "small_seed2.partial.json").write_text(json.dumps({"settings": {}, "methods": {}}))  # unfinished: skipped
  bench = {"bench": "adaptation", "config": "small", "tokens": 20000, "cache_size": 500, "repeats": 3,
           "tokens_per_s": {"plain": 8000.0, "cache": 6000.0, "dynamic_sgd": 1000.0},
           "temp_mib": {"cache": 1.5, "dynamic_sgd": 20.0}, "host": {"cpu": "Test CPU", "cpu_count": 2}}
  (tmp_path / "results" / "test_time").mkdir(parents=True)
  (tmp_path / "results" / "test_time" / "bench.jsonl").write_text(json.dumps(bench) + "\n")
  tab = test_time.build_test_time("test_time", tmp_path / "results", runs)
  assert not (tmp_path / "results" / "test_time" / "small_seed2.partial.json").exists()
  assert ("| small | untied | 0, 1 | 100.0 ± 0.0 (100.0, 100.0) | 91.0 ± 1.4 (90.0, 92.0) "
          "(-9.0 ± 1.4 (-10.0, -8.0)%) | 80.0 ± 0.0 (80.0, 80.0) (-20.0 ± 0.0 (-20.0, -20.0)%) | — |") in tab
  page = (tmp_path / "results" / "test_time" / "README.md").read_text()
  # cache: tied −5.0% against untied −9.0%, difference +4.0 > 2 × 1.41; SGD: −20.0 vs −20.0, 0 < 2 × 1.41
  assert ("+ cache (Grave et al.), small_tied − small: gain -5.0% against -9.0%, a difference of +4.00 points, beyond "
          "twice the larger seed sd (2.83 points).") in page
  assert "a difference of +0.00 points, within twice the larger seed sd (2.83 points)." in page
  assert "Grave et al. (2016), LSTM + continuous cache pointer: 82.3 → 72.1 (-12.4%)." in page
  assert "| `small_seed0` | 500 / 0.1 (grid edge) / 0.1 (99.1; 2 points) | 0.05 / 0 (100.0; 3 points) | — |" in page
  assert ("| `small_seed0` | wide_eta | + dynamic eval, SGD | 0.05, 0.1, 0.5 | 0.05 / 0, 80.0 | 0.5 (grid edge) / 0, "
          "75.0 | -5.0 | -25.0% |") in page
  assert ("**Tied against untied on the `wide_eta` grid.**\n\n- + dynamic eval, SGD, small_tied − small: gain -21.0% "
          "against -25.0%, a difference of +4.00 points, one seed on a side: no spread to read it against.\n\n") in page
  assert "| `small_seed0` | wide_eta | + dynamic eval, SGD |" in page and "| `small_seed0` | rms_mid |" not in page
  assert ("| small | 20,000 | 500 | 8,000 | 6,000 (×0.75) | 1,000 (×0.12) | 1.5 / 20.0 | Test CPU, 2 cores; median of "
          "3 |") in page
  assert test_time.build_test_time("test_time", tmp_path / "results") == tab  # from the committed files alone
  assert "0.5 (grid edge) / 0, 75.0" in (tmp_path / "results" / "test_time" / "README.md").read_text()
  (tmp_path / "results" / "test_time" / "wide_eta" / "small_seed0.json").write_text(json.dumps(
      {**wide, "plain": {"valid_ppl": 120.0, "test_ppl": 100.5}}))  # a retrained run: another model
  with pytest.raises(records.ReportError, match="scores another model than small_seed0.json"):
    test_time.build_test_time("test_time", tmp_path / "results")
  (runs / "small_seed1.json").write_text('{"run": ')
  with pytest.raises(records.ReportError, match="small_seed1.json is not JSON"):
    test_time.build_test_time("test_time", tmp_path / "out2", runs)
  assert not list((tmp_path / "out2" / "test_time").glob("*.json"))


def test_the_field_page_is_rebuilt_from_the_records_byte_for_byte(tmp_path):
  """results/field: the published rows are the builder's data, ours read from the studies' committed records; the
  committed page is what a rebuild writes."""
  from experiments.reports import field
  out = tmp_path / "results"
  for study in {row[2] for row in field.OURS} | {"field"}:
    shutil.copytree(REPO / "results" / study, out / study)
  field.build_field("field", out, None, None)
  assert (out / "field" / "README.md").read_bytes() == (REPO / "results" / "field" / "README.md").read_bytes()


def test_the_paper_s_order_claims_are_read_against_the_seed_spread():
  """A claim of ours is yes or no only beyond twice the larger seed sd; within it it is said so, neighbours in the
  order that close are joined by ≈; the paper's single numbers are read as they are."""
  ours = {"vd": [88.0, 88.2], "al": [87.0, 87.2], "re": [86.95, 87.15], "real": [85.0, 85.2]}
  assert inan.order_line(ours) == ("AL < VD: yes, RE < VD: yes, REAL lowest: yes (REAL 85.10 < RE 87.05 ≈ AL 87.10 "
                                   "< VD 88.10)")
  close = {**ours, "real": [86.9, 87.3]}  # (REAL within the spread of AL and RE)
  assert inan.order_line(close).startswith("AL < VD: yes, RE < VD: yes, REAL lowest: within the spread (")
  worse = {**ours, "al": [88.5, 88.7]}
  assert inan.order_line(worse).startswith("AL < VD: no, ")
  assert inan.order_line({"vd": [87.3], "al": [82.9], "re": [85.1], "real": [82.7]}, str, paper=True) == (
      "AL < VD: yes, RE < VD: yes, REAL lowest: yes (REAL 82.7 < AL 82.9 < RE 85.1 < VD 87.3)")


def test_the_subword_page_reads_word_runs_in_bits_per_byte_of_the_same_text_and_each_gap_against_the_seeds(tmp_path):
  """subword_tying: a word run's test perplexity is converted to bits per byte with the subword runs' test text
  (Σ NLL = ln(ppl)·(W − 1), over ln 2 and the bytes); tied − untied is read per tokenisation against twice the larger
  seed sd; subword runs that scored different test texts are refused."""
  from experiments.reports import subword
  out, runs, words, size = tmp_path / "results", tmp_path / "runs", 1001, 5000
  for config, ppl in (("small", 130.0), ("small_tied", 120.0)):
    for seed in (0, 1):
      _fake_run(tmp_path / "word" / f"{config}_seed{seed}", config, seed, ppl + seed)
      folder = runs / f"{config}_bpe4000_seed{seed}"
      _fake_run(folder, config, seed, 50.0)
      res = json.loads((folder / "results.json").read_text())
      corpus = {"tokenizer": {"vocab_size": 4000}, "test": {"words": words, "bytes": size, "tokens": 1500}}
      (folder / "results.json").write_text(json.dumps({**res, "dataset": "text", "corpus": corpus,
                                                       "test_ppl_per_word": ppl + 10 + 2 * seed,
                                                       "test_bits_per_byte": 2.0 + (config == "small") / 10}))
  for path in (tmp_path / "word").glob("*/results.json"):
    path.write_text(json.dumps({**json.loads(path.read_text()), "dataset": "wikitext2"}))
  records.import_runs(tmp_path / "word", out / subword.WORD_RUNS)

  tab = subword.build_subword_tying("subword_tying", out, runs)

  bpb = math.log(130.0) * (words - 1) / math.log(2) / size  # seed 0 of the untied word runs
  assert f"{bpb:.4f}" in next(l for l in tab.splitlines() if l.startswith("| small LSTM, untied | words"))
  assert "- words, tied − untied: test per word -10.0 (beyond twice the larger seed sd (1.4))" in tab
  assert "- BPE pieces, tied − untied: test per word -10.0 (beyond twice the larger seed sd (2.8)); bits per byte -0.1000" in tab
  res = json.loads((runs / "small_bpe4000_seed1" / "results.json").read_text())
  res["corpus"]["test"]["bytes"] += 1
  (runs / "small_bpe4000_seed1" / "results.json").write_text(json.dumps(res))
  with pytest.raises(records.ReportError, match="different test texts"):
    subword.build_subword_tying("subword_tying", out, runs)


def _surface_run(folder: Path, config: str, seed: int, bpb: float, valid: float, buckets=None) -> None:
  """A finished tying-surface run (results.json, curve) and, with `buckets` (bits per byte by training count), its
  measures.json."""
  _fake_run(folder, config, seed, 50.0)
  res = json.loads((folder / "results.json").read_text())
  corpus = {"tokenizer": {"vocab_size": 4000}, "test": {"words": 1001, "bytes": 5000, "tokens": 1500}}
  (folder / "results.json").write_text(json.dumps({**res, "dataset": "text", "corpus": corpus, "valid_ppl": valid,
                                                   "best_valid_ppl": valid, "test_bits_per_byte": bpb}))
  if buckets is not None:
    split = [{"from": lo, "targets": n, "types": 1, "nll": 0.0, "bits_per_byte": b}
             for lo, n, b in zip((0, 1, 100, 1000, 10_000), (0, 100, 400, 500, 500), buckets)]
    roles = ("input", "output") if "untied" in config else ("tied",)
    like = {"cka": 0.5, "subspace_distance": 0.4, "table4_rho": 0.3}
    measures = {"test": {"targets": 1500, "bits_per_byte": sum(buckets), "by_training_count": split},
                "matrices": {role: {"norm_count_rho": 0.1 * (seed + 1), "anisotropy": 0.02} for role in roles}}
    measures |= {"input_vs_output": like} if "untied" in config else {"untied": {"input": like, "output": like}}
    (folder / "measures.json").write_text(json.dumps(measures))


def test_the_surface_page_reads_each_gap_against_the_seeds_splits_it_by_frequency_and_marks_the_grid(tmp_path):
  """tying_surface: a cell's tied − untied gap in bits per byte against twice the larger seed sd, a one-seed side
  not read; the gap split by training count from measures.json adds up to the whole; the grid's lowest validation
  point per arm in bold; a cell's cost marked as fitting a session or not; the figure drawn; a rebuild from the
  records alone is byte-identical."""
  from experiments.reports import surface
  runs, out = tmp_path / "runs", tmp_path / "results"
  for seed in (0, 1):
    _surface_run(runs / f"untied_d64_4000_seed{seed}", "surface_untied_d64_4000", seed, 2.0 + seed / 100, 60.0,
                 [0.0, 0.5, 0.5, 0.5, 0.5 + seed / 100])
    _surface_run(runs / f"tied_d64_4000_seed{seed}", "surface_tied_d64_4000", seed, 1.9 + seed / 100, 58.0,
                 [0.0, 0.45, 0.5, 0.5, 0.45 + seed / 100])
  _surface_run(runs / "untied_d128_4000_seed0", "surface_untied_d128_4000", 0, 1.8, 50.0)
  _surface_run(runs / "tied_d128_4000_seed0", "surface_tied_d128_4000", 0, 1.85, 51.0)
  for (lr, dropout), valid in {("1e-3", "0.3"): 60.0, ("2e-3", "0.1"): 57.5}.items():
    _surface_run(runs / f"tied_d64_4000_lr{lr}_dropout{dropout}_seed0",
                 f"surface_tied_d64_4000_lr{lr}_dropout{dropout}", 0, 1.9, valid)
  out.mkdir()
  (out / "tying_surface").mkdir()
  (out / "tying_surface" / "cost.jsonl").write_text(json.dumps(
      {"cell": "tied,64,4000", "steps_per_s": 11.7, "records": 5, "steps_per_epoch": 2442, "epochs": 6,
       "num_params": 466208, "host": {"cpu": "Test CPU", "cpu_count": 2}}) + "\n" + json.dumps(
      {"cell": "untied,256,16000", "steps_per_s": 1.38, "records": 5, "steps_per_epoch": 1947, "epochs": 6,
       "num_params": 11392128, "host": {"cpu": "Test CPU", "cpu_count": 2}}) + "\n")

  tab = surface.build_surface("tying_surface", out, runs)

  row = next(l for l in tab.splitlines() if l.startswith("| 4,000 pieces | 64 | tied |"))
  assert "| 1.9050 ± 0.0071 (1.9000, 1.9100) | -0.1000 (beyond twice the larger seed sd (0.0141)) |" in row
  assert "-0.1000 (within" not in tab
  assert "- 4,000 pieces, D = 64, tied: -0.1000, tying helps." in tab  # the reading, on the page
  row = next(l for l in tab.splitlines() if l.startswith("| 4,000 pieces | 128 | tied |"))
  assert row.endswith("| +0.0500 (one seed on a side: no spread to read it against) |")
  freq = next(l for l in tab.splitlines() if l.startswith("| 4,000 pieces | 64 | tied | 2 |"))
  assert freq == ("| 4,000 pieces | 64 | tied | 2 | +0.0000 (0%) | -0.0500 (7%) | +0.0000 (27%) | +0.0000 (33%) | "
                  "-0.0500 (33%) | -0.1000 |")
  assert "| 4,000 pieces | 64 | tied | 2 | 0.50 ± 0.00 | 0.50 ± 0.00 | 0.50 ± 0.00 | 0.30 ± 0.00 |" in tab
  assert "| 4,000 pieces | 64 | tied | 0.002 | 0.1 | 0 | **57.5** |" in tab
  assert "| 4,000 pieces | 64 | tied | 0.001 | 0.3 | 0 | 60.0 |" in tab
  assert "| tied,64,4000 | 466,208 | 2,442 | 11.70 | 21 | yes | Test CPU, 2 cores |" in tab
  assert "| untied,256,16000 | 11,392,128 | 1,947 | 1.38 | 141 | no | Test CPU, 2 cores |" in tab  # 2.5 × 141 > 180
  page = out / "tying_surface" / "README.md"
  assert (out / "tying_surface" / "gap.png").is_file() and "![tied − untied against width](gap.png)" in page.read_text()
  before = page.read_bytes()
  surface.build_surface("tying_surface", out)
  assert page.read_bytes() == before
  # a run whose test scored part of the text has no bits per byte: refused with one line, the page as it was
  _surface_run(tmp_path / "cut" / "tied_d64_1000_seed0", "surface_tied_d64_1000", 0, 1.9, 58.0)
  cut = tmp_path / "cut" / "tied_d64_1000_seed0" / "results.json"
  cut.write_text(json.dumps({k: v for k, v in json.loads(cut.read_text()).items() if k != "test_bits_per_byte"}))
  with pytest.raises(records.ReportError, match="no test bits per byte"):
    surface.build_surface("tying_surface", out, tmp_path / "cut")
  assert page.read_bytes() == before


def test_the_surface_reading_signs_only_read_cells_and_follows_each_line():
  """tying_surface's reading: a sign only where both sides have two seeds and the gap is beyond twice the larger
  seed sd; along the width and along the vocabulary only where a line has two read tied cells."""
  from experiments.reports import surface
  runs = lambda *bpb, m=(None, None): [{"test_bits_per_byte": b, "seed": s, "_measures": m[s] if s < 2 else None}
                                       for s, b in enumerate(bpb)]
  tied = lambda cka_in, cka_out: {"untied": {"input": {"cka": cka_in}, "output": {"cka": cka_out}},
                                  "matrices": {"tied": {"norm_count_rho": -0.4, "anisotropy": 0.05}}}
  cells = {("1000", 64, "untied"): runs(1.80, 1.81),
           ("1000", 64, "tied"): runs(1.78, 1.79, m=(tied(0.30, 0.78), tied(0.31, 0.79))),
           ("4000", 64, "untied"): runs(1.58, 1.59),
           ("4000", 64, "tied"): runs(1.61, 1.62, m=(tied(0.40, 0.64), tied(0.41, 0.65))),
           ("4000", 128, "untied"): runs(1.50, 1.52), ("4000", 128, "tied"): runs(1.51, 1.53),
           ("1000", 128, "untied"): runs(1.7), ("1000", 128, "tied"): runs(1.6)}
  text = surface.reading(cells)
  assert "- 1,000 pieces, D = 64, tied: -0.0200, tying helps." in text
  assert "- 4,000 pieces, D = 64, tied: +0.0300, tying costs." in text
  assert "- 4,000 pieces, D = 128, tied: +0.0100, no sign (within the spread)." in text  # 2 sd = 0.0283
  assert "1,000 pieces, D = 128" not in text  # one seed a side: not read
  assert "- Along the width: at 4,000 pieces, tying costs at D = 64, no sign (within the spread) at D = 128." in text
  assert "- Along the vocabulary: at D = 64, tying helps at 1,000 pieces, tying costs at 4,000 pieces." in text
  # Where the sign changes, the tied matrix's measures on either side, each against the spread (2 sd = 0.014); a
  # step with no measured seeds on a side (4,000 pieces, D = 64 to 128) has no such line.
  change = ("  - At D = 64, from 1,000 pieces to 4,000 pieces the sign changes; the tied matrix: CKA to the untied "
            "input 0.305 → 0.405 (beyond twice the larger seed sd (0.014)); CKA to the untied output 0.785 → 0.645 "
            "(beyond twice the larger seed sd (0.014)); norm–count ρ -0.400 → -0.400 (within twice the larger seed "
            "sd (0.000)); anisotropy 0.050 → 0.050 (within twice the larger seed sd (0.000)). ")
  open_ = "No step along this line keeps its sign with the measures on both sides, so whether these change only " \
      "where the sign does is open."
  assert change + open_ in text and text.count("the sign changes") == 1
  # A third read cell whose step keeps the sign but has no measured seeds says nothing about the measures.
  cells |= {("16000", 64, "untied"): runs(1.45, 1.46), ("16000", 64, "tied"): runs(1.50, 1.51)}
  assert change + open_ in surface.reading(cells)
  # Measured, it says which measures change there too.
  cells |= {("16000", 64, "tied"): runs(1.50, 1.51, m=(tied(0.40, 0.50), tied(0.41, 0.51)))}
  text = surface.reading(cells)
  assert change + "Beyond the spread where the sign holds too: CKA to the untied output." in text
  assert text.count("the sign changes") == 1
  assert surface.reading({k: v for k, v in cells.items() if k[1] == 128 and k[0] == "1000"}).startswith("No cell")


def test_a_grid_point_at_the_cells_config_stands_for_the_cells_seed_and_is_listed_once(tmp_path):
  """tying_surface: a grid point's run at its arm's chosen settings joins the cell as its seed (named under the
  table, listed once in the provenance); a point at other settings stays in the grid alone."""
  from configs import tying_surface
  from experiments.reports import surface
  runs = tmp_path / "runs"
  lr, dropout = tying_surface.CHOSEN["tied"]
  point = f"tied_d64_4000_lr{lr:g}_dropout{dropout:g}_seed0"
  _surface_run(runs / point, f"surface_{point.removesuffix('_seed0')}", 0, 1.90, 57.5)
  _surface_run(runs / "tied_d64_4000_lr9e-3_dropout0.1_seed2", "surface_tied_d64_4000_lr9e-3_dropout0.1", 2, 1.5, 70.0)
  _surface_run(runs / "tied_d64_4000_seed1", "surface_tied_d64_4000", 1, 1.92, 58.0)
  tab = surface.build_surface("tying_surface", tmp_path / "results", runs)
  row = next(l for l in tab.splitlines() if l.startswith("| 4,000 pieces | 64 | tied |"))
  assert "| 0, 1 | 57.8 ± 0.4 (57.5, 58.0) | 1.9100 ± 0.0141 (1.9000, 1.9200) |" in row
  assert f"all but the name): `{point}` (seed 0)." in tab
  assert (tmp_path / "results" / "tying_surface" / "README.md").read_text().count(f"- `{point}`") == 1


def test_the_wikitext2_test_time_page_adds_both_methods_and_the_same_study_scored_by_articles(tmp_path):
  """test_time_wt2: the cache with dynamic evaluation as a column, the article_resets subfolder as a table of its own
  with its tied − untied readings and each config's gain by articles against as one stream, and the cited anchor."""
  from experiments.reports import test_time
  runs = tmp_path / "records"
  (runs / "article_resets").mkdir(parents=True)
  for folder, sgd in ((runs, 80.0), (runs / "article_resets", 90.0)):
    for config, tying, seed in (("small", "untied", 0), ("small_tied", "tied", 0)):
      r = _fake_adapt_record(config, tying, seed, 100.0, 95.0, sgd)
      r["dynamic_sgd+cache"] = {"grid": [{"lambda": 0.1, "valid_ppl": 98.0}], "test_ppl": sgd - 5,
                                "best": {"lr": 0.05, "decay": 0.0, "lambda": 0.1, "valid_ppl": 98.0}}
      (folder / f"{config}_seed{seed}.json").write_text(json.dumps(r))
  tab = test_time.build_test_time("test_time_wt2", tmp_path / "results", runs)
  assert "+ dynamic eval, SGD, + cache (gain)" in tab and "| 75.0 (-25.0%) |" in tab
  page = (tmp_path / "results" / "test_time_wt2" / "README.md").read_text()
  assert "**By documents**: every WikiText article scored from a fresh start" in page
  assert "| 85.0 (-15.0%) |" in page  # the by-articles table's both-methods cell
  assert "- small, + dynamic eval, SGD: gain -10.0% by articles against -20.0% as one stream (1 and 1 seeds)." in page
  assert "Papers with Code; the paper's table not read): 99.3 → 68.9 (-30.6%)." in page
  assert (tmp_path / "results" / "test_time_wt2" / "article_resets" / "small_seed0.json").exists()


def _w2v_quality(folder: Path, scheme: str, tying: str, seed: int, rho: dict[str, float]) -> None:
  """A run folder of experiments/studies/w2v_quality.sh with its quality.json: `rho` a set's ρ for every matrix."""
  folder.mkdir(parents=True)
  roles = ("input", "output") if tying == "untied" else ("tied",)
  sim = {role: {s: {"rho": r, "covered": 10, "pairs": 12} for s, r in rho.items()} for role in roles}
  (folder / "quality.json").write_text(json.dumps(
      {"run": folder.name, "scheme": scheme, "tying": tying, "dataset": "ptb", "seed": seed,
       "devices": 1 if scheme == "pairs" else 2,
       "words_per_s": 5e5, "similarity": sim, "host": {"cpu": "Test CPU"}}))


def test_the_word2vec_page_reads_the_new_step_against_pairs_where_pairs_and_gensim_agree(tmp_path):
  """word2vec_speed: the interleaved bench lines as a speed table (medians and ranges, peak memory, machine); the
  similarity ρ a cell of seeds; windows − pairs read against the seeds on every set, and counted over the sets where
  pairs − gensim is within the spread (a set where they disagree is left out of the count); byte-identical rebuild."""
  from experiments.reports import word2vec
  runs, out = tmp_path / "runs", tmp_path / "results"
  base = {"simlex999": 0.10, "verb143": 0.10, "men": 0.20, "rw": 0.30, "mturk771": 0.10}
  shifts = {"gensim": {}, "pairs": {"rw": -0.2}, "windows_shared": {"rw": -0.2, "men": 0.1}}
  for scheme, shift in shifts.items():
    for tying in ("untied",) if scheme == "gensim" else ("untied", "tied"):
      for seed in (0, 1):
        rho = {s: r + shift.get(s, 0.0) + seed / 100 for s, r in base.items()}
        _w2v_quality(runs / f"ptb_{scheme}_{tying}_seed{seed}", scheme, tying, seed, rho)
  ours = [{"words_per_s": w, "batching": "windows", "shared_negatives": True, "batch": 64, "steps_per_call": 512,
           "devices": ["cpu:0", "cpu:1"], "jax": "0.10.2", "host": {"cpu": "Test CPU"}, "peak_rss_mib": rss}
          for w, rss in ((7.5e5, 800.0), (7.4e5, 900.0), (7.6e5, 850.0))]
  gensim = [{"in_vocab_words_per_s": w, "peak_rss_mib": 200.0} for w in (6e5, 5.9e5, 6.1e5)]
  (out / "word2vec_speed").mkdir(parents=True)
  (out / "word2vec_speed" / "bench_interleaved.jsonl").write_text(json.dumps(
      {"bench": "interleaved_skipgram", "config": "w2v_untied", "rounds": 3, "wt_jax_over_gensim": 1.25,
       "runs": {"gensim": gensim, "wt_jax": ours}}) + "\n")

  tab = word2vec.build_word2vec("word2vec_speed", out, runs)

  assert ("| w2v_untied | windows, noise a window, batch 64, 512 steps a call, 2 devices | 750k (740k–760k) | "
          "600k (590k–610k) | 1.250 | 900 / 200 | 0.10.2 | Test CPU |") in tab
  assert "| wt_jax, pairs (the default step), 1 device | input | 0, 1 | 0.105 ± 0.007 (0.100, 0.110) |" in tab
  line = next(l for l in tab.splitlines() if l.startswith("- ptb, input:"))
  assert line.startswith("- ptb, input: wt_jax, windows, noise a window, 2 devices − pairs: simlex999 +0.000 (within)")
  assert "men +0.100 (beyond, higher)" in line and "rw -0.200 (beyond, lower)" in line
  assert line.endswith("Where pairs and gensim agree (simlex999, verb143, men, mturk771), the new step is within "
                       "pairs' spread on 3 of 4; beyond it on men (higher).")
  tied = next(l for l in tab.splitlines() if l.startswith("- ptb, tied:"))
  assert "gensim" not in tied and "men +0.100 (beyond, higher)" in tied
  page = out / "word2vec_speed" / "README.md"
  before = page.read_bytes()
  word2vec.build_word2vec("word2vec_speed", out)
  assert page.read_bytes() == before
