"""Build a paper-vs-ours report from finished runs: a Markdown table, one figure, and the study page.

    python -m experiments.report ptb_table6 --runs=runs/ptb_table6   # copy finished runs, then report
    python -m experiments.report ptb_table6                          # report from results/ptb_table6 only
    python -m experiments.report bbc_table7 --runs=runs/bbc          # Table 7's small models on BBC News
    python -m experiments.report ffnn_ptb --runs=runs/ffnn           # NNLM and LBL, tied vs untied, on PTB
    python -m experiments.report inan_ptb_table1 --runs=runs/inan    # Inan et al.'s Table 1, small, on PTB
    python -m experiments.report inan_ptb_table1 --runs=runs/inan_appA   # (its Appendix A rows)
    python -m experiments.report nmt_table8 --runs=runs/nmt          # Table 8 (and Table 1) analogue, Multi30k
    python -m experiments.report table5                               # Press & Wolf Table 5 (GPU runs)
    python -m experiments.report softmax_study --runs=runs/softmax_study   # softmax approximations, tied/untied
    python -m experiments.report softmax_study_wt2 --runs=runs/softmax_study_wt2   # (the WikiText-2 pair)
    python -m experiments.report tpu_memory --runs=DIR               # TPU memory per chip: DIR holds the
                                                                     # stdout files of experiments.compile

With --runs, every run directory there that holds a results.json (a finished run) is imported into
results/<report>/<run>/ as results.json and curve.jsonl (its per-epoch records; the per-step log, plots,
translations and checkpoints stay in the run's workdir). The report is then built from results/<report>/
alone, so anyone can rebuild it from the committed files: results/<report>/valid_curves.png and the study
page results/<report>/README.md.

The study page is the report's own page: the prose around the generated parts is written by hand and kept.
The generated parts sit between markers: the table (with the paper's source, the note, the figure and the
rebuild command) between `<!-- report:<name>:begin -->` and `<!-- report:<name>:end -->`, the run records
(command, code commit, machine of each run) between `<!-- report:<name>:runs:begin -->` and
`<!-- report:<name>:runs:end -->` (on a page without the runs markers, the run records go inside the first
pair). A page that does not exist, or has no markers, is written whole: its title, then both parts in their
markers, so prose added around them later survives the next rebuild.

--readme=FILE also writes the table, figure and a link to the page between the same first pair of markers in
FILE (the top-level README.md carries no report sections: its results table links to the study pages).
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import statistics
from pathlib import Path

from absl import app, flags, logging

from wt_jax.train import metrics

_RUNS = flags.DEFINE_string("runs", None, "Directory of run workdirs to import finished runs from.")
_OUT = flags.DEFINE_string("out", "results", "Root of the committed results; the report goes in OUT/<name>.")
_README = flags.DEFINE_string("readme", "", "A file to update between the report's markers as well as the "
                              "study page (default '': none; the top-level README.md links to the pages).")

CURVE = "curve.jsonl"  # a run's per-epoch records (the 'epoch' lines of its metrics.jsonl)


def epoch_records(metrics_path) -> list[dict]:
  """The 'epoch' records of a metrics.jsonl, one per epoch (a resumed run may repeat one: the last wins)."""
  epochs = {}
  for rec in metrics.read(metrics_path):
    if rec.get("kind") == "epoch":
      epochs[rec["epoch"]] = rec
  return [epochs[e] for e in sorted(epochs)]


@dataclasses.dataclass(frozen=True)
class PaperRow:
  config: str  # configs/<config>.py
  label: str
  size: str  # as printed in the paper ("—": not transcribed)
  train: float | None  # None: the paper's value is not transcribed here
  valid: float | None
  test: float | None
  flag: str = ""  # the --config value when it is not configs/<config>.py (e.g. configs/inan.py:small,vd)
  runs: str = ""  # where the command puts this row's runs, when not the report's `runs`


@dataclasses.dataclass(frozen=True)
class ReportSpec:
  title: str
  source: str
  command: str  # how each run was produced ({flag}, {seed}, {workdir} filled in; {flag}: the --config value)
  rows: tuple[PaperRow, ...]
  dataset: str = "ptb"  # every run of the report must be on this corpus (results.json "dataset")
  runs: str = ""  # where the README's commands put the runs ("" → runs/<report name>)
  comparable: bool = True  # False: the paper's data differ from ours; no Δ column value, no paper lines drawn
  note: str = ""  # Markdown after the table (in results/<name>/README.md and the README section)


# Inan et al. (ICLR 2017), Table 1, small PTB rows as printed: (variant, label, valid, test).
INAN_SMALL = (("vd", "VD-LSTM (small)", 92.6, 87.3), ("al", "+ AL", 86.3, 82.9),
              ("re", "+ RE", 89.9, 85.1), ("real", "+ REAL (RE + AL)", 86.3, 82.7))

# The Transformer study's cells (configs/transformer.py:MODE,SCALE): (mode, scale, label).
TRANSFORMER_CELLS = (
    ("untied", "none", "untied, no scale"), ("untied", "sqrt_d", "untied, input × √D"),
    ("untied", "logits", "untied, logits × 1/√D"), ("tied", "none", "tied, no scale (GPT-2)"),
    ("tied", "sqrt_d", "tied, input × √D (Vaswani, Gemma)"),
    ("tied", "logits", "tied, logits × 1/√D (T5's scale)"),
    ("tied", "t5", "tied, logits × 1/√D, embedding std 1 (T5)"),
    ("tied", "t5_steps", "tied, T5's scale and init, word-matrix steps ∝ its size"),
    ("tied_projection", "none", "tied + PR, no scale"))
# The cells also run on WikiText-2: the best PTB scale (√D on the input), tied and untied.
TRANSFORMER_WT2_CELLS = tuple(cell for cell in TRANSFORMER_CELLS if cell[:2] in
                              (("tied", "sqrt_d"), ("untied", "sqrt_d")))

# Press & Wolf (EACL 2017), Table 7 as printed: perplexity (train, valid, test) of the four small models on
# text8, IMDB and BBC (the table leaves text8's validation cells empty: None).
PAPER_TABLE7 = {
    "text8": {"small": (90.4, None, 195.3), "small_tied": (95.6, None, 187.1),
              "small_pr": (92.6, None, 199.0), "small_tied_pr": (95.3, None, 183.2)},
    "IMDB": {"small": (71.3, 94.1, 94.3), "small_tied": (75.4, 94.6, 94.8),
             "small_pr": (72.0, 94.0, 94.4), "small_tied_pr": (72.9, 91.2, 91.5)},
    "BBC": {"small": (28.6, 103.6, 110.8), "small_tied": (30.1, 99.4, 106.8),
            "small_pr": (42.5, 104.9, 108.7), "small_tied_pr": (45.7, 96.4, 98.9)},
}
_TABLE7_LABELS = {"small": "Small", "small_tied": "S + WT", "small_pr": "S + PR", "small_tied_pr": "S + WT + PR"}


def _paper_table7() -> str:
  """Table 7 of the paper, all three corpora, as printed; then what its BBC numbers mean beside ours."""
  lines = ["Press & Wolf's Table 7 as printed (perplexity; the paper gives no text8 validation values):", "",
           "| corpus | | " + " | ".join(_TABLE7_LABELS.values()) + " |", "|---|---|---|---|---|---|"]
  for corpus, rows in PAPER_TABLE7.items():
    for i, split in enumerate(("train", "valid", "test")):
      cells = " | ".join("-" if rows[c][i] is None else f"{rows[c][i]}" for c in _TABLE7_LABELS)
      lines.append(f"| {corpus if i == 0 else ''} | {split} | {cells} |")
  lines += ["", "The paper splits BBC (and IMDB) into train/valid/test itself and uses the vocabularies of Miyamoto "
            "& Cho (2016); neither its split nor those vocabularies come with the paper, so ours are our own "
            "(`wt_jax/data/bbc.py`: an 80/10/10 split by article within each category, the 10,000 most frequent "
            "training words). Perplexities over different vocabularies and test articles measure different "
            "things (the vocabulary decides which words become `<unk>`), so the paper's BBC values above and in "
            "the table's paper column are not strictly comparable with ours and no Δ is computed; what can carry "
            "over is how the four models rank."]
  return "\n".join(lines)


REPORTS = {
    # Press & Wolf (EACL 2017), Table 6: the small Zaremba model (200 units, no dropout) on PTB.
    "ptb_table6": ReportSpec(
        title="Press & Wolf (2017), Table 6: small LSTM LM on PTB, no dropout",
        source="Press & Wolf, Using the Output Embedding to Improve Language Models, EACL 2017, Table 6",
        command=("python -m experiments.ptb --config={flag} --config.seed={seed} "
                 "--workdir={workdir}"),
        rows=(
            PaperRow("small", "small", "4.65M", 38.0, 120.7, 114.5),
            PaperRow("small_tied", "small + WT", "2.65M", 36.4, 117.5, 112.4),
            PaperRow("small_pr", "small + PR", "4.69M", 50.8, 116.0, 111.7),
            PaperRow("small_tied_pr", "small + WT + PR", "2.69M", 53.5, 104.9, 100.9),
        )),
    # Press & Wolf (EACL 2017), Table 7: the same four small models on other corpora; here BBC News with our
    # split and vocabulary (wt_jax/data/bbc.py). The paper's BBC rows stand in the paper column, but its split
    # and vocabulary are not ours, so no Δ is computed; what carries over is the ordering of the four rows.
    # The note prints the whole of the paper's Table 7 (text8, IMDB, BBC).
    "bbc_table7": ReportSpec(
        title="Press & Wolf (2017), Table 7 analogue: small LSTM LMs on BBC News (our split), no dropout",
        source="Press & Wolf, Using the Output Embedding to Improve Language Models, EACL 2017, Table 7, BBC "
               "rows (their split and vocabulary, not ours: not strictly comparable)",
        command=("python -m experiments.ptb --config={flag} --config.dataset=bbc "
                 "--config.seed={seed} --workdir={workdir}"),
        rows=tuple(PaperRow(c, label, "—", *PAPER_TABLE7["BBC"][c]) for c, label in (
            ("small", "small"), ("small_tied", "small + WT"), ("small_pr", "small + PR"),
            ("small_tied_pr", "small + WT + PR"))),
        dataset="bbc", runs="runs/bbc", comparable=False, note=_paper_table7()),
    # Bengio et al. (2003) NNLM and Mnih & Hinton (2007) LBL, tied vs untied, on PTB. Neither paper reports
    # PTB (they used Brown / AP News), so there is no perplexity to compare with; the question is what
    # tying does to each model at equal size of everything else. The size column gives the lecture notes'
    # parameter counts (notes_neural_lm) at our sizes (V = 10,000, d = H = 200, n − 1 = 4) for the two models
    # the notes define: the NNLM without direct connections (D with A = 0) and the one-table LBL.
    "ffnn_ptb": ReportSpec(
        title="Feed-forward LMs on PTB: Bengio NNLM and log-bilinear LM, tied vs untied (5-gram context)",
        source="Bengio et al., A Neural Probabilistic Language Model, JMLR 2003; Mnih & Hinton, Three New "
               "Graphical Models for Statistical Language Modelling, ICML 2007 (neither reports PTB); sizes: "
               "the lecture notes' parameter counts at our sizes. Our LBL has 200 parameters fewer than the "
               "notes' count: it has no d-dimensional context bias, which the per-word output bias absorbs "
               "(wt_jax/models/ffnn_lm.py)",
        command="python -m experiments.ptb --config={flag} --config.seed={seed} --workdir={workdir}",
        rows=(
            PaperRow("nnlm", "NNLM", "notes: 4,170,200", None, None, None),
            PaperRow("nnlm_tied", "NNLM + WT (output = C)", "—", None, None, None),
            PaperRow("nnlm_tied_proj", "NNLM + WT through a projection (o = h·P_o)", "—", None, None, None),
            PaperRow("lbl_untied", "LBL, separate tables", "—", None, None, None),
            PaperRow("lbl", "LBL, one table (Mnih & Hinton's)", "notes: 2,170,200", None, None, None),
        ), runs="runs/ffnn"),
    # Inan, Khosravi & Socher (ICLR 2017), Table 1: the small (200-unit) VD-LSTM on PTB, with the augmented
    # loss (AL), reused embeddings (RE: tied, no output bias) and both (REAL). All four small rows as printed
    # in the paper's Table 1 (valid / test; the table has no parameter or training-perplexity column). Each
    # row three times: Appendix A's settings (keep reading), its first training session and footnote 4's
    # second one (retrained from the first one's final state: what the paper reports), then the earlier recipe.
    "inan_ptb_table1": ReportSpec(
        title="Inan et al. (2017), Table 1: small VD-LSTM on PTB with AL, RE and REAL",
        source="Inan, Khosravi & Socher, Tying Word Vectors and Word Classifiers, ICLR 2017, Table 1 "
               "(settings: Appendix A as transcribed in ../shared/papers/README.md; sessions: footnote 4)",
        command="python -m experiments.ptb --config={flag} --config.seed={seed} --workdir={workdir}",
        rows=tuple(row for v, label, valid, test in INAN_SMALL for row in (
            PaperRow(f"inan_small_{v}_keep", f"{label}, App. A", "—", None, valid, test,
                     f"configs/inan.py:small,{v}", "runs/inan_appA"),
            PaperRow(f"inan_small_{v}_keep_s2", f"{label}, App. A, retrained (footnote 4)", "—", None, valid, test,
                     f"configs/inan.py:small,{v} --config.name=inan_small_{v}_keep_s2 "
                     "--config.init_from=runs/inan_appA/{first_session}/init_s2", "runs/inan_appA"),
        )) + tuple(PaperRow(f"inan_small_{v}", f"{label}, earlier recipe", "—", None, valid, test,
                            f"configs/inan.py:small,{v},ptb,gal") for v, label, valid, test in INAN_SMALL),
        runs="runs/inan",
        note="App. A: `configs/inan.py:small,V` (Appendix A's lr 1, ×0.9 per epoch after epoch 5, bptt 35, "
             "clip 5, keep 0.7; 40 epochs; the AL target ỹ fixed as the paper defines it, except in +REAL, whose "
             "gradient runs through ỹ: BUILD_NOTES §18). Retrained: a second training session from the first "
             "one's final parameters with the schedule restarted (footnote 4; `bash experiments/inan_table1.sh`). "
             "Earlier recipe: `configs/inan.py:small,V,ptb,gal` (Gal's schedule, drop 0.5, bptt 20), for comparison."),
    # Press & Wolf (EACL 2017), Table 5: the large (1500-unit) LSTM with Zaremba's dropout, the variational
    # ("Bayesian") dropout LSTM of Gal (2015), and Zilly et al.'s RHN, each untied and tied, on PTB. The table
    # has one tied BD row and the text says it was run with and without weight decay; both readings are rows
    # here, each beside the same paper values. Runs need an accelerator (experiments/gpu_table5.py); their
    # matmul precision (TF32 or true float32) is in each run's command below.
    "table5": ReportSpec(
        title="Press & Wolf (2017), Table 5: large LSTM, variational-dropout LSTM and RHN LMs on PTB",
        source="Press & Wolf, Using the Output Embedding to Improve Language Models, EACL 2017, Table 5",
        command=("python -m experiments.ptb --config={flag} --config.seed={seed} "
                 "--config.matmul_precision={matmul_precision} --workdir={workdir}"),
        rows=(
            PaperRow("large", "Large (Zaremba et al. 2014)", "66M", 37.8, 82.2, 78.4),
            PaperRow("large_tied", "Large + WT", "51M", 48.5, 77.7, 74.3),
            PaperRow("large_bd_wd", "Large + BD + WD", "66M", 24.3, 78.1, 75.2),
            PaperRow("large_bd_wd_tied", "Large + BD + WT, with WD (the authors' code)", "51M", 28.2, 75.8, 73.2),
            PaperRow("large_bd_tied", "Large + BD + WT, without WD", "51M", 28.2, 75.8, 73.2),
            PaperRow("rhn", "RHN + BD (Zilly et al. 2016)", "32M", 67.4, 71.2, 68.5),
            PaperRow("rhn_tied", "RHN + BD + WT (the main job)", "24M", 74.1, 68.1, 66.0),
        ),
        runs="runs/table5",
        note="Trained on one GPU (`experiments/gpu_table5.py`, one window of about 15 minutes of device time "
             "per run; the device, versions and the window's decisions are in `results/table5/gpu_windows/`). "
             "Float32 matmuls at TF32 precision unless the command says `float32`: in true float32 the large "
             "LSTM took 24–25 ms per step on an H200 with two runs sharing it, too slow for a 55-epoch run in "
             "one window (BUILD_NOTES §21). Our train column is the running training perplexity with dropout "
             "on; where a run also measured the training text without dropout (`config.eval_train`, on for the "
             "BD configs) that value follows in brackets: the paper's BD train values appear to be that "
             "measure, not the running one (BUILD_NOTES §26)."),
    # Not a paper table: the tied Transformer LM (configs/transformer.py) — tied vs untied × where the one
    # matrix's scale is corrected (none: GPT-2; √D on the input: Vaswani et al. 2017, Gemma; 1/√D on the
    # logits: T5), and projection regularisation on the tied model. No paper reports these on PTB or WikiText-2.
    **{f"transformer_{dataset}": ReportSpec(
        title=f"A tied Transformer LM on {label}: tying × embedding scale (4 blocks, D = 256; 6 epochs)",
        source="ours (no paper reports these); protocol: windows of 64 tokens after 32 tokens of memory, the "
               "batch-1 test on the same windows (wt_jax/models/transformer_lm.py)",
        command="python -m experiments.ptb --config={flag} --config.seed={seed} --workdir={workdir}",
        rows=tuple(PaperRow(f"transformer_{mode}_{scale}{suffix}", cell, "—", None, None, None,
                            f"configs/transformer.py:{mode},{scale}{suffix.replace('_', ',')}")
                   for mode, scale, cell in cells),
        dataset=dataset, runs=f"runs/transformer{suffix}", comparable=False)
       for dataset, label, suffix, cells in (("ptb", "PTB", "", TRANSFORMER_CELLS),
                                              ("wikitext2", "WikiText-2", "_wikitext2", TRANSFORMER_WT2_CELLS))},
}


@dataclasses.dataclass(frozen=True)
class NmtRow:
  tying: str  # the config's tying mode: none | decoder | three_way
  label: str  # as in the paper's Table 8
  paper_size: str  # the paper's parameter saving, in words (its WMT models, not ours)
  paper: tuple = ()  # ((target language, size, valid BLEU, test BLEU), ...) as Table 8 prints them (WMT)


@dataclasses.dataclass(frozen=True)
class NmtReportSpec:
  title: str
  source: str
  command: str  # ({mode}, {tgt}, {workdir} filled in)
  pairs: tuple[str, ...]  # target languages (source: English)
  rows: tuple[NmtRow, ...]
  paper_subwords: tuple = ()  # ((target language, only source, only target, both), ...): the paper's Table 1


# Press & Wolf (EACL 2017), Table 8: DL4MT attention NMT on WMT EN→FR / EN→DE, three tying modes. Their
# BLEU scores are on WMT and not comparable with Multi30k; what carries over is the parameter saving
# (about 28% for decoder tying, 52% for three-way tying) at unchanged BLEU.
NMT_REPORTS = {
    "nmt_table8": NmtReportSpec(
        title="Press & Wolf (2017), Table 8 (and Table 1) on Multi30k: attention NMT, three tying modes",
        source="Press & Wolf, Using the Output Embedding to Improve Language Models, EACL 2017, Tables 1 and 8",
        command=("python -m experiments.nmt --config=configs/nmt_multi30k_{mode}.py --config.tgt_lang={tgt} "
                 "--workdir={workdir}"),
        pairs=("de", "fr"),
        rows=(
            NmtRow("none", "baseline", "100%", (("fr", "168M", 29.49, 33.13), ("de", "165M", 20.96, 16.79))),
            NmtRow("decoder", "decoder WT", "≈72% (−28%)",
                   (("fr", "122M", 29.47, 33.26), ("de", "119M", 21.09, 16.54))),
            NmtRow("three_way", "three-way WT", "≈48% (−52%)",
                   (("fr", "80M", 29.43, 33.46), ("de", "79M", 21.02, 17.15))),
        ),
        paper_subwords=(("fr", "2K", "7K", "85K"), ("de", "3K", "11K", "80K"))),
}
_MODE_CONFIG = {"none": "baseline", "decoder": "dec_tied", "three_way": "three_way"}


def import_runs(runs_dir: Path, dest: Path) -> list[str]:
  """Copy the small outputs of every finished run in `runs_dir` into `dest`; returns the run names."""
  imported = []
  for run in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
    if not (run / "results.json").exists():
      logging.info("skipping %s: no results.json (unfinished)", run)
      continue
    target = dest / run.name
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(run / "results.json", target / "results.json")
    # a run's workdir holds metrics.jsonl; a record collected by experiments.gpu_table5 holds curve.jsonl
    source = run / "metrics.jsonl" if (run / "metrics.jsonl").exists() else run / CURVE
    records = epoch_records(source)
    if not records:
      logging.warning("%s: no epoch records in metrics.jsonl or %s; its curve will be empty", run, CURVE)
    (target / CURVE).write_text("".join(json.dumps(r) + "\n" for r in records))
    imported.append(run.name)
  return imported


def load_runs(report_dir: Path, dataset: str = "ptb") -> dict[str, list[dict]]:
  """config name → the results.json of its runs (sorted by seed), each with its epoch history. Every run
  must be on `dataset` (runs from before results.json recorded it were all on PTB)."""
  by_config: dict[str, list[dict]] = {}
  for path in sorted(report_dir.glob("*/results.json")):
    r = json.loads(path.read_text())
    if r.get("dataset", "ptb") != dataset:
      raise ValueError(f"{path} is a run on {r.get('dataset', 'ptb')!r}, but this report is for {dataset!r}.")
    r["_dir"] = path.parent.name
    r["_valid_curve"] = [(rec["epoch"], rec["valid_ppl"]) for rec in metrics.read(path.parent / CURVE)]
    by_config.setdefault(r["config"], []).append(r)
  for runs in by_config.values():
    runs.sort(key=lambda r: r["seed"])
  return by_config


def _cell(values: list[float]) -> str:
  if not values:
    return "—"
  if len(values) == 1:
    return f"{values[0]:.1f}"
  return f"{statistics.mean(values):.1f} ({', '.join(f'{v:.1f}' for v in values)})"


def _train_cell(runs: list[dict]) -> str:
  """The running training perplexity (dropout on) of the runs, then, if every run also scored the training
  text without dropout (`train_ppl_eval`), that in brackets."""
  cell = _cell([r["train_ppl"] for r in runs])
  if all("train_ppl_eval" in r for r in runs):
    cell += f" (no dropout: {_cell([r['train_ppl_eval'] for r in runs])})"
  return cell


def _paper(value: float | None):
  return "—" if value is None else value


def table(spec: ReportSpec, by_config: dict[str, list[dict]]) -> str:
  """Markdown: one row per paper row, paper value beside ours (mean over seeds, then each seed)."""
  lines = [
      "| model | size (paper) | parameters (ours) | seeds | train paper / ours | valid paper / ours "
      "| test paper / ours | test Δ |",
      "|---|---|---|---|---|---|---|---|",
  ]
  for row in spec.rows:
    runs = by_config.get(row.config, [])
    if not runs:
      lines.append(f"| {row.label} | {row.size} | — | none yet | {_paper(row.train)} / — "
                   f"| {_paper(row.valid)} / — | {_paper(row.test)} / — | — |")
      continue
    sizes = sorted({r["num_params"] for r in runs})
    tests = [r["test_ppl"] for r in runs]
    if not spec.comparable:
      delta = "not comparable"
    else:
      delta = f"{statistics.mean(tests) - row.test:+.1f}" if row.test is not None else "—"
    lines.append(
        f"| {row.label} | {row.size} | {', '.join(f'{s:,}' for s in sizes)} "
        f"| {', '.join(str(r['seed']) for r in runs)} "
        f"| {_paper(row.train)} / {_train_cell(runs)} "
        f"| {_paper(row.valid)} / {_cell([r['valid_ppl'] for r in runs])} "
        f"| {_paper(row.test)} / {_cell(tests)} | {delta} |")
  return "\n".join(lines)


def valid_axis_limits(lows: list[float], autoscaled_top: float, cap: float = 200.0) -> tuple[float, float]:
  """(bottom, top) of the validation-perplexity axis: the top capped at `cap`, the bottom a 5% margin below
  the lowest value drawn (`lows`: each curve's minimum and each paper line) and never below 0 — autoscaling
  alone would put it below 0 when a curve starts in the thousands."""
  top = min(autoscaled_top, cap)
  low = min(lows)
  return max(0.0, low - 0.05 * (top - low)), top


def figure(spec: ReportSpec, by_config: dict[str, list[dict]], png: Path) -> Path | None:
  """Validation perplexity per epoch, one colour per paper row (first seed solid, others dashed)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(7, 4.5))
  drawn = False
  lows = []  # each curve's minimum and each paper line (valid_axis_limits)
  palette = plt.get_cmap("tab10" if len(spec.rows) <= 10 else "tab20")  # one colour per row
  for i, row in enumerate(spec.rows):
    colour = palette(i)
    for j, r in enumerate(by_config.get(row.config, [])):
      if not r["_valid_curve"]:
        continue
      xs, ys = zip(*r["_valid_curve"])
      ax.plot(xs, ys, color=colour, linestyle="-" if j == 0 else "--", marker="o" if j == 0 else None,
              markersize=3, label=f"{row.label} (seed {r['seed']})")
      drawn = True
      lows.append(min(ys))
    if row.valid is not None and spec.comparable:
      ax.axhline(row.valid, color=colour, linestyle=":", linewidth=1)
      lows.append(row.valid)
  if not drawn:
    plt.close(fig)
    return None
  ax.set_xlabel("epoch")
  ax.set_ylabel("validation perplexity")
  ax.set_ylim(*valid_axis_limits(lows, ax.get_ylim()[1]))
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=8)
  has_paper = spec.comparable and any(row.valid is not None for row in spec.rows)
  ax.set_title(spec.title + ("\n(dotted: the paper's final validation perplexity)" if has_paper else ""),
               fontsize=9)
  fig.tight_layout()
  fig.savefig(png, dpi=100)
  plt.close(fig)
  return png


