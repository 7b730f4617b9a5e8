"""Softmax approximations over the word matrix (wt_jax/softmax.py; not a paper table): per approximation,
tied and untied, perplexities, the rows a step reaches, speed and Table 4's correlations."""
from __future__ import annotations

import dataclasses
import datetime
import json
import shutil
import statistics
from pathlib import Path

from experiments.reports.pages import _report_dir, _write
from experiments.reports.records import CURVE, ReportError, json_record, load_runs, read_results, seeds_cell
import wt_jax.softmax as softmax
import wt_jax.files as files

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


def _curve_mean(run: dict, key: str) -> float | None:
  """The mean over the run's epochs of a per-step mean in its curve (`rows/grad/...`, `norm/grad/...`): the mean
  per step, the epochs being equally long."""
  values = [rec[key] for rec in run["_curve"] if key in rec]
  return statistics.mean(values) if values else None


def _rows_reached(run: dict, matrix: str) -> float | None:
  """The mean over the run's epochs of the rows of `matrix` whose gradient was non-zero per step."""
  return _curve_mean(run, f"rows/grad/words/{matrix}")


# Runs recorded before results.json named their approximation's settings (`softmax_settings`), by recorded commit
# and kind. Their command (experiments/studies/softmax_study.sh at that commit) passes only --config.softmax.kind and
# --config.seed, so they ran with configs/lm_base.py's defaults at that commit (`git show
# <commit>:configs/lm_base.py`); the rows their steps reached agree (BUILD_NOTES §23).
UNRECORDED_SOFTMAX_SETTINGS = {
    ("95e93b48e5361abddb101a6f629e9f71b1f1d9b7", "sampled"): {"num_samples": 1000, "proposal": "log_uniform"},
    ("1b93fb5aec78502a7d2114cb85926a031fa70d61", "nce"): {"num_samples": 1000, "proposal": "log_uniform"},
    ("941e241f0c95b5b354f770a56aef74ffd4b83eca", "class"): {"num_classes": 100, "class_power": 0.5},
    ("577ed2909089f4ea34d1e0b53c731d15c68cfa83", "class"): {"num_classes": 100, "class_power": 0.5},
}
STUDY_PROPOSAL = {"proposal": "log_uniform", "num_samples": 1000}  # the study's sampled/NCE cells


def softmax_settings_of(r: dict) -> tuple[dict, str]:
  """(settings, where they come from) of a study run: its `softmax_settings`, or for a run that predates them
  UNRECORDED_SOFTMAX_SETTINGS by its commit. An approximation run with neither is refused: its K, proposal or
  bins are unknown, and a default is not evidence."""
  kind = r.get("softmax", "full")
  if kind == "full" or r.get("softmax_settings"):
    return r.get("softmax_settings") or {}, "recorded"
  commit = (r.get("versions") or {}).get("wt_jax_commit") or ""
  known = UNRECORDED_SOFTMAX_SETTINGS.get((commit, kind))
  if known is None:
    raise ReportError(f"{r.get('_dir', 'a run')}: softmax {kind!r} without softmax_settings in results.json, from "
                     f"commit {commit or '(not recorded)'} that report.UNRECORDED_SOFTMAX_SETTINGS does not know: "
                     "its settings are unknown.")
  return known, (f"not recorded: commit {commit[:7]}'s configs/lm_base.py defaults, the command setting only the "
                 "kind and the seed")


def candidates_text(settings: dict, vocab: int) -> str:
  """"K = 1,000 draws (≈ 537 distinct)": K draws with replacement reach fewer distinct rows; their expected number
  (`softmax.expected_distinct`) needs only V for the log-uniform proposal (a unigram one needs the counts)."""
  k = settings["num_samples"]
  if settings.get("proposal") != "log_uniform":
    return f"K = {k:,} draws"
  distinct = softmax.expected_distinct(softmax.proposal_log_probs("log_uniform", vocab), k)
  return f"K = {k:,} draws (≈ {distinct:,.0f} distinct)"


