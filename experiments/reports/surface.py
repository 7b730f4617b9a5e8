"""The tying surface (not a paper table): the tied − untied gap of the Transformer LM over its width D
and the vocabulary (BPE pieces or WikiText-2's words), in bits per byte of the same test text, read against the
seeds. From results/tying_surface/: the cell runs (configs/tying_surface.py, `experiments/studies/tying_surface.sh`)
with their measures.json (`experiments/studies/tying_surface_measures.py`), the learning-rate and dropout grid's
runs (a cell with `lr=`/`dropout=` in its name) and cost.jsonl (`experiments/studies/tying_surface_cost.sh`)."""
from __future__ import annotations

import statistics
from pathlib import Path

from configs import tying_surface
from experiments.reports.pages import _report_dir, _write
from experiments.reports.records import MEASURES, ReportError, against_spread, json_record, load_runs, seeds_cell
import wt_jax.files as files

VOCABS = ("1000", "4000", "16000", "words")
ARMS = ("untied", "tied", "tied_wide")
# Published tied − untied gaps in bits per byte, each at one configuration (data; read in the source's own text, the
# model's settings in its code where the source names its defaults): (source, model, vocabulary, width, corpus,
# seeds, tied − untied, what differs from the surface's cells).
PUBLISHED = [
    ("openai/parameter-golf PR #2000 (2026-04-30)", "train_gpt.py's baseline: 9 blocks, 8 heads (4 key-value), "
     "feed-forward 2·D, Muon on the matrices; tied in the baseline", "1,024 BPE pieces", 512, "FineWeb (validation)",
     "3 (an RTX PRO 6000; once more on an H100)", +0.019, "another corpus and optimizer; in train_gpt.py's defaults "
     "a 600-s training cap and other learning rates for a tied (0.05) and an untied (0.6 input, 0.008 output) "
     "matrix; the description gives the difference, not its seed spread"),
]
# A cell fits a CPU session where SLOWDOWN times its idle time is within SESSION_MIN minutes (why: BUILD_NOTES).
SESSION_MIN, SLOWDOWN = 180, 2.5
COMMAND = ('SEEDS="0 1" bash experiments/studies/tying_surface.sh runs/tying_surface CELL ...; python -m '
           "experiments.studies.tying_surface_measures runs/tying_surface; python -m experiments.report tying_surface "
           "--runs=runs/tying_surface")


def _vocab_label(vocab: str) -> str:
  return "words (33,278)" if vocab == "words" else f"{int(vocab):,} pieces"


def _order(key: tuple) -> tuple:
  return (VOCABS.index(key[0]), key[1], ARMS.index(key[2]), *key[3:])


def load_surface(report_dir: Path) -> tuple[dict, dict]:
  """(cells, grid): (vocab, D, arm) → the runs at the surface's own settings (a name without `lr`/`dropout`, or a
  grid point's run alone that trains the cell, `trains_the_cell`, for a seed the cell has no run of), and
  (vocab, D, arm, lr, dropout) → a grid point's runs; each run with its measures.json as `_measures` (None until
  measured)."""
  def check(path, r):
    if not tying_surface.arg_of(r["config"]):
      raise ValueError(f"{path}: {r['config']!r} is not a tying-surface cell")
    if "test_bits_per_byte" not in r:
      raise ValueError(f"{path}: no test bits per byte (its test scored part of the text: eval_max_tokens)")
  try:
    by_config = load_runs(report_dir, dataset="text", check=check)
  except ValueError as e:
    raise ReportError(str(e)) from None
  cells, grid, points = {}, {}, []
  for config, runs in by_config.items():
    for r in runs:
      path = report_dir / r["_dir"] / MEASURES
      r["_measures"] = json_record(path.read_text(), path) if path.is_file() else None
    arg = tying_surface.arg_of(config)
    (arm, width, vocab, *settings), c = arg.split(","), tying_surface.get_config(arg)
    key = (vocab, int(width), arm)
    if settings:
      grid[(*key, c.learning_rate, c.dropout)] = runs
      if tying_surface.trains_the_cell(arg):
        points += [(key, r) for r in runs if "member" not in r]
    else:
      cells[key] = runs
  for key, r in points:
    if r["seed"] not in {s["seed"] for s in cells.get(key, ())}:
      cells[key] = sorted([*cells.get(key, ()), r], key=lambda s: s["seed"])
  return cells, grid


def _bpb(runs: list[dict]) -> list[float]:
  return [r["test_bits_per_byte"] for r in runs]


