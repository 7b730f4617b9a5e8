"""Press & Wolf's Table 8 (and Table 1) analogue on Multi30k: attention NMT in three tying modes; BLEU,
parameters and the joint BPE's subword overlap."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from experiments.reports.pages import _report_dir, _write
from experiments.reports.records import CURVE, differences, read_results, seeds_cell
import wt_jax.files as files

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


def load_nmt_runs(report_dir: Path) -> dict[tuple[str, str], list[dict]]:
  """(target language, tying mode) → the results.json of its runs, each with its per-epoch history."""
  runs: dict[tuple[str, str], list[dict]] = {}
  for path in sorted(report_dir.glob("*/results.json")):
    r = read_results(path, ("config", "tgt_lang", "tying"))  # (an LM run has neither)
    r["_dir"] = path.parent.name
    r["_bleu_curve"] = [(rec["epoch"], rec["valid_bleu_greedy"]) for rec in files.read_jsonl(path.parent / CURVE)[0]]
    runs.setdefault((r["tgt_lang"], r["tying"]), []).append(r)
  for rs in runs.values():
    rs.sort(key=lambda r: r.get("seed", 0))
  return runs


def _epochs(r: dict) -> str:
  return f"{r['best_epoch']} / {r['epochs']:g}"


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
          f"| {seeds_cell([r['valid_bleu'] for r in rs])} | {seeds_cell([r['test_bleu'] for r in rs])} "
          f"| {seeds_cell([r['valid_ppl'] for r in rs])} | {seeds_cell([r['test_ppl'] for r in rs])} "
          f"| {', '.join(_epochs(r) for r in rs)} | {paper} |")
  return "\n".join(lines)


def spread_readings(spec: NmtReportSpec, runs: dict[tuple[str, str], list[dict]]) -> str:
  """Markdown: per pair, each tied mode's mean BLEU minus the baseline's, valid and test, each read against twice
  the larger seed sd of the two rows (`records.differences`)."""
  lines = []
  for tgt in spec.pairs:
    base = runs.get((tgt, "none"), [])
    for row in spec.rows[1:]:
      rs = runs.get((tgt, row.tying), [])
      if not base or not rs:
        continue
      seeds = lambda runs_: ", ".join(str(r.get("seed", 0)) for r in runs_)
      text = differences(*({split: [r[f"{split}_bleu"] for r in runs_] for split in ("valid", "test")}
                           for runs_ in (base, rs)))
      lines.append(f"- en→{tgt}, {row.label} − {spec.rows[0].label} (seeds {seeds(rs)} / {seeds(base)}): {text}.")
  if not lines:
    return ""
  return ("Against the seed spread (each difference of two rows' mean BLEU, against twice the larger sample sd of "
          "the two rows; a row of one seed has none):\n\n" + "\n".join(lines))


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
  """Greedy validation BLEU per epoch: one panel per language pair, one line per run, a colour per tying mode."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, len(spec.pairs), figsize=(5 * len(spec.pairs), 4), squeeze=False)
  drawn = False
  for ax, tgt in zip(axes[0], spec.pairs):
    for i, row in enumerate(spec.rows):
      rs = [r for r in runs.get((tgt, row.tying), []) if r["_bleu_curve"]]
      seeds = ", ".join(str(r.get("seed", 0)) for r in rs)
      for j, r in enumerate(rs):  # one legend entry per mode, naming its seeds
        xs, ys = zip(*r["_bleu_curve"])
        label = f"{row.label} (seed{'s' if len(rs) > 1 else ''} {seeds})" if j == 0 else "_nolegend_"
        ax.plot(xs, ys, color=f"C{i}", marker="o", markersize=3, label=label)
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
        cmd += f" --config.seed={r['seed']}" if r.get("seed") else ""  # (records before seeds were kept: seed 0)
        commit = (r.get("versions") or {}).get("wt_jax_commit") or "not recorded"
        # wall_s is the last session's (a resumed run that only decoded took a minute): say so
        wall = (f"{r['train_s'] / 60:.0f} min training" +
                (f" (the last session, which resumed it, {r['wall_s'] / 60:.0f} min wall)"
                 if r["wall_s"] < r["train_s"] else f", {r['wall_s'] / 60:.0f} min wall"))
        lines.append(f"- `{r['_dir']}`: `{cmd}` — commit of its last session `{commit}`, machine: {machine}; {r['epochs']:g} epochs, "
                     f"{wall}; beam "
                     f"{r['beam']}, length α {r['length_alpha']}; BLEU `{r['bleu_signature']}`; "
                     f"test translations: `runs/nmt/{r['_dir']}/test.hyp.txt` (in the run's workdir)")
  return "\n".join(lines)


def build_nmt(name: str, out_root: Path, runs_dir: Path | None = None, readme: Path | None = None) -> str:
  """Import (optionally), then write the NMT report (Table 8 and Table 1 analogues); returns the tables."""
  spec = NMT_REPORTS[name]
  report_dir = _report_dir(name, out_root, runs_dir)
  runs = load_nmt_runs(report_dir)
  readings = spread_readings(spec, runs)
  tab = (f"{nmt_table(spec, runs)}\n\n" + (f"{readings}\n\n" if readings else "")
         + f"Table 1 analogue (subwords of the joint BPE):\n\n{subword_table(spec, runs)}")
  png = nmt_figure(spec, runs, report_dir / "valid_bleu.png")
  lead = (f"Paper: {spec.source}. Ours: Multi30k task 1 (train 29,000 pairs; valid = val, "
          f"test = test_2016_flickr), BLEU by sacrebleu on detokenised beam-search output of the parameters "
          f"with the best greedy validation BLEU. The paper's BLEU is on WMT and not comparable; its relative "
          f"sizes are.")
  _write(name, report_dir, readme, spec.title, lead, tab, png, "validation BLEU",
         nmt_provenance(spec, name, runs), "Runs, commands, code commits, machine and test translations")
  return tab