def provenance(name: str, spec: ReportSpec, by_config: dict[str, list[dict]]) -> str:
  """Markdown list: per run, the command, code commit, machine, wall time and throughput."""
  lines = []
  for row in spec.rows:
    for r in by_config.get(row.config, []):
      host = r.get("host") or {}
      machine = (f"{host.get('cpu', '?')}, {host.get('cpu_count', '?')} cores" if host
                 else "not recorded")
      # A second session's flag names the first session's workdir: its own minus "_s2" (seed suffix kept).
      flag = (row.flag or f"configs/{r['config']}.py").replace("{first_session}", r["_dir"].removesuffix("_s2"))
      cmd = spec.command.format(flag=flag, seed=r["seed"], matmul_precision=r.get("matmul_precision", "default"),
                                workdir=f"{row.runs or spec.runs or 'runs/' + name}/{r['_dir']}")
      if host.get("platform") not in (None, "cpu"):  # an accelerator: name it
        machine = f"{r.get('device_kind', host.get('platform'))} (host {machine})"
      commit = (r.get("versions") or {}).get("wt_jax_commit") or "not recorded"
      lines.append(
          f"- `{r['_dir']}`: `{cmd}` — commit `{commit}`, machine: {machine}; "
          f"{r['epochs']:.0f} epochs, {r['wall_s'] / 60:.0f} min wall, "
          f"{r['train_tokens_per_s']:,.0f} train tokens/s"
          + (f", resumed from step {r['resumed_from_step']}" if r.get("resumed_from_step") else ""))
  return "\n".join(lines)