def _gap(cells: dict, key: tuple) -> tuple[float, str] | None:
  """A tied (or tied_wide) cell's test bits per byte minus the untied cell's, read against the seeds."""
  untied = cells.get((*key[:2], "untied"))
  return against_spread(_bpb(untied), _bpb(cells[key]), ".4f") if key[2] != "untied" and untied else None


def cells_table(cells: dict) -> str:
  head = ("| vocabulary | D | arm | width | parameters | seeds | valid ppl (per token) | test bits per byte | "
          "− untied, bits per byte |\n|---|---|---|---|---|---|---|---|---|")
  rows = []
  for key in sorted(cells, key=_order):
    (vocab, D, arm), runs = key, cells[key]
    gap = _gap(cells, key)
    width = tying_surface.get_config(f"{arm},{D},{vocab}").hidden_size
    rows.append(f"| {_vocab_label(vocab)} | {D} | {arm} | {width} | {runs[0]['num_params']:,} | "
                f"{', '.join(str(r['seed']) for r in runs)} | {seeds_cell([r['valid_ppl'] for r in runs])} | "
                f"{seeds_cell(_bpb(runs), '.4f', '.4f')} | {f'{gap[0]:+.4f} ({gap[1]})' if gap else '—'} |")
  borrowed = [f"`{r['_dir']}` (seed {r['seed']})" for key in sorted(cells, key=_order) for r in cells[key]
              if tying_surface.arg_of(r["config"]).count(",") > 2]  # (a grid point's: lr= or dropout= in its name)
  note = ("\n\nA grid point's run stands for its cell's seed where it trained the cell's config (all but the name): "
          + ", ".join(borrowed) + ".") if borrowed else ""
  return "\n".join([head, *rows]) + note if rows else "No cell has a finished run yet."


# The tied matrix's measures that the reading follows across a sign change: (name, its value in a measures.json).
TIED_MEASURES = (("CKA to the untied input", lambda m: m["untied"]["input"]["cka"]),
                 ("CKA to the untied output", lambda m: m["untied"]["output"]["cka"]),
                 ("norm–count ρ", lambda m: m["matrices"]["tied"]["norm_count_rho"]),
                 ("anisotropy", lambda m: m["matrices"]["tied"]["anisotropy"]))


def _tied_measures(cells: dict, key: tuple) -> list[dict]:
  """The measures.json of a tied-arm cell's seeds that were measured against their untied run."""
  return [r["_measures"] for r in cells[key] if r["_measures"] and "untied" in r["_measures"]]


def _step(cells: dict, a: tuple, b: tuple) -> list[tuple[str, str, bool]]:
  """`TIED_MEASURES` from cell a to cell b: (name, 'x → y' with the verdict, beyond the spread)."""
  out = []
  for name, get in TIED_MEASURES:
    va, vb = ([get(m) for m in _tied_measures(cells, k)] for k in (a, b))
    if va and vb:
      verdict = against_spread(va, vb, ".3f")[1]
      out.append((name, f"{statistics.mean(va):.3f} → {statistics.mean(vb):.3f} ({verdict})",
                  verdict.startswith("beyond")))
  return out


def _signs(cells: dict) -> dict[tuple, tuple[float, int]]:
  """Each read tied-arm cell (both sides two seeds or more) → (tied − untied, its sign): beyond twice the larger
  seed sd −1 (tying helps) or +1 (it costs); within it 0."""
  signs = {}
  for key in sorted(cells, key=_order):
    untied = cells.get((*key[:2], "untied"), ())
    if key[2] != "untied" and min(len(cells[key]), len(untied)) >= 2:
      diff, verdict = _gap(cells, key)
      signs[key] = (diff, (diff > 0) - (diff < 0) if verdict.startswith("beyond") else 0)
  return signs