def softmax_cell(r: dict, vocab: int = 10_000) -> tuple[str, str, str]:
  """(cell key, row label, the command's extra flags) of a study run: its softmax kind, or for a sampled/NCE
  run with another proposal or K than the study's (log-uniform, K = 1,000) a cell of its own."""
  kind, st = r.get("softmax", "full"), softmax_settings_of(r)[0]
  label = dict(SOFTMAX_KINDS)[kind]
  if kind not in ("sampled", "nce") or {k: st[k] for k in STUDY_PROPOSAL} == STUDY_PROPOSAL:
    return kind, label, ""
  power = st.get("unigram_power")
  return (f"{kind}_{st['proposal']}_k{st['num_samples']}",
          f"{label}, {st['proposal'].replace('_', '-')} proposal" + (f" (power {power:g})" if power is not None else "")
          + f", {candidates_text(st, vocab)}",
          f" --config.softmax.proposal={st['proposal']}"
          + (f" --config.softmax.unigram_power={power:g}" if power is not None else "")
          + f" --config.softmax.num_samples={st['num_samples']}")


def load_softmax_runs(report_dir: Path, out_root: Path, study: SoftmaxStudy = SOFTMAX_STUDIES["softmax_study"]
                      ) -> dict[tuple[str, str], list[dict]]:
  """(softmax kind, tying) → results.json of the study's runs (sorted by seed), each with its epoch records;
  on PTB the full-softmax cells from Table 6's committed runs (marked `_table6`), and a full-softmax run among the
  study's own is refused there: it would stand beside Table 6's unseen. Every run must be on the study's
  corpus."""
  runs: dict[tuple[str, str], list[dict]] = {}
  for path in sorted(report_dir.glob("*/results.json")):
    r = read_results(path, ("config", "seed"))
    if r.get("dataset", "ptb") != study.dataset:
      raise ReportError(f"{path} is a run on {r.get('dataset', 'ptb')!r}, but this study is on {study.dataset!r}.")
    if "tying" not in r:
      raise ReportError(f"{path} names no 'tying': not a run of this study.")
    r["_dir"], r["_curve"] = path.parent.name, list(files.read_jsonl(path.parent / CURVE)[0])
    run_json = path.parent / "run.json"  # (runs imported with it: when it started, `softmax_provenance`)
    r["_run"] = json_record(run_json.read_text(), run_json) if run_json.exists() else {}
    kind = softmax_cell(r, study.vocab)[0]
    if kind == "full" and study.table6_baseline:
      raise ReportError(f"{path} is a full-softmax run; this study's full-softmax rows are Table 6's runs "
                        f"(results/ptb_table6): import it there (experiments.report ptb_table6 --runs=...).")
    runs.setdefault((kind, r["tying"]), []).append(r)
  table6 = out_root / "ptb_table6"
  if study.table6_baseline and table6.is_dir():
    by_config = load_runs(table6)
    for tying, config in SOFTMAX_BASELINE.items():
      runs[("full", tying)] = [{**r, "_curve": [], "_run": {}, "_table6": True} for r in by_config.get(config, [])]
  for cell in runs.values():
    cell.sort(key=lambda r: r["seed"])
  return runs