def splice_readme(readme: Path, name: str, body: str) -> bool:
  """Replace the text between the markers `<!-- report:NAME:begin -->` and `<!-- report:NAME:end -->` in
  `readme` (a study page or a README) with `body`, keeping the rest; False if the markers are absent."""
  begin, end = f"<!-- report:{name}:begin -->", f"<!-- report:{name}:end -->"
  text = readme.read_text() if readme.exists() else ""
  if begin not in text or end not in text:
    return False
  head, rest = text.split(begin, 1)
  _, tail = rest.split(end, 1)
  readme.write_text(f"{head}{begin}\n{body}\n{end}{tail}")
  return True


def write_page(page: Path, name: str, title: str, body: str, runs: str = "") -> None:
  """The study page results/<name>/README.md: `body` (the table part) between the report's markers and
  `runs` (the run records) between its runs markers, the hand-written prose around them kept. On a page
  without the runs markers `runs` follows `body` inside the report's markers; a page without the report's
  markers (or no page yet) is written whole: `title`, then each part in its markers."""
  text = page.read_text() if page.exists() else ""
  has = lambda key: f"<!-- report:{key}:begin -->" in text and f"<!-- report:{key}:end -->" in text
  if has(name):
    if runs and has(f"{name}:runs"):
      splice_readme(page, f"{name}:runs", runs)
    elif runs:
      body = f"{body}\n\n{runs}"
    splice_readme(page, name, body)
    return
  if text:
    logging.info("%s has no <!-- report:%s:begin/end --> markers; writing the whole page", page, name)
  block = lambda key, part: f"<!-- report:{key}:begin -->\n{part}\n<!-- report:{key}:end -->\n"
  page.write_text(f"# {title}\n\n{block(name, body)}" + (f"\n{block(name + ':runs', runs)}" if runs else ""))