def reading(cells: dict) -> str:
  """The read cells and their sign (`_signs`); then the signs along the width at each vocabulary and along the
  vocabulary at each width, where a line has two read tied cells or more; where the sign changes between two of
  them, the tied matrix's measures on either side (`_step`), and whether they also change where it holds."""
  word = {-1: "tying helps", 1: "tying costs", 0: "no sign (within the spread)"}
  signs = _signs(cells)
  if not signs:
    return "No cell is read yet (each side needs two seeds)."
  lines = [f"- {_vocab_label(k[0])}, D = {k[1]}, "
           f"{'tied_wide (at the untied parameter count)' if k[2] == 'tied_wide' else k[2]}: {diff:+.4f}, {word[s]}."
           for k, (diff, s) in signs.items()]
  for name, other, fixed, label, point in (
      ("width", "vocabulary", 0, _vocab_label, lambda k: f"D = {k[1]}"),
      ("vocabulary", "width", 1, lambda d: f"D = {d}", lambda k: _vocab_label(k[0]))):
    lines_of = {}
    for key in sorted((k for k in signs if k[2] == "tied"), key=lambda k: _order(k)[fixed]):
      lines_of.setdefault(key[fixed], []).append(key)
    lines_of = {g: keys for g, keys in lines_of.items() if len(keys) > 1}
    lines.append(f"- Along the {name}: " + ("; ".join(
        f"at {label(g)}, " + ", ".join(f"{word[signs[k][1]]} at {point(k)}" for k in keys)
        for g, keys in lines_of.items()) or f"no {other} has its tied arm read at two {name}s yet, so the cells "
        f"say nothing along it") + ".")
    for g, keys in lines_of.items():
      steps = {(a, b): _step(cells, a, b) for a, b in zip(keys, keys[1:])}
      kept = [step for (a, b), step in steps.items() if signs[a][1] == signs[b][1] and step]
      held = sorted({n for step in kept for n, _, beyond in step if beyond})
      for (a, b), step in steps.items():
        if signs[a][1] != signs[b][1] and step:
          lines.append(f"  - At {label(g)}, from {point(a)} to {point(b)} the sign changes; the tied matrix: "
                       + "; ".join(f"{n} {text}" for n, text, _ in step) + ". " + (
                           "Beyond the spread where the sign holds too: " + (", ".join(held) or "none") + "."
                           if kept else "No step along this line keeps its sign with the measures on both sides, "
                           "so whether these change only where the sign does is open."))
  return "\n".join(lines)


def grid_table(grid: dict) -> str:
  """Each grid point's best validation perplexity (per token), the lowest of each (vocabulary, D, arm) in bold."""
  if not grid:
    return "No grid run yet."
  head = "| vocabulary | D | arm | learning rate | dropout | seeds | best valid ppl |\n|---|---|---|---|---|---|---|"
  best = {}
  for key, runs in grid.items():
    value = statistics.mean(r["best_valid_ppl"] for r in runs)
    if key[:3] not in best or value < best[key[:3]]:
      best[key[:3]] = value
  rows = []
  for key in sorted(grid, key=_order):
    runs = grid[key]
    cell = seeds_cell([r["best_valid_ppl"] for r in runs])
    low = statistics.mean(r["best_valid_ppl"] for r in runs) == best[key[:3]]
    rows.append(f"| {_vocab_label(key[0])} | {key[1]} | {key[2]} | {key[3]:g} | {key[4]:g} | "
                f"{', '.join(str(r['seed']) for r in runs)} | {f'**{cell}**' if low else cell} |")
  return "\n".join([head, *rows])


def _paired(cells: dict, key: tuple) -> list[tuple[dict, dict]]:
  """(tied-arm measures, untied measures) of the seeds both arms of a cell have measured."""
  untied = {r["seed"]: r["_measures"] for r in cells.get((*key[:2], "untied"), ()) if r["_measures"]}
  return [(r["_measures"], untied[r["seed"]]) for r in cells[key] if r["_measures"] and r["seed"] in untied]


def _mean(values: list[float], fmt: str) -> str:
  return (f"{statistics.mean(values):{fmt}} ± {statistics.stdev(values):{fmt}}" if len(values) > 1
          else f"{values[0]:{fmt}}")


def frequency_table(cells: dict) -> str:
  """Per tied-arm cell: the gap in bits per byte split by the target's training count (`by_training_count`; the
  parts add up to the whole), the mean over the seeds both arms measured."""
  head, rows = None, []
  for key in sorted(cells, key=_order):
    pairs = _paired(cells, key) if key[2] != "untied" else []
    if not pairs:
      continue
    buckets = [b["from"] for b in pairs[0][0]["test"]["by_training_count"]]
    labels = [f"{lo:,}–{hi - 1:,}" if lo else "unseen" for lo, hi in zip(buckets, buckets[1:])] + [f"≥ {buckets[-1]:,}"]
    head = head or ("| vocabulary | D | arm | seeds | " + " | ".join(labels) + " | whole |\n|"
                    + "---|" * (len(labels) + 5))
    parts = [[t["test"]["by_training_count"][i]["bits_per_byte"] - u["test"]["by_training_count"][i]["bits_per_byte"]
              for t, u in pairs] for i in range(len(buckets))]
    whole = [t["test"]["bits_per_byte"] - u["test"]["bits_per_byte"] for t, u in pairs]
    share = [statistics.mean(u["test"]["by_training_count"][i]["targets"] for _, u in pairs)
             / pairs[0][1]["test"]["targets"] for i in range(len(buckets))]
    rows.append(f"| {_vocab_label(key[0])} | {key[1]} | {key[2]} | {len(pairs)} | "
                + " | ".join(f"{statistics.mean(p):+.4f} ({s:.0%})" for p, s in zip(parts, share))
                + f" | {statistics.mean(whole):+.4f} |")
  return "\n".join([head, *rows]) if rows else "No cell has both arms measured yet."


