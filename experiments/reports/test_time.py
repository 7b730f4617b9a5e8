"""Test-time adaptation of trained LMs: plain, + continuous cache, + dynamic evaluation, tied against untied,
from the per-run records `experiments.studies.test_time` writes (one JSON file per run folder).

    python -m experiments.report test_time --runs=runs/test_time_records         # PTB (PAGES["test_time"])
    python -m experiments.report test_time_wt2 --runs=runs/test_time_wt2_records  # WikiText-2 in BPE pieces, with an
                                                                                 # article_resets/ subfolder

With --runs, every record there (<run>.json) is read first and then copied into results/test_time/; the page's
tables are built from those files alone: test perplexity per config and method (mean ± sd over seeds), each
method's relative gain, the tied − untied difference in gain against the seeds' spread, the tuned settings, and
what a `VARIANTS` subfolder's records (the same runs, other grids) change.
"""
from __future__ import annotations

import dataclasses
import shutil
import statistics
from pathlib import Path

from experiments.reports.pages import write_page
from experiments.reports.records import ReportError, against_spread, json_record, runs_folder, seeds_cell

METHODS = {"cache": "+ cache (Grave et al.)", "dynamic_sgd": "+ dynamic eval, SGD",
           "dynamic_rms": "+ dynamic eval, RMS + decay (Krause et al.)"}
PAIRS = {"small": "small_tied", "inan_small_vd": "inan_small_re"}  # untied config → its tied counterpart
# The published anchor, checked in ../shared/papers/notes_neural_lm.txt ("Recent Results", Merity et al.'s Table 1).
ANCHORS = [("Grave et al. (2016), LSTM + continuous cache pointer", 82.3, 72.1),
           ("AWD-LSTM (tied) + continuous cache pointer", 57.3, 52.8)]
# A subfolder of records re-evaluating runs of the main table with other grids → (what it changes, the methods it
# reads again: the others' grids are the main one's, or one point of it).
VARIANTS = {"wide_eta": ("dynamic evaluation's η grid extended upward", ("dynamic_sgd", "dynamic_rms")),
            "rms_mid": ("the RMS rule's η between 2e-4 and 5e-4", ("dynamic_rms",))}


@dataclasses.dataclass(frozen=True)
class Page:
  """A test-time page: its title, methods (record key → column), published anchors ((label, plain, adapted) and
  what they measure), the subfolders of other grids (`VARIANTS`) and of the same study scored by documents
  (`resets`: a subfolder name and what a document is; "" for none)."""
  title: str
  methods: dict
  anchors: list
  anchors_on: str
  variants: dict
  resets: tuple[str, str] = ("", "")


PAGES = {
    "test_time": Page("Test-time adaptation: the continuous cache and dynamic evaluation", METHODS, ANCHORS,
                      "PTB test perplexity", VARIANTS),
    # WikiText-2's anchor: not in the papers we hold (../shared/papers); cited from Papers with Code's leaderboard
    # rows for Grave et al. (ICLR 2017), its own table not read.
    "test_time_wt2": Page("Test-time adaptation on WikiText-2 (BPE pieces): the cache and dynamic evaluation, by articles",
                          {**METHODS, "dynamic_sgd+cache": "+ dynamic eval, SGD, + cache"},
                          [("Grave et al. (2017), LSTM + continuous cache, words (cited: Papers with Code; the "
                            "paper's table not read)", 99.3, 68.9)],
                          "WikiText-2 test perplexity per word", {},
                          ("article_resets", "every WikiText article scored from a fresh start "
                                             "(`--reset_at=wikitext_article`: 60 articles in the test split)")),
}
# A variant record and its main one must score one model: 1e-4 is far inside a retraining's spread (seed sd about
# 0.2-0.6%) and, by our estimate (not measured across machines), far above float32 rounding of one model's score.
SAME_MODEL_RTOL = 1e-4
KEYS = ("run", "config", "tying", "seed", "plain", "valid_tokens", "test_tokens", "wall_s")


