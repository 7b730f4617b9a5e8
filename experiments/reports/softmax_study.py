"""Softmax approximations over the word matrix (wt_jax/softmax.py; not a paper table): per approximation,
tied and untied, perplexities, the rows a step reaches, speed and Table 4's correlations."""
from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

from experiments.reports.pages import _report_dir, _write
from experiments.reports.records import CURVE, seeds_cell, load_runs
from wt_jax.train import metrics

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
                   f"| {seeds_cell([r['valid_ppl'] for r in cell])} | {seeds_cell(tests)} | {gain} | {out_text} | {in_text} "
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