def mechanism_table(cells: dict) -> str:
  """Per tied-arm cell: its matrix against the untied input and output matrices (linear CKA, Table-4 ρ), the untied
  matrices against each other, and each matrix's norm–count ρ and anisotropy; mean ± sd over the measured seeds."""
  head = ("| vocabulary | D | arm | seeds | CKA tied:input | CKA tied:output | CKA input:output | ρ₄ tied:input | "
          "ρ₄ tied:output | norm–count ρ tied / input / output | anisotropy tied / input / output |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|")
  rows = []
  for key in sorted(cells, key=_order):
    pairs = [(t, u) for t, u in _paired(cells, key) if "untied" in t] if key[2] != "untied" else []
    if not pairs:
      continue
    got = lambda f: _mean([f(t, u) for t, u in pairs], ".2f")
    three = lambda name: " / ".join(got(lambda t, u, role=role: (t if role == "tied" else u)["matrices"][role][name])
                                    for role in ("tied", "input", "output"))
    rows.append(f"| {_vocab_label(key[0])} | {key[1]} | {key[2]} | {len(pairs)} | "
                f"{got(lambda t, u: t['untied']['input']['cka'])} | {got(lambda t, u: t['untied']['output']['cka'])} | "
                f"{got(lambda t, u: u['input_vs_output']['cka'])} | "
                f"{got(lambda t, u: t['untied']['input']['table4_rho'])} | "
                f"{got(lambda t, u: t['untied']['output']['table4_rho'])} | {three('norm_count_rho')} | "
                f"{three('anisotropy')} |")
  return "\n".join([head, *rows]) if rows else "No cell has both arms measured yet."


def published_table() -> str:
  """`PUBLISHED`: the published gaps, in the surface's sign (tied − untied; > 0: untying helps)."""
  head = ("| source | model | vocabulary | D | corpus | seeds | tied − untied, bits per byte | unlike the cells here |\n"
          "|---|---|---|---|---|---|---|---|")
  return "\n".join([head, *(f"| {s} | {m} | {v} | {d} | {c} | {n} | {g:+.3f} | {w} |"
                             for s, m, v, d, c, n, g, w in PUBLISHED)])


def cost_table(report_dir: Path) -> str:
  """cost.jsonl: each measured cell's rate (150 steps, the median progress record), what 6 epochs would take, and
  whether they fit a session (`SESSION_MIN`) at `SLOWDOWN` times that."""
  path = report_dir / "cost.jsonl"
  if not path.is_file():
    return "No cost measured yet."
  head = (f"| cell | parameters | steps an epoch | steps/s | 6 epochs, min | fits a session ({SLOWDOWN}× that ≤ "
          f"{SESSION_MIN} min) | machine |\n|---|---|---|---|---|---|---|")
  rows = []
  for c in files.read_jsonl(path)[0]:
    minutes = c["epochs"] * c["steps_per_epoch"] / c["steps_per_s"] / 60
    rows.append(f"| {c['cell']} | {c['num_params']:,} | {c['steps_per_epoch']:,} | {c['steps_per_s']:.2f} | "
                f"{minutes:.0f} | {'yes' if SLOWDOWN * minutes <= SESSION_MIN else 'no'} | {c['host']['cpu']}, "
                f"{c['host']['cpu_count']} cores |")
  return "\n".join([head, *rows])