def import_records(runs_dir: Path, report_dir: Path, subfolders=tuple(VARIANTS)) -> list[str]:
  """Copy every <run>.json of `runs_dir`, and of its `subfolders` (a page's variants and resets), to the same place
  under `report_dir`, after reading each (a damaged one raises `ReportError` before anything is copied); an
  unfinished study's <run>.partial.json is not a record."""
  runs_folder(runs_dir)
  found = [p for sub in ("", *subfolders) for p in sorted((runs_dir / sub).glob("*.json"))
           if not p.name.endswith(".partial.json")]
  if not found:
    raise ReportError(f"{runs_dir} holds no records; run python -m experiments.studies.test_time first.")
  for path in found:
    json_record(path.read_text(errors="replace"), path, KEYS)
  for path in found:
    dest = report_dir / path.relative_to(runs_dir)
    dest.parent.mkdir(exist_ok=True)
    shutil.copy2(path, dest)
  return [str(p.relative_to(runs_dir).with_suffix("")) for p in found]


def load_records(report_dir: Path) -> dict[str, list[dict]]:
  """config name → its records sorted by seed (`_name`: the record's file name without .json)."""
  by_config: dict[str, list[dict]] = {}
  for path in sorted(report_dir.glob("*.json")):
    r = json_record(path.read_text(errors="replace"), path, KEYS)
    by_config.setdefault(r["config"], []).append({**r, "_name": path.stem})
  for records in by_config.values():
    records.sort(key=lambda r: r["seed"])
  return by_config


def gain(r: dict, method: str) -> float | None:
  """The method's relative change of test perplexity, in percent (negative: lower perplexity)."""
  return 100 * (r[method]["test_ppl"] / r["plain"]["test_ppl"] - 1) if method in r else None


def ppl_table(by_config: dict[str, list[dict]], methods: dict = METHODS) -> str:
  rows = ["| config | tying | seeds | plain | " + " | ".join(f"{label} (gain)" for label in methods.values()) + " |",
          "|---|---|---|---|" + "---|" * len(methods)]
  for config, records in by_config.items():
    cells = [seeds_cell([r["plain"]["test_ppl"] for r in records])]
    for method in methods:
      have = [r for r in records if method in r]
      ppl, gains = [r[method]["test_ppl"] for r in have], [gain(r, method) for r in have]
      cells.append(f"{seeds_cell(ppl)} ({seeds_cell(gains, '+.1f')}%)" if have else "—")
    rows.append(f"| {config} | {records[0]['tying']} | {', '.join(str(r['seed']) for r in records)} | "
                + " | ".join(cells) + " |")
  return "\n".join(rows)


def tied_vs_untied(by_config: dict[str, list[dict]], methods: dict = METHODS) -> str:
  """Per pair and method: the mean gains, their difference, and whether it exceeds twice the larger seed sd."""
  lines = []
  for untied, tied in PAIRS.items():
    if untied not in by_config or tied not in by_config:
      continue
    for method, label in methods.items():
      u = [gain(r, method) for r in by_config[untied] if method in r]
      t = [gain(r, method) for r in by_config[tied] if method in r]
      if not u or not t:
        continue
      diff, verdict = against_spread(u, t, ".2f", " points")
      lines.append(f"- {label}, {tied} − {untied}: gain {statistics.mean(t):+.1f}% against "
                   f"{statistics.mean(u):+.1f}%, a difference of {diff:+.2f} points, {verdict}.")
  return "\n".join(lines) or "- (no config with both its untied and its tied records yet)"


def _edge(value: float, grid: list[dict], key: str) -> str:
  values = sorted({g[key] for g in grid})
  return f"{value:g}" + (" (grid edge)" if len(values) > 1 and value in (values[0], values[-1]) else "")


def settings_table(by_config: dict[str, list[dict]]) -> str:
  rows = ["| record | cache n / θ / λ (valid ppl) | SGD η / λ (valid ppl) | RMS η / λ (valid ppl) | dynamic tuned on | "
          "wall |", "|---|---|---|---|---|---|"]
  for records in by_config.values():
    for r in records:
      cells = []
      for method, keys in (("cache", ("n", "theta", "lambda")), ("dynamic_sgd", ("lr", "decay")),
                           ("dynamic_rms", ("lr", "decay"))):
        if method not in r:
          cells.append("—")
          continue
        best, grid = r[method]["best"], r[method]["grid"]
        cells.append(" / ".join(_edge(best[k], grid, k) for k in keys) + f" ({best['valid_ppl']:.1f}; "
                     f"{len(grid)} points)")
      tuned = r.get("dynamic_sgd", {}).get("tuned_tokens", r["valid_tokens"])
      rows.append(f"| `{r['_name']}` | " + " | ".join(cells) + f" | first {tuned:,} of {r['valid_tokens']:,} valid "
                  f"targets, segments of {r.get('dynamic_sgd', {}).get('segment', '—')} | {r['wall_s'] / 60:.0f} min |")
  return "\n".join(rows)