def _report_dir(name: str, out_root: Path, runs_dir: Path | None) -> Path:
  """results/<name>/, after importing the finished runs of `runs_dir` into it (if given)."""
  report_dir = out_root / name
  report_dir.mkdir(parents=True, exist_ok=True)
  if runs_dir is not None:
    if not runs_dir.is_dir():
      raise FileNotFoundError(f"--runs={runs_dir} is not a directory")
    logging.info("imported %s", import_runs(runs_dir, report_dir))
  return report_dir


def _write(name: str, report_dir: Path, readme: Path | None, title: str, lead: str, tab: str, png: Path | None,
           figure_label: str, prov: str, readme_runs: str) -> None:
  """The study page results/<name>/README.md (its generated parts: `lead`, the table, the figure, the
  rebuild command; the run records) and, if `readme` is given, its section there."""
  local_fig = f"\n\n![{figure_label}]({png.name})" if png else ""
  write_page(report_dir / "README.md", name, title,
             f"{lead}\n\n{tab}{local_fig}\n\nRebuild: `python -m experiments.report {name}`", f"## Runs\n\n{prov}")
  if readme is not None:
    rel = lambda p: Path(os.path.relpath(p.resolve(), readme.resolve().parent)).as_posix()
    fig = f"\n\n![{figure_label}]({rel(png)})" if png else ""
    body = f"{tab}{fig}\n\n{readme_runs}: `{rel(report_dir / 'README.md')}`."
    if not splice_readme(readme, name, body):
      logging.warning("%s has no <!-- report:%s:begin/end --> markers; README not updated", readme, name)


