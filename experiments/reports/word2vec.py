"""word2vec against gensim (results/word2vec_speed/README.md): words/s, interleaved on one machine, and the five
word-similarity ρ of trained runs, wt_jax's steps beside gensim's, each read against its seeds.

Records: bench_interleaved.jsonl (a line a `python -m experiments.bench --config=configs/w2v_untied.py
--gensim_python=G --rounds=3 …` command: every run of both sides and their medians), breakdown.jsonl (µs a part of a
step; listed, not read), quality/<run>.json (`experiments.studies.w2v_quality`'s record of one trained run, imported
from --runs)."""
from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

from experiments.reports.pages import _write
from experiments.reports.records import ReportError, against_spread, json_record, runs_folder, seeds_cell

BENCH, QUALITY = "bench_interleaved.jsonl", "quality"
SETS = ("simlex999", "verb143", "men", "rw", "mturk771")
ROLES = ("input", "output", "tied")
SCHEMES = {"gensim": "gensim", "pairs": "wt_jax, pairs (the default step)",
           "windows": "wt_jax, windows, noise a pair", "windows_shared": "wt_jax, windows, noise a window"}
KEYS = ("run", "scheme", "tying", "dataset", "seed", "devices", "words_per_s", "similarity")
COMMAND = "GENSIM_PYTHON=G/bin/python bash experiments/studies/w2v_quality.sh runs/w2v_quality"


def import_quality(runs_dir: Path, report_dir: Path) -> None:
  """Copy each run's quality.json under `runs_dir` to quality/<run>.json, after every one has been read whole."""
  found = sorted(runs_folder(runs_dir).glob("*/quality.json"))
  for path in found:
    json_record(path.read_text(errors="replace"), path, KEYS)
  (report_dir / QUALITY).mkdir(parents=True, exist_ok=True)
  for path in found:
    shutil.copy2(path, report_dir / QUALITY / f"{path.parent.name}.json")


def _step(run: dict) -> str:
  """The wt_jax side of a bench run in words: its step, batch, steps a call and devices."""
  noise = ", noise a window" if run.get("shared_negatives") else ""
  return (f"{run['batching']}{noise}, batch {run['batch']}, {run.get('steps_per_call', 64)} steps a call, "
          f"{len(run['devices'])} device{'s' if len(run['devices']) > 1 else ''}")


def _spread(runs: list[dict], key: str) -> str:
  k = sorted(r[key] / 1e3 for r in runs)
  return f"{statistics.median(k):,.0f}k ({k[0]:,.0f}k–{k[-1]:,.0f}k)"


def _rss(runs: list[dict]) -> str:
  return f"{max(r['peak_rss_mib'] for r in runs):,.0f}" if all("peak_rss_mib" in r for r in runs) else "—"


def speed_table(lines: list[dict]) -> str:
  rows = []
  for line in lines:
    g, w = line["runs"]["gensim"], line["runs"]["wt_jax"]
    cpu = w[0].get("host", {}).get("cpu", "not in the record")
    rows.append(f"| {line['config']} | {_step(w[0])} | {_spread(w, 'words_per_s')} | "
                f"{_spread(g, 'in_vocab_words_per_s')} | {line['wt_jax_over_gensim']:.3f} | {_rss(w)} / {_rss(g)} | "
                f"{w[0]['jax']} | {cpu} |")
  return ("| config | wt_jax step | wt_jax words/s, median (range) | gensim words/s | ratio | peak RSS MiB, wt_jax / "
          "gensim | jax | CPU |\n|---|---|---|---|---|---|---|---|\n" + "\n".join(rows))


NEW = ("windows_shared", 2)  # the step the rule reads: windows, a noise set a window, two host devices
PAIRS, GENSIM = ("pairs", 1), ("gensim", 2)


def _label(variant: tuple[str, int]) -> str:
  scheme, devices = variant
  return SCHEMES[scheme] + ("" if scheme == "gensim" else f", {devices} device{'s' if devices > 1 else ''}")


def quality_tables(records: list[dict]) -> tuple[str, list[str]]:
  """A table a corpus (rows step × matrix, cells mean ± sd (seeds)), a step being a scheme on a number of devices;
  and the readings: each wt_jax step against pairs, pairs against gensim, set by set against the seed spread."""
  rho = {}
  for r in records:
    for role, sets in r["similarity"].items():
      for s in SETS:
        rho.setdefault((r["dataset"], (r["scheme"], r["devices"]), role, s), []).append((r["seed"], sets[s]["rho"]))
  values = lambda *key: [v for _, v in sorted(rho.get(key, []))]
  variants = sorted({k[1] for k in rho}, key=lambda v: (list(SCHEMES).index(v[0]), v[1]))
  parts, readings = [], []
  for corpus in sorted({k[0] for k in rho}):
    head = f"{corpus}, Spearman ρ (mean ± sd (each seed)):\n\n| step | matrix | seeds | " + " | ".join(SETS) + " |"
    rows = [head, "|---|---|---|" + "---|" * len(SETS)]
    for variant in variants:
      for role in ROLES:
        if (corpus, variant, role, SETS[0]) in rho:
          seeds = ", ".join(str(s) for s, _ in sorted(rho[corpus, variant, role, SETS[0]]))
          rows.append(f"| {_label(variant)} | {role} | {seeds} | " +
                      " | ".join(seeds_cell(values(corpus, variant, role, s), ".3f", ".3f") for s in SETS) + " |")
    parts.append("\n".join(rows))
    readings += [line for v in variants if v[0].startswith("windows") for line in _readings(corpus, v, values)]
  return "\n\n".join(parts), readings


