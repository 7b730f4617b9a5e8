"""Build a paper-vs-ours report from finished runs: a Markdown table, one figure, and the study page.

    python -m experiments.report ptb_table6 --runs=runs/ptb_table6   # copy finished runs, then report
    python -m experiments.report ptb_table6                          # report from results/ptb_table6 only
    python -m experiments.report bbc_table7 --runs=runs/bbc          # Table 7's small models on BBC News
    python -m experiments.report ffnn_ptb --runs=runs/ffnn           # NNLM and LBL, tied vs untied, on PTB
    python -m experiments.report inan_ptb_table1 --runs=runs/inan    # Inan et al.'s Table 1, small, on PTB
    python -m experiments.report inan_ptb_table1 --runs=runs/inan_appA   # (its Appendix A rows)
    python -m experiments.report inan_table1_2 --runs=DIR            # Inan et al.'s Tables 1 and 2, all sizes
                                                                     # (the small PTB rows: inan_ptb_table1)
    python -m experiments.report nmt_table8 --runs=runs/nmt          # Table 8 (and Table 1) analogue, Multi30k
    python -m experiments.report table5                               # Press & Wolf Table 5 (GPU runs)
    python -m experiments.report softmax_study --runs=runs/softmax_study   # softmax approximations, tied/untied
    python -m experiments.report softmax_study_wt2 --runs=runs/softmax_study_wt2   # (the WikiText-2 pair)
    python -m experiments.report tpu_memory --runs=DIR               # TPU memory per chip: DIR holds the
                                                                     # stdout files of experiments.compile
    python -m experiments.report members --runs=DIR                  # K members against one model: DIR
                                                                     # holds bench --members_sweep lines
    python -m experiments.report sampling --runs=runs/sampling      # samples and scores of trained runs
    python -m experiments.report test_time --runs=runs/test_time_records   # the cache and dynamic evaluation
    python -m experiments.report test_time_wt2 --runs=runs/test_time_wt2_records   # (WikiText-2, by articles)
    python -m experiments.report field                                # published PTB / WikiText-2 rows and ours
    python -m experiments.report subword_tying --runs=runs/subword_tying   # tying with BPE pieces, WikiText-2
    python -m experiments.report tying_surface --runs=runs/tying_surface   # the tied − untied gap over D, vocabulary
    python -m experiments.report word2vec_speed --runs=runs/w2v_quality    # word2vec against gensim: speed, quality

With --runs, each finished run there (a folder with results.json) is imported into results/<report>/<run>/
(results.json, curve.jsonl); the table, figure and study page are then built from results/<report>/ alone, and
put back byte for byte if the build fails. How pages, markers and --readme work: experiments/reports/README.md.

This module is the entry point (flags, dispatch); the page builders are in experiments/reports/, one module per
kind of page, with the run records (records.py) and the study page's markers (pages.py) they share.
"""
from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from pathlib import Path

from absl import app, flags

from experiments import check_folder, run_main
from experiments.reports import (field, inan, lm_tables, members_speed, nmt, records, samples, softmax_study,
                                 subword, surface, test_time, tpu_memory, word2vec)

_RUNS = flags.DEFINE_string("runs", None, "Directory of run workdirs to import finished runs from.")
_OUT = flags.DEFINE_string("out", "results", "Root of the committed results; the report goes in OUT/<name>.")
_README = flags.DEFINE_string("readme", "", "A file to update between the report's markers as well as the "
                              "study page (default '': none; the top-level README.md links to the pages).")

REPORTS = lm_tables.REPORTS  # the language-model paper tables (built by lm_tables.build)
NMT_REPORTS = nmt.NMT_REPORTS  # (built by nmt.build_nmt)
# Pages with a builder of their own.
OTHER_REPORTS = {"tpu_memory": tpu_memory.build_tpu_memory, "inan_table1_2": inan.build_inan,
                 "members": members_speed.build_members_speed, "sampling": samples.build_sampling,
                 **{name: test_time.build_test_time for name in test_time.PAGES}, "field": field.build_field,
                 "subword_tying": subword.build_subword_tying, "tying_surface": surface.build_surface,
                 "word2vec_speed": word2vec.build_word2vec,
                 **{name: softmax_study.build_softmax_study for name in softmax_study.SOFTMAX_STUDIES}}


@contextlib.contextmanager
def _as_it_was_if_it_fails(paths: list[Path]):
  """While a page is built: if the build fails in any way, each of `paths` (the study's folder, the README it
  splices) is put back exactly as it was, so a record that an import copied in or a page half written never
  replaces committed files."""
  with tempfile.TemporaryDirectory() as saved:
    kept = {}
    for i, path in enumerate(paths):
      if path.is_dir():
        kept[path] = shutil.copytree(path, Path(saved) / str(i), symlinks=True)
      elif path.exists():
        kept[path] = shutil.copy2(path, Path(saved) / str(i))
    try:
      yield
    except BaseException:
      for path in paths:
        if path.is_dir() and not path.is_symlink():
          shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
          path.unlink()
        if path in kept:
          (shutil.copytree(kept[path], path, symlinks=True) if Path(kept[path]).is_dir()
           else shutil.copy2(kept[path], path))
      raise


def main(argv):
  names = [*REPORTS, *NMT_REPORTS, *OTHER_REPORTS]
  if len(argv) != 2 or argv[1] not in names:
    raise app.UsageError(f"usage: python -m experiments.report {{{','.join(names)}}} [--runs=DIR]")
  builder = (lm_tables.build if argv[1] in REPORTS else nmt.build_nmt if argv[1] in NMT_REPORTS
             else OTHER_REPORTS[argv[1]])
  check_folder(_OUT.value, "--out")
  readme = Path(_README.value) if _README.value else None
  try:
    with _as_it_was_if_it_fails([Path(_OUT.value) / argv[1], *([readme] if readme else [])]):
      tab = builder(argv[1], Path(_OUT.value), Path(_RUNS.value) if _RUNS.value else None, readme)
  except records.ReportError as e:  # a missing folder or record, a run that belongs elsewhere: one line
    sys.exit(f"{e} ({Path(_OUT.value) / argv[1]} is as it was)" if _RUNS.value else str(e))
  print(tab)


if __name__ == "__main__":
  run_main(main)
