"""Where the field stands: the published PTB and WikiText-2 perplexities of the models language-model papers compare
against, beside this project's rows read from its committed records (`python -m experiments.report field`).

The published numbers are data here (`PUBLISHED`), each with its source and how it was checked: "paper" (read in the
paper's own text: its abstract or tables), "cited" (read in another paper's table that quotes it, Yang et al. 2018's
Tables 1 and 2, not in its own). Ours come from results/<study>/ (`OURS`): each row's test perplexities, every seed.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from experiments.reports import pages, records

# (corpus, model, params, valid, test, dynamic evaluation?, source, checked)
MERITY, YANG, KRAUSE, MELIS20, MELIS18 = (
    "Merity et al. 2018 (arXiv 1708.02182)", "Yang et al. 2018 (arXiv 1711.03953)",
    "Krause et al. 2018 (arXiv 1709.07432)", "Melis et al. 2020 (arXiv 1909.01792)",
    "Melis et al. 2018 (arXiv 1707.05589)")
PUBLISHED = [
    ("PTB", "AWD-LSTM (3-layer, tied, finetuned)", "24M", 60.0, 57.3, "no", MERITY, "test: paper; valid: cited"),
    ("PTB", "AWD-LSTM + continuous cache pointer", "24M", 53.9, 52.8, "no (cache)", MERITY,
     "test: paper; valid: cited"),
    ("PTB", "AWD-LSTM + dynamic evaluation", "24M", 51.6, 51.1, "yes", KRAUSE, "test: paper; valid: cited"),
    ("PTB", "Melis et al.'s tuned LSTM (4 layers, skip connections)", "24M", 60.9, 58.3, "no", MELIS18, "cited"),
    ("PTB", "AWD-LSTM-MoS", "22M", 56.54, 54.44, "no", YANG, "paper"),
    ("PTB", "AWD-LSTM-MoS + dynamic evaluation", "22M", 48.33, 47.69, "yes", YANG, "paper"),
    ("PTB", "Mogrifier LSTM", "24M", 52.1, 51.0, "no", MELIS20, "paper"),
    ("PTB", "Mogrifier LSTM + dynamic evaluation", "24M", 45.1, 45.0, "yes", MELIS20, "paper"),
    ("WikiText-2", "AWD-LSTM (3-layer, tied, finetuned)", "33M", 68.6, 65.8, "no", MERITY,
     "test: paper; valid: cited"),
    ("WikiText-2", "AWD-LSTM + continuous cache pointer", "33M", 53.8, 52.0, "no (cache)", MERITY,
     "test: paper; valid: cited"),
    ("WikiText-2", "AWD-LSTM + dynamic evaluation", "33M", 46.4, 44.3, "yes", KRAUSE, "test: paper; valid: cited"),
    ("WikiText-2", "Melis et al.'s tuned LSTM", "24M", 69.1, 65.9, "no", MELIS18,
     "cited (its own table not read; another source gives valid 69.3)"),
    ("WikiText-2", "AWD-LSTM-MoS", "35M", 63.88, 61.45, "no", YANG, "paper"),
    ("WikiText-2", "AWD-LSTM-MoS + dynamic evaluation", "35M", 42.41, 40.68, "yes", YANG, "paper"),
    ("WikiText-2", "Mogrifier LSTM (with a 2-component MoS)", "35M", 58.7, 56.6, "no", MELIS20, "paper"),
    ("WikiText-2", "Mogrifier LSTM (MoS2) + dynamic evaluation", "35M", 40.6, 39.0, "yes", MELIS20, "paper"),
]

# (corpus, our row, study folder, the run folders' names (every seed), the study page)
OURS = [
    ("PTB", "small LSTM + WT (Press & Wolf Table 6)", "ptb_table6", "small_tied_seed", "ptb_table6"),
    ("PTB", "small VD-LSTM + REAL (Inan et al. Table 1, retrained)", "inan_ptb_table1", "small_real_keep", "inan_ptb_table1"),
    ("PTB", "large LSTM + BD + WT (Press & Wolf Table 5; one H200)", "table5", "large_bd_tied_seed", "table5"),
    ("WikiText-2", "Transformer, tied, input × √D (ours)", "transformer_wikitext2", "wikitext2_tied_sqrt_d",
     "transformer_wikitext2"),
    ("WikiText-2", "small LSTM + WT, sampled softmax (ours)", "softmax_study_wt2", "small_tied_sampled_k3300_seed",
     "softmax_study_wt2"),
]


def _our_rows(out_root: Path) -> list[tuple]:
  """(corpus, row, params, test perplexities of every seed, page) from the committed results.json files. For Inan
  et al.'s retrained rows only the retrained runs (`_s2`) count."""
  rows = []
  for corpus, label, study, prefix, page in OURS:
    found = []
    for path in sorted((out_root / study).glob(f"{prefix}*/results.json")):
      name = path.parent.name
      if study == "inan_ptb_table1" and not name.endswith("_s2"):
        continue
      found.append(json.loads(path.read_text()))
    if not found:
      raise records.ReportError(f"no runs {prefix}* in {out_root / study}")
    params = statistics.mean(r["num_params"] for r in found) / 1e6
    rows.append((corpus, label, f"{params:.1f}M", [r["test_ppl"] for r in found], page))
  return rows


def build_field(name: str, out_root: Path, runs_dir: Path | None, readme: Path | None) -> str:
  """The page results/field/README.md: the published rows, then ours, per corpus."""
  if runs_dir is not None:
    raise records.ReportError("the field page imports no runs: it reads the other studies' records")
  report_dir = out_root / name
  report_dir.mkdir(parents=True, exist_ok=True)
  ours = _our_rows(out_root)
  parts = []
  for corpus in ("PTB", "WikiText-2"):
    lines = [f"### {corpus}", "", "| model | params | valid | test | dynamic eval. | source | checked |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {m} | {p} | {v} | {t} | {d} | {s} | {c} |" for c0, m, p, v, t, d, s, c in PUBLISHED if c0 == corpus]
    lines += [f"| **wt_jax**: {label} | {p} | — | {records.seeds_cell(tests)} ({len(tests)} seed"
              f"{'s' if len(tests) > 1 else ''}) | no | [its page](../{page}/README.md) | our record |"
              for c0, label, p, tests, page in ours if c0 == corpus]
    parts.append("\n".join(lines))
  tab = "\n\n".join(parts)
  lead = ("Published single-model perplexities (word level, as each paper reports them) of the models papers compare "
          "against, and this project's best rows of each kind, read from their records. "
          "'checked: paper' is a number read in the paper's own text; 'cited' one read in another paper's table "
          "that quotes it (Yang et al. 2018's Tables 1 and 2).")
  pages.write_page(report_dir / "README.md", name, "Where the field stands: PTB and WikiText-2",
                   f"{lead}\n\n{tab}\n\nRebuild: `python -m experiments.report {name}`")
  return tab
