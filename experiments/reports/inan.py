"""Inan, Khosravi & Socher (ICLR 2017), Tables 1 and 2 on one page, paper beside ours, and their Figure 2.

Table 1: the VD-LSTM with the augmented loss (AL), reused embeddings (RE) and both (REAL) at three sizes on PTB
and two on WikiText-2; Table 2: the small networks on each half of WikiText-2's training text
(`wt_jax/data/wikitext2.py`). Each row is `configs/inan.py:SIZE,VARIANT,CORPUS` (Appendix A's settings); its
runs are found by the name that config gives them. The small PTB rows stay where they were trained and
reported, results/inan_ptb_table1 (Appendix A's first session and footnote 4's second); every other row's runs
are imported into this page's own folder. Figure 2 redraws the paper's: validation perplexity during training
on PTB, (a) small, (b) large, from the runs' per-epoch records.
"""
from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

from configs import inan as inan_config
from experiments.reports.lm_tables import INAN_SMALL, PaperRow, ReportSpec, provenance, valid_axis_limits
from experiments.reports.pages import _report_dir, _write
from experiments.reports.records import ReportError, against_spread, load_runs, seeds_cell

SMALL_PTB_HOME = "inan_ptb_table1"  # results/<this>: the small PTB runs (both sessions)
VARIANT_LABELS = {"vd": "VD-LSTM", "al": "+ AL", "re": "+ RE", "real": "+ REAL"}
CORPUS_LABELS = {"ptb": "PTB", "wikitext2": "WikiText-2", "wikitext2_half1": "WikiText-2, first half",
                 "wikitext2_half2": "WikiText-2, second half"}
SIZE_LABELS = {"small": "small (200)", "medium": "medium (650)", "large": "large (1500)"}


@dataclasses.dataclass(frozen=True)
class Block:
  """One network size on one corpus: the paper's four rows as printed, (variant, valid, test)."""
  table: int  # the paper's table: 1 or 2
  corpus: str  # config.dataset
  size: str
  paper: tuple[tuple[str, float, float], ...]


# Inan et al. (ICLR 2017), Tables 1 and 2 as printed (valid / test perplexity; the paper gives no large
# WikiText-2 row: "computational resources were insufficient", its footnote 5).
BLOCKS = (
    Block(1, "ptb", "small", tuple((v, valid, test) for v, _, valid, test in INAN_SMALL)),
    Block(1, "ptb", "medium", (("vd", 82.0, 77.7), ("al", 77.4, 74.7), ("re", 77.1, 73.9), ("real", 75.7, 73.2))),
    Block(1, "ptb", "large", (("vd", 76.8, 72.6), ("al", 74.5, 71.2), ("re", 72.5, 69.0), ("real", 71.1, 68.5))),
    Block(1, "wikitext2", "small",
          (("vd", 112.2, 105.9), ("al", 110.3, 103.8), ("re", 106.1, 100.5), ("real", 105.6, 98.9))),
    Block(1, "wikitext2", "medium",
          (("vd", 100.2, 95.3), ("al", 98.8, 93.1), ("re", 92.3, 87.7), ("real", 91.5, 87.0))),
    Block(2, "wikitext2_half1", "small",
          (("vd", 159.1, 148.0), ("al", 153.0, 142.5), ("re", 152.4, 141.9), ("real", 149.3, 140.6))),
    Block(2, "wikitext2_half2", "small",
          (("vd", 163.19, 148.6), ("al", 156.4, 143.7), ("re", 152.5, 140.9), ("real", 150.5, 138.4))),
)
# The small PTB rows' sessions (results/inan_ptb_table1): (config-name suffix, label); the paper reports the second.
SESSIONS = (("", "App. A, first session"), ("_s2", "App. A, retrained (footnote 4)"))


@dataclasses.dataclass(frozen=True)
class Row:
  block: Block
  variant: str
  config: str  # the runs' config name (results.json "config")
  session: str  # the small PTB rows: which training session ("": one session)
  valid: float  # the paper's
  test: float

  @property
  def home(self) -> str:
    """The results folder holding this row's runs."""
    return SMALL_PTB_HOME if (self.block.corpus, self.block.size) == ("ptb", "small") else ""

  @property
  def flag(self) -> str:
    corpus = "" if self.block.corpus == "ptb" else f",{self.block.corpus}"
    return f"configs/inan.py:{self.block.size},{self.variant}{corpus}"