def _dynamic_cell(r: dict, method: str) -> str:
  best, grid = r[method]["best"], r[method]["grid"]
  return " / ".join(_edge(best[k], grid, k) for k in ("lr", "decay")) + f", {r[method]['test_ppl']:.1f}"


def variants_table(report_dir: Path, by_config: dict[str, list[dict]], variants: dict = VARIANTS) -> str:
  """Per variant record and dynamic rule: the best η / λ and its test perplexity on the grid of the same run's
  main record and on the variant's grid; '' when there is no variant record."""
  main = {r["_name"]: r for records in by_config.values() for r in records}
  rows = []
  for variant, (_, methods) in variants.items():
    for path in sorted((report_dir / variant).glob("*.json")):
      r, base = json_record(path.read_text(errors="replace"), path, KEYS), main.get(path.stem)
      if base is not None and abs(r["plain"]["test_ppl"] / base["plain"]["test_ppl"] - 1) > SAME_MODEL_RTOL:
        raise ReportError(f"{path} scores another model than {path.stem}.json (plain test ppl "
                          f"{r['plain']['test_ppl']:.3f} against {base['plain']['test_ppl']:.3f}): evaluate both "
                          f"grids from one run folder.")
      for method in methods:
        if method not in r:
          continue
        lrs = ", ".join(f"{v:g}" for v in sorted({g["lr"] for g in r[method]["grid"]}))
        known = base is not None and method in base
        rows.append(f"| `{path.stem}` | {variant} | {METHODS[method]} | {lrs} | "
                    f"{_dynamic_cell(base, method) if known else '—'} | {_dynamic_cell(r, method)} | "
                    + (f"{r[method]['test_ppl'] - base[method]['test_ppl']:+.1f} |" if known else "— |")
                    + f" {gain(r, method):+.1f}% |")
  if not rows:
    return ""
  return "\n".join(["| record | variant | method | its η values | main grid: best η / λ, test ppl | this grid: best "
                    "η / λ, test ppl | change in test ppl | gain on this grid |", "|---|---|---|---|---|---|---|---|",
                    *rows])


def speed_table(report_dir: Path) -> str:
  """Tokens/s of plain scoring, the cache and SGD dynamic evaluation from `bench.jsonl` (`experiments.bench
  --adapt_tokens`: one line per bench run, the three interleaved); '' when there is none."""
  path = report_dir / "bench.jsonl"
  lines = [l for l in path.read_text(errors="replace").splitlines() if l.strip()] if path.exists() else []
  rows = []
  for i, line in enumerate(lines, 1):
    b = json_record(line, f"{path} line {i}", ("config", "tokens", "cache_size", "tokens_per_s", "host"))
    tps, temp = b["tokens_per_s"], b.get("temp_mib") or {}
    rows.append(f"| {b['config']} | {b['tokens']:,} | {b['cache_size']} | {tps['plain']:,.0f} | "
                f"{tps['cache']:,.0f} (×{tps['cache'] / tps['plain']:.2f}) | {tps['dynamic_sgd']:,.0f} "
                f"(×{tps['dynamic_sgd'] / tps['plain']:.2f}) | {temp.get('cache', '—')} / "
                f"{temp.get('dynamic_sgd', '—')} "
                f"| {b['host'].get('cpu', '?')}, {b['host'].get('cpu_count', '?')} cores; median of "
                f"{b.get('repeats', '?')} |")
  if not rows:
    return ""
  return "\n".join(["| config | tokens | cache n | plain tok/s | cache tok/s (× plain) | dynamic SGD tok/s (× plain) | "
                    "temp MiB cache / dynamic | machine |", "|---|---|---|---|---|---|---|---|", *rows])