def _verdicts(a: list, b: list) -> tuple[float, str]:
  """b − a and its reading against the seeds: within, or beyond and which way."""
  d, v = against_spread(a, b, ".3f")
  return d, ("within" if v.startswith("within") else f"beyond, {'higher' if d > 0 else 'lower'}"
             if v.startswith("beyond") else "one seed")


def _readings(corpus: str, variant: tuple[str, int], values) -> list[str]:
  """Per matrix and set: `variant` − pairs, and pairs − gensim (untied), each against the seeds; for the new step
  (NEW), the sets where the rule 'within the seed spread of pairs wherever pairs and gensim agree' holds."""
  out = []
  for role in ROLES:
    cells = [s for s in SETS if values(corpus, PAIRS, role, s) and values(corpus, variant, role, s)]
    if not cells:
      continue
    verdict = {s: _verdicts(values(corpus, PAIRS, role, s), values(corpus, variant, role, s)) for s in cells}
    line = f"- {corpus}, {role}: {_label(variant)} − pairs: " + "; ".join(
        f"{s} {d:+.3f} ({v})" for s, (d, v) in verdict.items())
    agree = {s: _verdicts(values(corpus, GENSIM, role, s), values(corpus, PAIRS, role, s))
             for s in cells if values(corpus, GENSIM, role, s)}
    if agree and variant == NEW:
      line += ". pairs − gensim: " + "; ".join(f"{s} {d:+.3f} ({v})" for s, (d, v) in agree.items())
      held = [s for s in agree if agree[s][1] == "within"]
      broken = [s for s in held if verdict[s][1] != "within"]
      beyond = ", ".join(f"{s} ({verdict[s][1].split(', ')[1]})" for s in broken)
      line += (f". Where pairs and gensim agree ({', '.join(held) or 'no set'}), the new step is within pairs' "
               f"spread on {len(held) - len(broken)} of {len(held)}" + (f"; beyond it on {beyond}" if broken else ""))
    out.append(line + ".")
  return out


def build_word2vec(name: str, out_root: Path, runs_dir: Path | None = None, readme: Path | None = None) -> str:
  report_dir = out_root / name
  if runs_dir is not None:
    import_quality(runs_dir, report_dir)
  bench = report_dir / BENCH
  if not bench.is_file():
    raise ReportError(f"{bench} is missing: run python -m experiments.bench --config=configs/w2v_untied.py "
                      "--gensim_python=G/bin/python --rounds=3 and append its last line.")
  lines = [json_record(l, bench, ("config", "runs", "wt_jax_over_gensim")) for l in bench.read_text().splitlines()
           if l.strip()]
  records = [json_record(p.read_text(errors="replace"), p, KEYS)
             for p in sorted((report_dir / QUALITY).glob("*.json"))]
  quality, readings = quality_tables(records) if records else ("No quality record yet.", [])
  lead = ("Speed: `python -m experiments.bench --config=configs/w2v_untied.py --gensim_python=G/bin/python "
          "--rounds=3 [--config.…]` (a line of bench_interleaved.jsonl each): gensim and wt_jax alternated in separate "
          "processes on one machine, three rounds; words/s are in-vocabulary words a second of the second epoch "
          "(wt_jax; its first compiles) and of one epoch (gensim), over PTB's training sentences. Several devices: "
          "XLA_FLAGS=--xla_force_host_platform_device_count=N (XLA:CPU runs each host device on its own core).")
  tab = (speed_table(lines) + "\n\nQuality: the five word-similarity sets' Spearman ρ of the trained matrices "
         "(Press & Wolf's Table 2 protocol; coverage in the records), 5 epochs, word2vec.c's settings.\n\n" + quality +
         "\n\nRead against the seeds (twice the larger sample sd; one seed: no verdict):\n\n" +
         ("\n".join(readings) or "- nothing to compare yet."))
  prov = "\n".join(f"- `{r['run']}`: {SCHEMES[r['scheme']]}, {r['tying']}, seed {r['seed']}, {r['devices']} "
                   f"device(s)/worker(s), {r['words_per_s'] / 1e3:,.0f}k words/s over the whole run (compilation "
                   "included, the machine shared with other runs: not a speed reading), "
                   f"{(r.get('host') or {}).get('cpu', 'gensim')}" for r in records)
  _write(name, report_dir, readme, "word2vec against gensim: speed and quality", lead, tab, None, "",
         f"Quality runs: `{COMMAND}` (each run's command in the script), then `python -m experiments.report {name} "
         f"--runs=runs/w2v_quality`.\n\n{prov}\n\nAlso here: breakdown.jsonl (`python "
         "experiments/bench_helpers/w2v_breakdown.py --rounds=5`: µs a step for each part of the steps).",
         "Records, runs and machines")
  return tab