def rows() -> list[Row]:
  """Every row of the page, in the paper's order; two per variant for the small PTB networks (both sessions)."""
  out = []
  for block in BLOCKS:
    for variant, valid, test in block.paper:
      name = inan_config.get_config(f"{block.size},{variant},{block.corpus}").name
      sessions = SESSIONS if (block.corpus, block.size) == ("ptb", "small") else (("", ""),)
      out += [Row(block, variant, name + suffix, label, valid, test) for suffix, label in sessions]
  return out


def load_inan_runs(report_dir: Path, out_root: Path) -> dict[str, list[dict]]:
  """config name → its runs (results.json with `_dir` and `_valid_curve`, sorted by seed): the small PTB rows'
  from results/inan_ptb_table1, the others' from `report_dir`, where every run must be one of this page's
  rows (not a small PTB one) on its row's corpus."""
  expected = {row.config: row for row in rows()}
  by_config: dict[str, list[dict]] = {}
  home = out_root / SMALL_PTB_HOME
  if home.is_dir():
    small = load_runs(home, "ptb")
    by_config.update({c: small[c] for c in expected if expected[c].home and c in small})

  def check(path: Path, r: dict) -> None:
    row = expected.get(r["config"])
    if row is None or row.home:
      where = f"results/{SMALL_PTB_HOME}" if row is not None else "no row of this page"
      raise ReportError(f"{path} is a run of {r['config']!r}: its place is {where}.")
    if r.get("dataset", "ptb") != row.block.corpus:
      raise ReportError(f"{path} is a run on {r.get('dataset', 'ptb')!r}, but {r['config']!r} is a "
                       f"{row.block.corpus!r} row.")

  by_config.update(load_runs(report_dir, dataset=None, check=check))
  return by_config


def al_settings() -> str:
  """The AL's τ and γ (α = γτ, Inan Appendix A) that configs/inan.py gives the +AL rows, per corpus: their values
  are blank in our text of the paper and are not the transcription's (BUILD_NOTES §29)."""
  ptb, wt2 = (inan_config.get_config(f"small,al,{corpus}").al for corpus in ("ptb", "wikitext2"))
  tau = f"{ptb.tau:g}" + (f" (PTB) / {wt2.tau:g} (WikiText-2)" if wt2.tau != ptb.tau else "")
  return (f"the AL's τ = {tau} and γ = {ptb.alpha / ptb.tau:g} (PTB) / {wt2.alpha / wt2.tau:g} "
          "(WikiText-2), whose source is not recorded (BUILD_NOTES §29)")


def order_line(test: dict[str, list[float]], fmt=lambda x: f"{x:.2f}", paper: bool = False) -> str:
  """The paper's claims on one size and corpus, checked on test perplexities (variant → its values: the paper's
  one, with `paper`, or ours, one a seed): AL and RE each below the VD-LSTM, REAL the lowest of the four; then the four by their
  mean, each as `fmt` writes it (ours: two decimals, since the table's one can hide an order). With seeds a claim is
  read against them (`records.against_spread`): a difference within twice the larger seed sd is "within the
  spread", neither yes nor no, and two neighbours in the order that close are joined by ≈, not <; a side of one seed
  gives no verdict."""
  if len(test) < len(VARIANT_LABELS):
    return f"not run yet ({len(test)} of {len(VARIANT_LABELS)} rows)"
  mean = {v: statistics.mean(x) for v, x in test.items()}
  seeds = min(len(x) for x in test.values())

  def below(a: str, b: str) -> str:  # whether a's test perplexity is below b's
    if paper:  # (its numbers as printed: no seeds)
      return "yes" if mean[a] < mean[b] else "no"
    diff, words = against_spread(test[b], test[a])
    if words.startswith("one seed"):
      return "not read (one seed on a side)"
    return words if words.startswith("within") else ("yes" if diff < 0 else "no")

  ranked = sorted(test, key=mean.get)
  order = f"{ranked[0].upper()} {fmt(mean[ranked[0]])}"
  for a, b in zip(ranked, ranked[1:]):
    close = seeds > 1 and against_spread(test[a], test[b])[1].startswith("within")
    order += f" {'≈' if close else '<'} {b.upper()} {fmt(mean[b])}"
  real = [below("real", v) for v in ("vd", "al", "re")]
  lowest = ("yes" if all(r == "yes" for r in real) else "no" if "no" in real else
            "within the spread" if any(r.startswith("within") for r in real) else real[0])
  return f"AL < VD: {below('al', 'vd')}, RE < VD: {below('re', 'vd')}, REAL lowest: {lowest} ({order})"