def build(name: str, out_root: Path, runs_dir: Path | None = None, readme: Path | None = None) -> str:
  """Import (optionally), then write the report; returns the table."""
  spec = REPORTS[name]
  report_dir = _report_dir(name, out_root, runs_dir)
  by_config = load_runs(report_dir, spec.dataset)
  unknown = sorted(set(by_config) - {row.config for row in spec.rows})
  if unknown:
    raise ValueError(f"{report_dir} holds runs of configs not in report {name!r}: {unknown}")
  tab = table(spec, by_config) + (f"\n\n{spec.note}" if spec.note else "")
  png = figure(spec, by_config, report_dir / "valid_curves.png")
  lead = (f"Paper: {spec.source}. Ours: test perplexity is the batch-1 protocol (`test_ppl`); several seeds "
          f"are shown as mean (each seed).")
  _write(name, report_dir, readme, spec.title, lead, tab, png, "validation curves",
         provenance(name, spec, by_config), "Runs, commands, code commits and machine")
  return tab


def load_nmt_runs(report_dir: Path) -> dict[tuple[str, str], list[dict]]:
  """(target language, tying mode) → the results.json of its runs, each with its per-epoch history."""
  runs: dict[tuple[str, str], list[dict]] = {}
  for path in sorted(report_dir.glob("*/results.json")):
    r = json.loads(path.read_text())
    r["_dir"] = path.parent.name
    r["_bleu_curve"] = [(rec["epoch"], rec["valid_bleu_greedy"]) for rec in metrics.read(path.parent / CURVE)]
    runs.setdefault((r["tgt_lang"], r["tying"]), []).append(r)
  for rs in runs.values():
    rs.sort(key=lambda r: r.get("seed", 0))
  return runs


