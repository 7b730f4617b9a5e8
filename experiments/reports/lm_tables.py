"""The language-model paper tables (Press & Wolf's Tables 5, 6 and 7, Inan et al.'s small PTB rows of Table 1,
the feed-forward and Transformer studies): one ReportSpec per page, its table beside the paper's values, the
validation curves, each run's provenance."""
from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

from experiments.reports.pages import _report_dir, _write
from experiments.reports.records import ReportError, differences, seeds_cell, load_runs

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
  comparisons: tuple[tuple[str, str], ...] = ()  # (config a, config b): the page reads b's mean minus a's


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

# What Press & Wolf's small-model tables (6 and 7) read: WT and PR against the untied model, PR against WT, WT + PR
# against WT.
SMALL_COMPARISONS = (("small", "small_tied"), ("small", "small_pr"), ("small_tied", "small_pr"),
                     ("small_tied", "small_tied_pr"))

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
            "(`wt_jax/data/bbc.py`: an 80/10/10 split by article within each category, the 9,998 most frequent "
            "training words with `<unk>` and `<eos>`). Perplexities over different vocabularies and test articles measure different "
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
        ),
        comparisons=SMALL_COMPARISONS),
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
        dataset="bbc", runs="runs/bbc", comparable=False, note=_paper_table7(), comparisons=SMALL_COMPARISONS),
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
        ), runs="runs/ffnn",
        comparisons=(("nnlm", "nnlm_tied"), ("nnlm", "nnlm_tied_proj"), ("lbl_untied", "lbl"))),
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
        comparisons=tuple((f"inan_small_vd{s}", f"inan_small_{v}{s}") for s in ("_keep_s2", "_keep")
                          for v in ("al", "re", "real")),
        note="App. A: `configs/inan.py:small,V` (Appendix A's lr 1, ×0.9 per epoch after epoch 5, bptt 35, "
             "clip 5, keep 0.7, as a reimplementation transcribes them; ours: 40 epochs, the AL's τ and γ (see the text) and "
             "the AL target ỹ fixed as the paper defines it, except in +REAL, whose gradient runs through ỹ: BUILD_NOTES §18). Retrained: a second training session from the first "
             "one's final parameters with the schedule restarted (footnote 4; `bash experiments/studies/inan_table1.sh`). "
             "Earlier recipe: `configs/inan.py:small,V,ptb,gal` (Gal's schedule, drop 0.5, bptt 20, the AL target's gradient "
             "on in +AL and +REAL), for comparison."),
    # Press & Wolf (EACL 2017), Table 5: the large (1500-unit) LSTM with Zaremba's dropout, the variational
    # ("Bayesian") dropout LSTM of Gal (2015), and Zilly et al.'s RHN, each untied and tied, on PTB. The table
    # has one tied BD row and the text says it was run with and without weight decay; both readings are rows
    # here, each beside the same paper values. Runs need an accelerator (experiments/gpu/run_queue.py); their
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
        comparisons=(("large", "large_tied"), ("large_bd_wd", "large_bd_wd_tied"), ("rhn", "rhn_tied")),
        note="Trained on one GPU (`experiments/gpu/run_queue.py`, one window of about 15 minutes of device time "
             "per run; the device, versions and the window's decisions are in `results/table5/gpu_windows/`). "
             "Float32 matmuls at TF32 precision unless the command says `float32`: in true float32 the large "
             "LSTM took 24–25 ms per step on an H200 with two runs sharing it, too slow for a 55-epoch run in "
             "one window (BUILD_NOTES §21). Our train column is the running training perplexity with dropout "
             "on; where a run also measured the training text without dropout (`config.eval_train`, on for the "
             "`large_bd*` configs) that value follows in brackets: the paper's BD train values appear to be that "
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
        dataset=dataset, runs=f"runs/transformer{suffix}", comparable=False,
        comparisons=tuple((f"transformer_{a}{suffix}", f"transformer_{b}{suffix}") for a, b in (
            ("untied_none", "tied_none"), ("untied_sqrt_d", "tied_sqrt_d"), ("untied_logits", "tied_logits"),
            ("untied_none", "untied_sqrt_d"), ("tied_none", "tied_sqrt_d"), ("tied_t5", "tied_t5_steps"),
            ("tied_none", "tied_t5_steps"), ("tied_sqrt_d", "tied_t5_steps"), ("tied_none", "tied_projection_none"))))
       for dataset, label, suffix, cells in (("ptb", "PTB", "", TRANSFORMER_CELLS),
                                              ("wikitext2", "WikiText-2", "_wikitext2", TRANSFORMER_WT2_CELLS))},
}


def _train_cell(runs: list[dict]) -> str:
  """The running training perplexity (dropout on) of the runs, then, if every run also scored the training
  text without dropout (`train_ppl_eval`), that in brackets."""
  cell = seeds_cell([r["train_ppl"] for r in runs])
  if all("train_ppl_eval" in r for r in runs):
    cell += f" (no dropout: {seeds_cell([r['train_ppl_eval'] for r in runs])})"
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
        f"| {_paper(row.valid)} / {seeds_cell([r['valid_ppl'] for r in runs])} "
        f"| {_paper(row.test)} / {seeds_cell(tests)} | {delta} |")
  return "\n".join(lines)


def spread_readings(spec: ReportSpec, by_config: dict[str, list[dict]]) -> str:
  """Markdown: each of the spec's comparisons whose two rows have runs, b's mean minus a's in valid and test
  perplexity, each read against twice the larger seed sd of the two rows (`records.differences`)."""
  labels = {row.config: row.label for row in spec.rows}
  lines = []
  for a, b in spec.comparisons:
    ra, rb = by_config.get(a, []), by_config.get(b, [])
    if not ra or not rb:
      continue
    seeds = lambda runs: ", ".join(str(r["seed"]) for r in runs)
    text = differences(*({split: [r[f"{split}_ppl"] for r in runs] for split in ("valid", "test")}
                         for runs in (ra, rb)))
    lines.append(f"- {labels[b]} − {labels[a]} (seeds {seeds(rb)} / {seeds(ra)}): {text}.")
  if not lines:
    return ""
  return ("Against the seed spread (each difference of two rows' means in perplexity points, against twice the "
          "larger sample sd of the two rows; a row of one seed has none):\n\n" + "\n".join(lines))


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

def build(name: str, out_root: Path, runs_dir: Path | None = None, readme: Path | None = None) -> str:
  """Import (optionally), then write the report; returns the table."""
  spec = REPORTS[name]
  report_dir = _report_dir(name, out_root, runs_dir)
  by_config = load_runs(report_dir, spec.dataset)
  unknown = sorted(set(by_config) - {row.config for row in spec.rows})
  if unknown:
    raise ReportError(f"{report_dir} holds runs of configs not in report {name!r}: {unknown}")
  tab = "\n\n".join(part for part in (table(spec, by_config), spread_readings(spec, by_config), spec.note) if part)
  png = figure(spec, by_config, report_dir / "valid_curves.png")
  lead = (f"Paper: {spec.source}. Ours: test perplexity is the batch-1 protocol (`test_ppl`); several seeds "
          f"are shown as mean ± their sample standard deviation (each seed).")
  _write(name, report_dir, readme, spec.title, lead, tab, png, "validation curves",
         provenance(name, spec, by_config), "Runs, commands, code commits and machine")
  return tab