def seeds_line(by_variant: dict[str, tuple[list[int], float | None]]) -> str:
  """The seeds behind each variant's mean (variant → (seeds, sample sd of their test perplexities or None)), so
  an order claim can be read against the seed spread: 'seeds: VD 0, AL 0 and 1 (test sd 0.07), …'."""
  def one(v):
    ids, sd = by_variant[v]
    return (f"{v.upper()} {', '.join(map(str, ids[:-1]))}{' and ' if len(ids) > 1 else ''}{ids[-1]}"
            + (f" (test sd {sd:.2f})" if sd is not None else ""))
  return "seeds: " + ", ".join(one(v) for v in VARIANT_LABELS)


def table(by_config: dict[str, list[dict]]) -> str:
  """Markdown: one line per row (paper beside ours, mean over seeds), then the paper's order claims per size
  and corpus (and session), on the paper's values and on ours."""
  lines = ["| table | corpus | network | model | parameters (ours) | seeds | valid paper / ours | test paper / ours "
           "| test Δ |", "|---|---|---|---|---|---|---|---|---|"]
  claims: dict[tuple, dict[str, list[float]]] = {}
  seeds: dict[tuple, dict[str, tuple[list[int], float | None]]] = {}  # the same keys → (seeds, test sd)
  for row in rows():
    b, runs = row.block, by_config.get(row.config, [])
    model = VARIANT_LABELS[row.variant] + (f", {row.session}" if row.session else "")
    head = f"| {b.table} | {CORPUS_LABELS[b.corpus]} | {SIZE_LABELS[b.size]} | {model}"
    if not runs:
      lines.append(f"{head} | — | not run yet | {row.valid} / — | {row.test} / — | — |")
      continue
    tests = [r["test_ppl"] for r in runs]
    claims.setdefault((b.table, b.corpus, b.size, row.session), {})[row.variant] = tests
    seeds.setdefault((b.table, b.corpus, b.size, row.session), {})[row.variant] = (
        [r["seed"] for r in runs], statistics.stdev(tests) if len(tests) > 1 else None)
    lines.append(f"{head} | {', '.join(f'{s:,}' for s in sorted({r['num_params'] for r in runs}))} "
                 f"| {', '.join(str(r['seed']) for r in runs)} "
                 f"| {row.valid} / {seeds_cell([r['valid_ppl'] for r in runs])} "
                 f"| {row.test} / {seeds_cell(tests)} | {statistics.mean(tests) - row.test:+.1f} |")
  lines += ["", "The paper's claims on each size and corpus (test perplexity; ours: the mean over seeds): AL and RE "
            "each improve on the VD-LSTM, REAL is the best.", ""]
  for b in BLOCKS:
    where = f"Table {b.table}, {CORPUS_LABELS[b.corpus]}, {b.size}"
    lines.append(f"- {where}, paper: {order_line({v: [test] for v, _, test in b.paper}, str, paper=True)}")
    for session in ([s for _, s in SESSIONS] if (b.corpus, b.size) == ("ptb", "small") else [""]):
      key = (b.table, b.corpus, b.size, session)
      ours = claims.get(key, {})
      lines.append(f"- {where}, ours{f', {session}' if session else ''}: {order_line(ours)}"
                   + (f"; {seeds_line(seeds[key])}" if len(ours) == len(VARIANT_LABELS) else ""))
  return "\n".join(lines)


def curves(row: Row, by_config: dict[str, list[dict]]) -> list[tuple[int, list, list, int]]:
  """Row `row`'s validation curves, one per seed: (seed, epochs, values, the epoch after which a second session
  begins; 0: one session). A small PTB row of the first session is drawn through its second session (footnote
  4), whose epochs follow the first's; a second session without its first is drawn alone."""
  out = []
  for r in by_config.get(row.config, []):
    if not r["_valid_curve"]:
      continue
    xs, ys = map(list, zip(*r["_valid_curve"]))
    if row.session == SESSIONS[1][1] and any(f["seed"] == r["seed"] and f["_valid_curve"]
                                            for f in by_config.get(row.config.removesuffix("_s2"), [])):
      continue  # drawn with its first session
    second = [s for s in by_config.get(row.config + "_s2", []) if s["seed"] == r["seed"] and s["_valid_curve"]]
    restart = 0
    if row.session == SESSIONS[0][1] and second:
      restart = xs[-1]
      sx, sy = zip(*second[0]["_valid_curve"])
      xs, ys = xs + [x + restart for x in sx], ys + list(sy)
    out.append((r["seed"], xs, ys, restart))
  return out