def nmt_table(spec: NmtReportSpec, runs: dict[tuple[str, str], list[dict]]) -> str:
  """Markdown: per language pair and tying mode, parameters, size relative to the baseline, BLEU, ppl."""
  lines = [
      "| pair | model | parameters | relative size (ours) | relative size (paper, WMT) | valid BLEU "
      "| test BLEU | valid ppl | test ppl | best epoch / epochs | paper (WMT): size, valid / test BLEU |",
      "|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  for tgt in spec.pairs:
    base = runs.get((tgt, "none"), [])
    base_params = base[0]["num_params"] if base else None
    for row in spec.rows:
      rs = runs.get((tgt, row.tying), [])
      paper = next((f"{size}, {v} / {te}" for lang, size, v, te in row.paper if lang == tgt), "—")
      if not rs:
        lines.append(f"| en→{tgt} | {row.label} | — | — | {row.paper_size} | — | — | — | — | not run yet "
                     f"| {paper} |")
        continue
      params = rs[0]["num_params"]
      rel = f"{100 * params / base_params:.0f}%" if base_params else "—"
      lines.append(
          f"| en→{tgt} | {row.label} | {params:,} | {rel} | {row.paper_size} "
          f"| {_cell([r['valid_bleu'] for r in rs])} | {_cell([r['test_bleu'] for r in rs])} "
          f"| {_cell([r['valid_ppl'] for r in rs])} | {_cell([r['test_ppl'] for r in rs])} "
          f"| {', '.join(str(r['best_epoch']) + ' / ' + str(r['epochs']) for r in rs)} | {paper} |")
  return "\n".join(lines)


def subword_table(spec: NmtReportSpec, runs: dict[tuple[str, str], list[dict]]) -> str:
  """Table 1's analogue: joint-BPE pieces in the segmented training text, only source / only target / both."""
  lines = ["| pair | BPE pieces | only source | only target | both | both / all "
           "| paper (WMT): only source / only target / both |", "|---|---|---|---|---|---|---|"]
  for tgt in spec.pairs:
    paper = next((" / ".join(p[1:]) for p in spec.paper_subwords if p[0] == tgt), "—")
    rs = [r for row in spec.rows for r in runs.get((tgt, row.tying), []) if r.get("joint_vocab")]
    if not rs:
      lines.append(f"| en–{tgt} | — | — | — | — | no joint-vocabulary run yet | {paper} |")
      continue
    o, r = rs[0]["subword_overlap"], rs[0]
    lines.append(f"| en–{tgt} | {r['bpe_vocab_size']:,} | {o['source_only']:,} | {o['target_only']:,} "
                 f"| {o['both']:,} | {100 * o['both_fraction']:.1f}% | {paper} |")
  return "\n".join(lines)


def nmt_figure(spec: NmtReportSpec, runs: dict[tuple[str, str], list[dict]], png: Path) -> Path | None:
  """Greedy validation BLEU per epoch: one panel per language pair, one line per tying mode."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, len(spec.pairs), figsize=(5 * len(spec.pairs), 4), squeeze=False)
  drawn = False
  for ax, tgt in zip(axes[0], spec.pairs):
    for i, row in enumerate(spec.rows):
      for r in runs.get((tgt, row.tying), []):
        if r["_bleu_curve"]:
          xs, ys = zip(*r["_bleu_curve"])
          ax.plot(xs, ys, color=f"C{i}", marker="o", markersize=3, label=row.label)
          drawn = True
    ax.set_title(f"en→{tgt}", fontsize=9)
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation BLEU (greedy)")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=8)
  if not drawn:
    plt.close(fig)
    return None
  fig.suptitle(spec.title, fontsize=9)
  fig.tight_layout()
  fig.savefig(png, dpi=100)
  plt.close(fig)
  return png


def nmt_provenance(spec: NmtReportSpec, name: str, runs: dict[tuple[str, str], list[dict]]) -> str:
  lines = []
  for tgt in spec.pairs:
    for row in spec.rows:
      for r in runs.get((tgt, row.tying), []):
        host = r.get("host") or {}
        machine = f"{host.get('cpu', '?')}, {host.get('cpu_count', '?')} cores" if host else "not recorded"
        cmd = spec.command.format(mode=_MODE_CONFIG[row.tying], tgt=tgt, workdir=f"runs/nmt/{r['_dir']}")
        commit = (r.get("versions") or {}).get("wt_jax_commit") or "not recorded"
        # wall_s is the last session's (a resumed run that only decoded took a minute): say so
        wall = (f"{r['train_s'] / 60:.0f} min training" +
                (f" (the last session, which resumed it, {r['wall_s'] / 60:.0f} min wall)"
                 if r["wall_s"] < r["train_s"] else f", {r['wall_s'] / 60:.0f} min wall"))
        lines.append(f"- `{r['_dir']}`: `{cmd}` — commit `{commit}`, machine: {machine}; {r['epochs']} epochs, "
                     f"{wall}; beam "
                     f"{r['beam']}, length α {r['length_alpha']}; BLEU `{r['bleu_signature']}`; "
                     f"test translations: `runs/nmt/{r['_dir']}/test.hyp.txt` (in the run's workdir)")
  return "\n".join(lines)


def build_nmt(name: str, out_root: Path, runs_dir: Path | None = None, readme: Path | None = None) -> str:
  """Import (optionally), then write the NMT report (Table 8 and Table 1 analogues); returns the tables."""
  spec = NMT_REPORTS[name]
  report_dir = _report_dir(name, out_root, runs_dir)
  runs = load_nmt_runs(report_dir)
  tab = f"{nmt_table(spec, runs)}\n\nTable 1 analogue (subwords of the joint BPE):\n\n{subword_table(spec, runs)}"
  png = nmt_figure(spec, runs, report_dir / "valid_bleu.png")
  lead = (f"Paper: {spec.source}. Ours: Multi30k task 1 (train 29,000 pairs; valid = val, "
          f"test = test_2016_flickr), BLEU by sacrebleu on detokenised beam-search output of the parameters "
          f"with the best greedy validation BLEU. The paper's BLEU is on WMT and not comparable; its relative "
          f"sizes are.")
  _write(name, report_dir, readme, spec.title, lead, tab, png, "validation BLEU",
         nmt_provenance(spec, name, runs), "Runs, commands, code commits, machine and test translations")
  return tab


# --- TPU memory per chip (experiments.compile) ------------------------------------------------------------

AOT_PREFIX = "AOT_JSON "  # experiments.compile's machine-readable line
AOT_ORDER = ("small", "small_tied", "medium", "medium_tied", "large", "large_tied", "large_bd_wd",
             "large_bd_wd_tied", "rhn", "rhn_tied", "nmt_multi30k_none", "nmt_multi30k_three_way")


def import_compiles(src: Path, dest: Path) -> list[str]:
  """Each file of `src` holding an `AOT_JSON` line (experiments.compile's stdout) → dest/<config>_<topology>.json."""
  names = []
  for f in sorted(src.iterdir()):
    lines = [l for l in f.read_text(errors="replace").splitlines() if l.startswith(AOT_PREFIX)] if f.is_file() else []
    if lines:
      rec = json.loads(lines[-1][len(AOT_PREFIX):])
      name = f"{rec['config']}_{rec['topology'].replace(':', '_')}"
      (dest / f"{name}.json").write_text(json.dumps(rec, indent=1) + "\n")
      names.append(name)
  return names


def tpu_memory_table(records: list[dict]) -> str:
  mib = lambda b: f"{b / 2**20:,.1f}"
  order = {c: i for i, c in enumerate(AOT_ORDER)}
  rows = ["| config | topology | batch (global) | train step total / chip (temporaries), MiB | eval / beam search "
          "total / chip, MiB | fits | compile s (train, eval) | largest batch per chip (global; smallest refused) |",
          "|---|---|---|---|---|---|---|---|"]
  for r in sorted(records, key=lambda r: (order.get(r["config"], len(order)), r["chips"], r["config"])):
    train = r["programs"]["train_step"]
    other = next(p for n, p in r["programs"].items() if n != "train_step")
    if "max_batch" in r:
      refused = f"{r['smallest_not_fitting']:,}" if r.get("smallest_not_fitting") else "—"
      largest = (f"{r['max_batch_per_chip']:,} ({r['max_batch']:,}; {refused})"
                 + (" (search cap)" if r.get("max_batch_capped") else ""))
    else:
      largest = "not searched"
    rows.append(f"| {r['config']} | {r['topology']} | {train['batch_size']} | {mib(train['total_bytes'])} "
                f"({mib(train['temp_bytes'])}) | {mib(other['total_bytes'])} | {'yes' if r['fits'] else 'no'} | "
                f"{train['compile_s']}, {other['compile_s']} | {largest} |")
  return "\n".join(rows)


def build_tpu_memory(name: str, out_root: Path, runs_dir: Path | None = None, readme: Path | None = None) -> str:
  """results/tpu_memory/: the compile records (imported from `runs_dir`'s compile outputs), the table."""
  report_dir = out_root / name
  report_dir.mkdir(parents=True, exist_ok=True)
  if runs_dir is not None:
    logging.info("imported %s", import_compiles(runs_dir, report_dir))
  records = [json.loads(f.read_text()) for f in sorted(report_dir.glob("*.json"))]
  if not records:
    raise FileNotFoundError(f"no compile records in {report_dir}; pass --runs=DIR of experiments.compile outputs")
  tab = tpu_memory_table(records)
  vers = sorted({f"jax {r['versions']['jax']} / libtpu {r['versions']['libtpu']}" for r in records if "versions" in r})
  intro = ("TPU v5e memory per chip (16 GiB HBM) from `python -m experiments.compile --config=configs/<config>.py "
           "--topology=<topology> --find_max_batch --batch_rel_tol=0.25` on a CPU-only machine "
           f"({', '.join(vers) or 'versions not recorded'}). \"total\" is arguments + outputs − donated + "
           "temporaries; the largest batch is the largest global batch the search compiled that fits (within 25% "
           "of the smallest that does not), divided by the chip count. Compile times are this 2-core machine's, "
           "with other jobs running; the NMT rows use the longest training bucket and the BPE vocabulary size "
           "as an upper bound for both sides; `nmt_multi30k_none` is `configs/nmt_multi30k_baseline.py`.")
  title = "Compile for a TPU before you rent one: memory per chip of every paper config"
  write_page(report_dir / "README.md", name, title,
             f"{intro}\n\n{tab}\n\nRebuild: `python -m experiments.report {name}`")
  if readme is not None and not splice_readme(readme, name, f"{intro}\n\n{tab}"):
    logging.warning("%s has no <!-- report:%s:begin/end --> markers; README not updated", readme, name)
  return tab


# --- softmax approximations over the word matrix (wt_jax/softmax.py; not a paper table) ----------------------

# The study's cells: (softmax kind, its label). On PTB the full-softmax cells are Table 6's runs (results/ptb_table6).
SOFTMAX_KINDS = (("full", "full softmax"), ("sampled", "sampled softmax"), ("nce", "NCE"),
                 ("class", "class-factored softmax"))
SOFTMAX_BASELINE = {"untied": "small", "tied": "small_tied"}  # results/ptb_table6 configs of the full rows


@dataclasses.dataclass(frozen=True)
class SoftmaxStudy:
  """One corpus of the softmax study: the runs' dataset, the command's corpus flags, its vocabulary size, and
  whether Table 6's full-softmax runs (PTB only) give the full cells."""
  dataset: str
  corpus: str
  flags: str
  vocab: int
  table6_baseline: bool
  kinds: tuple[tuple[str, str], ...] = SOFTMAX_KINDS  # the cells listed even before they have a run


SOFTMAX_STUDIES = {
    "softmax_study": SoftmaxStudy("ptb", "PTB", "", 10_000, True),
    "softmax_study_wt2": SoftmaxStudy("wikitext2", "WikiText-2",
                                      " --config.dataset=wikitext2 --config.vocab_size=33278", 33_278, False, kinds=()),
}


def _rows_reached(run: dict, matrix: str) -> float | None:
  """The mean over the run's epochs of the rows of `matrix` whose gradient was non-zero per step."""
  values = [rec[f"rows/grad/words/{matrix}"] for rec in run["_curve"] if f"rows/grad/words/{matrix}" in rec]
  return statistics.mean(values) if values else None


def softmax_cell(r: dict) -> tuple[str, str, str]:
  """(cell key, row label, the command's extra flags) of a study run: its softmax kind, or for a sampled/NCE
  run with another proposal or K than the study's (log-uniform, K = 1,000) a cell of its own."""
  kind, st = r.get("softmax", "full"), r.get("softmax_settings") or {}
  label = dict(SOFTMAX_KINDS)[kind]
  if kind not in ("sampled", "nce") or (st.get("proposal", "log_uniform"), st.get("num_samples", 1000)) == (
      "log_uniform", 1000):
    return kind, label, ""
  power = st.get("unigram_power")
  return (f"{kind}_{st['proposal']}_k{st['num_samples']}",
          f"{label}, {st['proposal'].replace('_', '-')} proposal" + (f" (power {power:g})" if power is not None else "")
          + f", K = {st['num_samples']:,}",
          f" --config.softmax.proposal={st['proposal']}"
          + (f" --config.softmax.unigram_power={power:g}" if power is not None else "")
          + f" --config.softmax.num_samples={st['num_samples']}")


def load_softmax_runs(report_dir: Path, out_root: Path, study: SoftmaxStudy = SOFTMAX_STUDIES["softmax_study"]
                      ) -> dict[tuple[str, str], list[dict]]:
  """(softmax kind, tying) → results.json of the study's runs (sorted by seed), each with its epoch records;
  on PTB the full-softmax cells from Table 6's committed runs. Every run must be on the study's corpus."""
  runs: dict[tuple[str, str], list[dict]] = {}
  for path in sorted(report_dir.glob("*/results.json")):
    r = json.loads(path.read_text())
    if r.get("dataset", "ptb") != study.dataset:
      raise ValueError(f"{path} is a run on {r.get('dataset', 'ptb')!r}, but this study is on {study.dataset!r}.")
    r["_dir"], r["_curve"] = path.parent.name, list(metrics.read(path.parent / CURVE))
    runs.setdefault((softmax_cell(r)[0], r["tying"]), []).append(r)
  table6 = out_root / "ptb_table6"
  if study.table6_baseline and table6.is_dir():
    by_config = load_runs(table6)
    for tying, config in SOFTMAX_BASELINE.items():
      runs[("full", tying)] = [{**r, "_curve": []} for r in by_config.get(config, [])]
  for cell in runs.values():
    cell.sort(key=lambda r: r["seed"])
  return runs


def softmax_table(runs: dict[tuple[str, str], list[dict]], bench: list[dict], table4: dict,
                  study: SoftmaxStudy = SOFTMAX_STUDIES["softmax_study"]) -> str:
  """Markdown: per softmax kind, untied and tied, perplexities, what the tie buys, the rows of each matrix a
  step reaches, the training speed (bench) and Table 4's correlations."""
  speed: dict[str, list[float]] = {}
  for rec in bench:
    speed.setdefault(rec.get("softmax", "full"), []).append(rec["train_ms_per_step"])
  lines = ["| training softmax | tying | seeds | valid | test (batch 1) | test: tied − untied | rows of the output "
           "matrix with a gradient, per step | rows of the input matrix, per step | train ms/step (bench, tied "
           "config; ×full) | Table 4's ρ: (In, Out) untied; (In, Tied) / (Out, Tied) tied |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  full_ms = statistics.median(speed["full"]) if speed.get("full") else None
  extra = {softmax_cell(r)[:2] for cell in runs.values() for r in cell} - set(study.kinds)
  every_row = f"all {study.vocab:,}"
  for kind, label in (*study.kinds, *sorted(extra)):
    for tying in ("untied", "tied"):
      cell = runs.get((kind, tying), [])
      if not cell:
        lines.append(f"| {label} | {tying} | none yet | — | — | — | — | — | — | — |")
        continue
      tests = [r["test_ppl"] for r in cell]
      other = runs.get((kind, "untied"), [])
      gain = (f"{statistics.mean(tests) - statistics.mean(r['test_ppl'] for r in other):+.1f}"
              if tying == "tied" and other else "")
      if tying == "tied":
        out_rows, in_rows = _rows_reached(cell[0], "embedding"), None
        out_text = every_row if kind == "full" else (f"{out_rows:,.0f} (one matrix)" if out_rows else "—")
        in_text = "(the same matrix)"
      else:
        out_rows, in_rows = _rows_reached(cell[0], "out_embedding"), _rows_reached(cell[0], "embedding")
        out_text = every_row if kind == "full" else (f"{out_rows:,.0f}" if out_rows else "—")
        in_text = f"{in_rows:,.0f}" if in_rows else "the batch's distinct words"
      ms = speed.get(kind) if tying == "tied" else None  # the bench times the tied config (the study's cells)
      ms_text = (f"{statistics.median(ms):.1f}" + (f" (×{statistics.median(ms) / full_ms:.2f})" if full_ms else "")
                 if ms else "—")
      rho = table4.get(kind)
      rho_text = ("" if not rho else f"{rho['in_tied']:.3f} / {rho['out_tied']:.3f}" if tying == "tied"
                  else f"{rho['in_out']:.3f}")
      lines.append(f"| {label} | {tying} | {', '.join(str(r['seed']) for r in cell)} "
                   f"| {_cell([r['valid_ppl'] for r in cell])} | {_cell(tests)} | {gain} | {out_text} | {in_text} "
                   f"| {ms_text} | {rho_text} |")
  if len(lines) == 2:
    lines.append("| no finished run yet | | | | | | | | | |")
  return "\n".join(lines)


def softmax_provenance(runs: dict[tuple[str, str], list[dict]], name: str,
                       study: SoftmaxStudy = SOFTMAX_STUDIES["softmax_study"]) -> str:
  lines = []
  for (kind, tying), cell in sorted(runs.items()):
    for r in cell:
      if kind == "full":
        lines.append(f"- full softmax, {tying}: `results/ptb_table6/{r['_dir']}` (Table 6's run; its record there)")
        continue
      host = r.get("host") or {}
      commit = (r.get("versions") or {}).get("wt_jax_commit") or "not recorded"
      lines.append(
          f"- `{r['_dir']}`: `python -m experiments.ptb --config=configs/{r['config']}.py"
          f"{study.flags} --config.softmax.kind={r['softmax']}{softmax_cell(r)[2]} "
          f"--config.seed={r['seed']} --workdir=runs/{name}/{r['_dir']}` — commit `{commit}`, machine: "
          f"{host.get('cpu', '?')}, {host.get('cpu_count', '?')} cores; {r['epochs']:.0f} epochs, "
          f"{r['wall_s'] / 60:.0f} min wall, {r['train_tokens_per_s']:,.0f} train tokens/s (two runs side by side)")
  return "\n".join(lines) if lines else "No finished run yet."


def build_softmax_study(name: str, out_root: Path, runs_dir: Path | None = None, readme: Path | None = None) -> str:
  """results/<name>/ for one corpus of the softmax study (SOFTMAX_STUDIES): import (optionally) its runs; the
  table from them, Table 6's full-softmax runs (PTB), the bench record (bench.jsonl) and the Table 4
  correlations (embeddings_<kind>/tables.json)."""
  study = SOFTMAX_STUDIES[name]
  report_dir = _report_dir(name, out_root, runs_dir)
  runs = load_softmax_runs(report_dir, out_root, study)
  bench_file = report_dir / "bench.jsonl"
  bench = [json.loads(l) for l in bench_file.read_text().splitlines() if l.strip()] if bench_file.exists() else []
  table4 = {}
  lm_row = f"LM ({study.dataset})"
  full_tables = [("full", out_root / "embeddings" / "ptb" / "tables.json")] if study.table6_baseline else []
  for kind, path in [*full_tables, *[(k, report_dir / f"embeddings_{k}" / "tables.json")
                                     for k in {key for key, _ in runs if key != "full"}]]:
    if path.exists():
      table4[kind] = json.loads(path.read_text())["table4"][lm_row]
  tab = softmax_table(runs, bench, table4, study)
  if study.table6_baseline:
    lead = ("Press & Wolf's small model (Table 6: 2 × 200 LSTM, no dropout, 13 epochs) on PTB, trained with each "
            "softmax approximation of `wt_jax/softmax.py` (sampled and NCE: K = 1,000 candidates per step from the "
            "log-uniform proposal; class: 100 √-frequency bins), evaluated with exact probabilities by the batch-1 "
            "test protocol. The full-softmax rows are Table 6's runs. Rows with a gradient: the mean per step over "
            "training (`rows/grad/...` in each run's curve). ms/step: `bench.jsonl`, the median over interleaved "
            "rounds of `configs/small_tied.py`. ρ: Table 4's correlations of all pairwise cosine distances between "
            "the untied model's input (In) or output (Out) matrix and the tied matrix (the full row: "
            "`results/embeddings/ptb`, seed-1 runs).")
  else:
    lead = (f"Press & Wolf's small model (Table 6: 2 × 200 LSTM, no dropout, 13 epochs) on {study.corpus} "
            f"({study.vocab:,} words), trained with a softmax approximation of `wt_jax/softmax.py`, evaluated with "
            "exact probabilities by the batch-1 test protocol. No full-softmax pair was trained on this corpus. "
            "Rows with a gradient: the mean per step over training (`rows/grad/...` in each run's curve). ρ: Table "
            "4's correlations of all pairwise cosine distances between the untied model's input (In) or output "
            "(Out) matrix and the tied matrix. The question and the reading: `results/softmax_study/README.md`.")
  sampled = sorted({(t["sampled_words"], t["sample_seed"]) for t in table4.values() if t.get("sampled_words")})
  if sampled:
    lead += (" ρ here is over the pairs among a uniform random sample of the words (`experiments.embeddings "
             "--table4_words`): " + ", ".join(f"{n:,} words, seed {seed}" for n, seed in sampled) + ".")
  title = "Beyond the papers: does tying still help when the softmax is approximated?" + (
      "" if study.table6_baseline else f" ({study.corpus})")
  _write(name, report_dir, readme, title, lead, tab, None, "", softmax_provenance(runs, name, study),
         "Runs and commands")
  return tab


OTHER_REPORTS = {"tpu_memory": build_tpu_memory, **{name: build_softmax_study for name in SOFTMAX_STUDIES}}


def main(argv):
  names = [*REPORTS, *NMT_REPORTS, *OTHER_REPORTS]
  if len(argv) != 2 or argv[1] not in names:
    raise app.UsageError(f"usage: python -m experiments.report {{{','.join(names)}}} [--runs=DIR]")
  builder = build if argv[1] in REPORTS else build_nmt if argv[1] in NMT_REPORTS else OTHER_REPORTS[argv[1]]
  tab = builder(argv[1], Path(_OUT.value), Path(_RUNS.value) if _RUNS.value else None,
                Path(_README.value) if _README.value else None)
  print(tab)


if __name__ == "__main__":
  app.run(main)