def provenance(by_config: dict[str, list[dict]]) -> str:
  lines = []
  for records in by_config.values():
    for r in records:
      host, run = r.get("host") or {}, r["run"]
      commit = (r.get("versions") or {}).get("wt_jax_commit") or "not recorded"
      lines.append(f"- `{r['_name']}`: run `{run['workdir']}` (config {r['config']}, seed {r['seed']}, trained at "
                   f"`{run['commit']}`), checkpoint `{run['checkpoint']}` step {run['step']:,}; evaluated at "
                   f"`{commit}` on {host.get('cpu', '?')}, {host.get('cpu_count', '?')} cores.")
  return "\n".join(lines)


def resets_lines(main: dict[str, list[dict]], resets: dict[str, list[dict]], methods: dict) -> str:
  """Per config and method: its mean gain with the text as one stream (`main`) and by documents (`resets`)."""
  lines = []
  for config, records in resets.items():
    for method, label in methods.items():
      by_doc = [gain(r, method) for r in records if method in r]
      stream = [gain(r, method) for r in main.get(config, []) if method in r]
      if by_doc and stream:
        lines.append(f"- {config}, {label}: gain {statistics.mean(by_doc):+.1f}% by articles against "
                     f"{statistics.mean(stream):+.1f}% as one stream ({len(by_doc)} and {len(stream)} seeds).")
  return "\n".join(lines)


def build_test_time(name: str, out_root: Path, runs_dir: Path | None = None, readme: Path | None = None) -> str:
  """Import (optionally), then write the page `PAGES[name]`; returns the perplexity table."""
  page, report_dir = PAGES[name], out_root / name
  report_dir.mkdir(parents=True, exist_ok=True)
  resets_dir, documents = page.resets
  if runs_dir is not None:
    import_records(runs_dir, report_dir, (*page.variants, *([resets_dir] if resets_dir else [])))
  by_config = load_records(report_dir)
  if not by_config:
    raise ReportError(f"{report_dir} holds no records; import them with --runs.")
  tab = ppl_table(by_config, page.methods)
  variants = variants_table(report_dir, by_config, page.variants)
  variants = (f"**Other grids** (a record of a subfolder re-evaluates a run of the main table: "
              f"{'; '.join(f'`{k}`: {v}' for k, (v, _) in page.variants.items())}).\n\n{variants}\n\n" if variants
              else "")
  for variant, (_, methods) in page.variants.items():
    pairs = tied_vs_untied(load_records(report_dir / variant), {m: page.methods[m] for m in methods})
    variants += (f"**Tied against untied on the `{variant}` grid.**\n\n{pairs}\n\n" if pairs.startswith("- +")
                 else "")
  by_document = load_records(report_dir / resets_dir) if resets_dir else {}
  if by_document:
    variants += (f"**By documents**: {documents}; the same grids, tuned and scored by documents.\n\n"
                 f"{ppl_table(by_document, page.methods)}\n\n{tied_vs_untied(by_document, page.methods)}\n\n"
                 f"{resets_lines(by_config, by_document, page.methods)}\n\n"
                 f"{settings_table(by_document)}\n\n")
  speed = speed_table(report_dir)
  speed = (f"**Speed** (`bench.jsonl`: `python -m experiments.bench --config=... --adapt_tokens=N "
           f"--adapt_cache_size=n`, the three passes interleaved in one run, batch 1, medians; compare within a row, "
           f"not across rows, which ran one after another).\n\n{speed}\n\n"
           if speed else "")
  anchors = "\n".join(f"- {label}: {a} → {b} ({100 * (b / a - 1):+.1f}%)." for label, a, b in page.anchors)
  body = (f"Test perplexity (the run's batch-1 stream); a cell of several seeds is mean ± sample sd (each seed); "
          f"gain: the change against plain, in percent.\n\n{tab}\n\n**Tied against untied.**\n\n"
          f"{tied_vs_untied(by_config, page.methods)}\n\n**Published gains ({page.anchors_on}).**\n\n{anchors}\n\n"
          f"**Tuned on validation** (each method's best grid point; \"grid edge\": the best lies on the grid's "
          f"border).\n\n{settings_table(by_config)}\n\n{variants}{speed}Rebuild: `python -m experiments.report {name}`")
  write_page(report_dir / "README.md", name, page.title, body,
             f"## Runs\n\n{provenance({**by_config, **{f'{k} (by documents)': v for k, v in by_document.items()}})}")
  return tab