def figure2(by_config: dict[str, list[dict]], png: Path) -> Path | None:
  """The paper's Figure 2 from our curves: validation perplexity per epoch on PTB, (a) small, (b) large; one
  colour per variant, the first seed solid and others dashed, the paper's final validation value dotted; the
  small rows through both sessions. A panel with no run says so; no run at all: no figure."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
  drawn = False
  for ax, size, letter in zip(axes, ("small", "large"), "ab"):
    lows, restarts = [], set()
    for row in rows():
      if (row.block.corpus, row.block.size) != ("ptb", size):
        continue
      colour = f"C{list(VARIANT_LABELS).index(row.variant)}"
      for j, (seed, xs, ys, restart) in enumerate(curves(row, by_config)):
        ax.plot(xs, ys, color=colour, linestyle="-" if j == 0 else "--", linewidth=1.2,
                label=f"{VARIANT_LABELS[row.variant]} (seed {seed})")
        lows.append(min(ys))
        restarts |= {restart} - {0}
        if j == 0:
          ax.axhline(row.valid, color=colour, linestyle=":", linewidth=1)
          lows.append(row.valid)
    ax.set_title(f"({letter}) {SIZE_LABELS[size]} on PTB", fontsize=9)
    if not lows:
      ax.text(0.5, 0.5, "no run yet", transform=ax.transAxes, ha="center", va="center")
      ax.set_xticks([])
      ax.set_yticks([])
      continue
    drawn = True
    for restart in restarts:
      ax.axvline(restart + 0.5, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xlabel("epoch" + (" (after the grey line: the second session, footnote 4)" if restarts else ""))
    ax.set_ylabel("validation perplexity")
    ax.set_ylim(*valid_axis_limits(lows, ax.get_ylim()[1]))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
  if not drawn:
    plt.close(fig)
    return None
  fig.suptitle("Inan et al. (2017), Figure 2 from our runs (dotted: the paper's final validation perplexity, "
               "Table 1)", fontsize=9)
  fig.tight_layout()
  fig.savefig(png, dpi=100)
  plt.close(fig)
  return png


def build_inan(name: str, out_root: Path, runs_dir: Path | None = None, readme: Path | None = None) -> str:
  """Import (optionally) runs into results/<name>/, then write the page: Tables 1 and 2, Figure 2, the runs."""
  report_dir = _report_dir(name, out_root, runs_dir)
  by_config = load_inan_runs(report_dir, out_root)
  tab = table(by_config)
  png = figure2(by_config, report_dir / "figure2.png")
  lead = ("Paper: Inan, Khosravi & Socher, Tying Word Vectors and Word Classifiers, ICLR 2017, Tables 1 and 2 "
          "(valid / test perplexity; no large WikiText-2 row, its footnote 5). Ours: "
          "`configs/inan.py:SIZE,VARIANT[,CORPUS]`: Appendix A's learning rate, decay schedule, bptt, clip and "
          "dropout as transcribed in ../shared/papers/README.md, its \"dropout probabilities\" read as keep "
          f"probabilities; ours, not from that transcription: {al_settings()}, 40 epochs, Zaremba's "
          "initialisation per size and +REAL's gradient through the AL target (see the config); test perplexity by the batch-1 protocol (`test_ppl`); several seeds are shown as mean ± their "
          "sample standard deviation (each seed). The small PTB rows are the Appendix A runs of "
          f"[results/{SMALL_PTB_HOME}](../{SMALL_PTB_HOME}/README.md), both training sessions (the paper reports "
          "the second, its footnote 4); the other rows' runs are in this folder. Table 2's corpora are the first "
          "and second halves of WikiText-2's training text, cut at the article boundary nearest the middle, with "
          "WikiText-2's validation and test texts and vocabulary (`wt_jax/data/wikitext2.py`).")
  own = [row for row in rows() if not row.home]
  # lm_tables.provenance writes each run's command, commit, machine (the card) and wall time from a ReportSpec
  spec = ReportSpec(title="", source="", rows=tuple(PaperRow(r.config, r.config, "—", None, r.valid, r.test, r.flag)
                                                    for r in own),
                    command=("python -m experiments.ptb --config={flag} --config.seed={seed} "
                             "--config.matmul_precision={matmul_precision} --workdir={workdir}"))
  small_runs = f"[results/{SMALL_PTB_HOME}](../{SMALL_PTB_HOME}/README.md#runs)"
  prov = (f"The small PTB runs: their records on {small_runs}.\n\n"
          + (provenance(name, spec, {r.config: by_config.get(r.config, []) for r in own})
             or "No run of the other rows yet."))
  _write(name, report_dir, readme, "Inan et al. (2017), Tables 1 and 2: VD-LSTM with AL, RE and REAL, all sizes",
         lead, tab, png, "Figure 2 from our runs", prov, "Runs, commands, code commits and machines")
  return tab