def figure(cells: dict, png: Path) -> Path | None:
  """The gap tied − untied (test bits per byte) against D, a line per vocabulary; shaded: ± twice the larger seed
  sd (the reading's bar) where both arms have two seeds or more; hollow points: a side with one seed; stars: the
  published gaps (`PUBLISHED`)."""
  gaps = {key: _gap(cells, key) for key in cells if key[2] == "tied" and _gap(cells, key)}
  if not gaps:
    return None
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(6.5, 4.2))
  for i, vocab in enumerate(VOCABS):
    keys = sorted(k for k in gaps if k[0] == vocab)
    if not keys:
      continue
    xs, ys = [k[1] for k in keys], [gaps[k][0] for k in keys]
    bars = [2 * max(statistics.stdev(_bpb(cells[k])), statistics.stdev(_bpb(cells[(*k[:2], "untied")])))
            if min(len(cells[k]), len(cells[(*k[:2], "untied")])) > 1 else None for k in keys]
    ax.plot(xs, ys, color=f"C{i}", label=_vocab_label(vocab))
    ax.scatter(xs, ys, color=f"C{i}", facecolors=[f"C{i}" if b is not None else "none" for b in bars], zorder=3)
    banded = [(x, y, b) for x, y, b in zip(xs, ys, bars) if b is not None]
    if banded:  # the bar shows a lone point's band, which fill_between cannot
      ax.errorbar([x for x, _, _ in banded], [y for _, y, _ in banded], yerr=[b for _, _, b in banded], fmt="none",
                  ecolor=f"C{i}", capsize=3)
      ax.fill_between([x for x, _, _ in banded], [y - b for _, y, b in banded], [y + b for _, y, b in banded],
                      color=f"C{i}", alpha=0.15)
  for source, _, vocab, width, corpus, _, gap, _ in PUBLISHED:
    ax.scatter([width], [gap], marker="*", s=90, color="black", zorder=3,
               label=f"{source.split(' (')[0]}: {vocab}, {corpus.split(' (')[0]} (published, another setup)")
  ax.axhline(0, color="grey", linewidth=0.8)
  ax.set_xscale("log", base=2)
  widths = sorted({k[1] for k in gaps} | {p[3] for p in PUBLISHED})
  ax.set_xticks(widths, [str(d) for d in widths])
  ax.set_xlabel("width D")
  ax.set_ylabel("tied − untied, test bits per byte (< 0: tying helps)")
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15))
  fig.savefig(png, dpi=100, bbox_inches="tight")
  plt.close(fig)
  return png


def _machine(r: dict) -> str:
  """A run's machine: its CPU, or its accelerator and matmul precision (a GPU queue's job)."""
  if r["host"].get("platform", "cpu") == "cpu":
    return f"{r['host']['cpu']}, {r['host']['cpu_count']} cores"
  return f"{r['device_kind']}, matmul precision {r['matmul_precision']}"


def build_surface(name: str, out_root: Path, runs_dir: Path | None = None, readme: Path | None = None) -> str:
  report_dir = _report_dir(name, out_root, runs_dir)
  cells, grid = load_surface(report_dir)
  runs = list({r["_dir"]: r for group in (*cells.values(), *grid.values()) for r in group}.values())
  texts = {(r["corpus"]["test"]["words"], r["corpus"]["test"]["bytes"]) for r in runs}
  if len(texts) > 1:
    raise ReportError(f"the surface's runs scored different test texts (words, bytes): {sorted(texts)}")
  lead = ("The Transformer LM of configs/tying_surface.py on WikiText-2, its text cut into sentencepiece BPE pieces or "
          "kept as words; every cell scored in bits per byte of the same test text"
          + (f" ({next(iter(texts))[1]:,} UTF-8 bytes)" if texts else "")
          + ": Σ NLL / ln 2 / bytes. Several seeds: mean ± sample sd (each seed); a difference is read against "
          "twice the larger seed sd of its two sides (`against_spread`); a side with one seed is not read.")
  tab = "\n\n".join([
      "### The cells\n\n" + cells_table(cells),
      '### "Tie small, untie large"? What the read cells say\n\n' + reading(cells),
      "### Where the gap lies: tied − untied by the target's count in the training text (share of the test "
      "targets)\n\n" + frequency_table(cells),
      "### The matrices (CKA: linear CKA over the types seen in training; ρ₄: Table-4 ρ over the 2,000 most "
      "frequent)\n\n" + mechanism_table(cells),
      "### Published gaps at one configuration each (not runs of this project; beside the curve as a star)\n\n"
      + published_table(),
      "### The learning-rate and dropout grid (validation)\n\n" + grid_table(grid),
      "### What a cell costs on this CPU (the machine otherwise idle)\n\n" + cost_table(report_dir)])
  png = figure(cells, report_dir / "gap.png")
  prov = "\n".join(
      f"- `{r['_dir']}`: seed {r['seed']}, {r['epochs']:.0f} epochs, {r['wall_s'] / 60:.0f} min wall, "
      f"{r['train_tokens_per_s']:,.0f} train tokens/s; commit `{(r.get('versions') or {}).get('wt_jax_commit')}`; "
      f"machine: {_machine(r)}" for r in sorted(runs, key=lambda r: r["_dir"]))
  _write(name, report_dir, readme, "The tying surface: when should a model tie?", lead, tab, png,
         "tied − untied against width", f"Command: `{COMMAND}`\n\n{prov or 'No finished run yet.'}", "The study page")
  return tab