def softmax_table(runs: dict[tuple[str, str], list[dict]], bench: list[dict], table4: dict,
                  study: SoftmaxStudy = SOFTMAX_STUDIES["softmax_study"]) -> str:
  """Markdown: per softmax kind, untied and tied, perplexities, what the tie buys, the rows of each matrix a
  step reaches and its gradient's norm (the first seed's run), the training speed (bench) and Table 4's
  correlations."""
  speed: dict[str, list[float]] = {}
  for rec in bench:
    speed.setdefault(rec.get("softmax", "full"), []).append(rec["train_ms_per_step"])
  lines = ["| training softmax | tying | seeds | valid | test (batch 1) | test: tied − untied | rows of the output "
           "matrix with a gradient, per step | rows of the input matrix, per step | gradient norm per step: output "
           "/ input matrix | train ms/step (bench, tied config; ×full) | Table 4's ρ: (In, Out) untied; (In, Tied) "
           "/ (Out, Tied) tied |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
  full_ms = statistics.median(speed["full"]) if speed.get("full") else None
  extra = {softmax_cell(r, study.vocab)[:2] for cell in runs.values() for r in cell} - set(study.kinds)
  every_row = f"all {study.vocab:,}"
  number = lambda v, fmt: format(v, fmt) if v is not None else "—"
  for kind, label in (*study.kinds, *sorted(extra)):
    for tying in ("untied", "tied"):
      cell = runs.get((kind, tying), [])
      if not cell:
        lines.append(f"| {label} | {tying} | none yet | — | — | — | — | — | — | — | — |")
        continue
      tests = [r["test_ppl"] for r in cell]
      other = runs.get((kind, "untied"), [])
      gain = (f"{statistics.mean(tests) - statistics.mean(r['test_ppl'] for r in other):+.1f}"
              if tying == "tied" and other else "")
      if tying == "tied":
        out_rows, in_rows = _rows_reached(cell[0], "embedding"), None
        out_text = every_row if kind == "full" else (f"{out_rows:,.0f} (one matrix)" if out_rows else "—")
        in_text = "(the same matrix)"
        norm = _curve_mean(cell[0], "norm/grad/words/embedding")
        norm_text = f"{norm:.2f} (one matrix)" if norm is not None else "—"
      else:
        out_rows, in_rows = _rows_reached(cell[0], "out_embedding"), _rows_reached(cell[0], "embedding")
        out_text = every_row if kind == "full" else (f"{out_rows:,.0f}" if out_rows else "—")
        in_text = f"{in_rows:,.0f}" if in_rows else "the batch's distinct words"
        norms = [_curve_mean(cell[0], f"norm/grad/words/{m}") for m in ("out_embedding", "embedding")]
        norm_text = " / ".join(number(v, ".2f") for v in norms) if any(v is not None for v in norms) else "—"
      ms = speed.get(kind) if tying == "tied" else None  # the bench times the tied config (the study's cells)
      ms_text = (f"{statistics.median(ms):.1f}" + (f" (×{statistics.median(ms) / full_ms:.2f})" if full_ms else "")
                 if ms else "—")
      rho = table4.get(kind)
      rho_text = ("" if not rho else f"{rho['in_tied']:.3f} / {rho['out_tied']:.3f}" if tying == "tied"
                  else f"{rho['in_out']:.3f}")
      lines.append(f"| {label} | {tying} | {', '.join(str(r['seed']) for r in cell)} "
                   f"| {seeds_cell([r['valid_ppl'] for r in cell])} | {seeds_cell(tests)} | {gain} | {out_text} | {in_text} "
                   f"| {norm_text} | {ms_text} | {rho_text} |")
  if len(lines) == 2:
    lines.append("| no finished run yet | | | | | | | | | | |")
  return "\n".join(lines)


def seed_gaps(runs: dict[tuple[str, str], list[dict]], study: SoftmaxStudy = SOFTMAX_STUDIES["softmax_study"]
              ) -> str:
  """The tied − untied test gap seed by seed, for every cell with a seed in both tyings and more than one in
  either: "full softmax −4.4 (seed 0), −4.0 (seed 1)". "" when no cell has several seeds."""
  labels = dict((*study.kinds, *{softmax_cell(r, study.vocab)[:2] for cell in runs.values() for r in cell}))
  parts = []
  for kind, label in labels.items():
    untied = {r["seed"]: r["test_ppl"] for r in runs.get((kind, "untied"), [])}
    tied = {r["seed"]: r["test_ppl"] for r in runs.get((kind, "tied"), [])}
    common = sorted(set(untied) & set(tied))
    if common and max(len(untied), len(tied)) > 1:
      parts.append(f"{label} " + ", ".join(f"{tied[s] - untied[s]:+.1f} (seed {s})" for s in common))
  return ("Tied − untied test perplexity seed by seed (the seeds both tyings have): " + "; ".join(parts) + "."
          if parts else "")


def _span(r: dict) -> tuple[float, float] | None:
  """(start, end) in seconds since the epoch of a run imported with its run.json and never resumed, else None."""
  run = r.get("_run") or {}
  if not run.get("started_utc") or run.get("resumes"):
    return None
  start = datetime.datetime.fromisoformat(run["started_utc"].replace("Z", "+00:00")).timestamp()
  return start, start + r["wall_s"]


def concurrency(r: dict, runs: dict[tuple[str, str], list[dict]]) -> str:
  """How a study run shared the machine with the study's other runs, from the runs' run.json (start time) and
  wall time: beside which ones, or none; "not recorded" for a run imported without its run.json."""
  span = _span(r)
  if span is None:
    run = r.get("_run") or {}
    return ("concurrency not recorded (BUILD_NOTES §23)" if not run.get("started_utc")
            else f"started {run['started_utc']}, resumed {len(run['resumes'])}×: concurrency not derived")
  beside = sorted(o["_dir"] for cell in runs.values() for o in cell
                  if o is not r and (other := _span(o)) and other[0] < span[1] and span[0] < other[1])
  return (f"started {r['_run']['started_utc']}, "
          + (f"beside {', '.join(f'`{b}`' for b in beside)}" if beside
             else "no other run of this study with a recorded start beside it"))


def softmax_provenance(runs: dict[tuple[str, str], list[dict]], name: str,
                       study: SoftmaxStudy = SOFTMAX_STUDIES["softmax_study"]) -> str:
  lines = []
  for (kind, tying), cell in sorted(runs.items()):
    for r in cell:
      if r.get("_table6"):
        lines.append(f"- full softmax, {tying}: `results/ptb_table6/{r['_dir']}` (Table 6's run; its record there)")
        continue
      host = r.get("host") or {}
      commit = (r.get("versions") or {}).get("wt_jax_commit") or "not recorded"
      settings, source = softmax_settings_of(r)
      shown = ", ".join(f"{k}={v}" for k, v in settings.items()) or "none"
      lines.append(
          f"- `{r['_dir']}`: `python -m experiments.ptb --config=configs/{r['config']}.py"
          f"{study.flags} --config.softmax.kind={r.get('softmax', 'full')}{softmax_cell(r, study.vocab)[2]} "
          f"--config.seed={r['seed']} --workdir=runs/{name}/{r['_dir']}` — commit `{commit}`, settings: {shown} "
          f"({source}); machine: {host.get('cpu', '?')}, {host.get('cpu_count', '?')} cores; {r['epochs']:.0f} "
          f"epochs, {r['wall_s'] / 60:.0f} min wall, {r['train_tokens_per_s']:,.0f} train tokens/s; "
          f"{concurrency(r, runs)}")
  return "\n".join(lines) if lines else "No finished run yet."


def build_softmax_study(name: str, out_root: Path, runs_dir: Path | None = None, readme: Path | None = None) -> str:
  """results/<name>/ for one corpus of the softmax study (SOFTMAX_STUDIES): import (optionally) its runs, each
  with its run.json (when it started: whether study runs shared the machine); the table from them, Table 6's
  full-softmax runs (PTB), the bench record (bench.jsonl) and the Table 4 correlations
  (embeddings_<kind>/tables.json)."""
  study = SOFTMAX_STUDIES[name]
  report_dir = _report_dir(name, out_root, runs_dir)
  if runs_dir is not None:
    for run in runs_dir.iterdir():
      if (run / "results.json").exists() and (run / "run.json").exists():
        shutil.copy2(run / "run.json", report_dir / run.name / "run.json")
  runs = load_softmax_runs(report_dir, out_root, study)
  bench_file = report_dir / "bench.jsonl"
  bench = [json.loads(l) for l in bench_file.read_text().splitlines() if l.strip()] if bench_file.exists() else []
  table4, full_source = {}, ""
  lm_row = f"LM ({study.dataset})"
  full_tables = [("full", out_root / "embeddings" / "ptb" / "tables.json")] if study.table6_baseline else []
  for kind, path in [*full_tables, *[(k, report_dir / f"embeddings_{k}" / "tables.json")
                                     for k in {key for key, _ in runs if key != "full"}]]:
    if path.exists():
      tables = json.loads(path.read_text())
      table4[kind] = tables["table4"][lm_row]
      if kind == "full":  # which Table 6 runs the full row's matrices are (Table 3 names its source runs)
        full_source = (tables.get("table3") or {}).get("source", "").removeprefix(f"{study.dataset} LM ").strip()
  tab = softmax_table(runs, bench, table4, study)
  common = ("Rows with a gradient and gradient norms (the embedding matrices' L2 norms): the mean per step over "
            "training (`rows/grad/...`, `norm/grad/...` in each run's curve), of the cell's first seed"
            + ("; Table 6's runs did not record them" if study.table6_baseline else "") + ". A cell of several seeds shows the mean ± the seeds' sample standard deviation (each seed), and its tied − untied "
            "gap is between the means. Settings not in a run's results.json come from its commit (the runs "
            "list). ")
  if study.table6_baseline:
    lead = ("Press & Wolf's small model (Table 6: 2 × 200 LSTM, no dropout, 13 epochs) on PTB, trained with each "
            "softmax approximation of `wt_jax/softmax.py` (sampled and NCE: "
            f"{candidates_text(STUDY_PROPOSAL, study.vocab)} per step from the log-uniform proposal, with "
            "replacement; class: 100 √-frequency bins), evaluated with exact probabilities by the batch-1 "
            "test protocol. The full-softmax rows are Table 6's runs. " + common + "ms/step: `bench.jsonl`, the "
            "median over interleaved rounds of `configs/small_tied.py`. ρ: Table 4's correlations of all pairwise "
            "cosine distances between the untied model's input (In) or output (Out) matrix and the tied matrix "
            "(the full row: `results/embeddings/ptb`" + (f", from {full_source}" if full_source else "") + ").")
  else:
    lead = (f"Press & Wolf's small model (Table 6: 2 × 200 LSTM, no dropout, 13 epochs) on {study.corpus} "
            f"({study.vocab:,} words), trained with a softmax approximation of `wt_jax/softmax.py` (K draws per "
            "step with replacement), evaluated with exact probabilities by the batch-1 test protocol. "
            + ("The full-softmax rows are this study's runs on this corpus. " if any(k == "full" for k, _ in runs)
               else "No full-softmax pair was trained on this corpus. ") + common + "ρ: Table 4's correlations of all "
            "pairwise cosine distances between the untied model's input (In) or output (Out) matrix and the tied "
            "matrix. The question and the reading: `results/softmax_study/README.md`.")
  sampled = sorted({(t["sampled_words"], t["sample_seed"]) for t in table4.values() if t.get("sampled_words")})
  if sampled:
    lead += (" ρ here is over the pairs among a uniform random sample of the words (`experiments.embeddings "
             "--table4_words`): " + ", ".join(f"{n:,} words, seed {seed}" for n, seed in sampled) + ".")
  gaps = seed_gaps(runs, study)
  title = "Beyond the papers: does tying still help when the softmax is approximated?" + (
      "" if study.table6_baseline else f" ({study.corpus})")
  _write(name, report_dir, readme, title, lead, tab + (f"\n\n{gaps}" if gaps else ""), None, "",
         softmax_provenance(runs, name, study), "Runs and commands")
  return tab
