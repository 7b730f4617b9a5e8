"""Every paper value the reports print, read again from the plain-text renderings of the papers.

The renderings live outside the repository (`<repo>/../shared/papers`, or $WT_JAX_PAPERS); without them the
test skips. Both renderings of Press & Wolf are checked where the table survives in them (their Table 5 lost
a row in one); tables are matched by their numbers' order, with separators ('|', runs of spaces) dropped.
"""
import os
import re
from pathlib import Path

import pytest

from experiments import embeddings as tables_lib
from experiments.reports import lm_tables, nmt
from tests.conftest import REPO
from wt_jax.analysis import embeddings as emb

PAPERS = Path(os.environ.get("WT_JAX_PAPERS", REPO.parent / "shared" / "papers"))
PRESS_WOLF = ("press_wolf_2017_a.txt", "press_wolf_2017_b.txt")
NUM = r"(\d+\.\d+)"


def _text(name: str) -> str:
  path = PAPERS / name
  if not path.is_file():
    pytest.skip(f"{path} not found (the papers' text renderings)")
  text = path.read_text(encoding="utf-8").replace("\\rightarrow", "→")
  return re.sub(r"[ \t|]+", " ", text)


def _rows(text: str, label: str, n: int, line_start: bool = True) -> list[tuple[float, ...]]:
  """Every `label` (at a line's start, unless line_start is False) followed by exactly n decimal numbers
  and the end of the line, in order of appearance."""
  pattern = (r"^ ?" if line_start else r"\b") + re.escape(label) + " " + " ".join([NUM] * n) + r" ?$"
  return [tuple(float(x) for x in m) for m in re.findall(pattern, text, flags=re.M)]


@pytest.mark.parametrize("name", PRESS_WOLF)
def test_embedding_tables_2_3_4(name):
  text = _text(name)
  roles = ("input", "output", "tied")
  table2 = {"simlex999": "Simlex999", "verb143": "Verb-143", "men": "MEN", "rw": "Rare-Word", "mturk771": "MTurk-771"}
  table3 = {**table2, "verb143": "Verb143", "mturk771": "MTurk771"}
  for key, label in table2.items():
    (row,) = _rows(text, label, 3)
    assert row == tuple(tables_lib.PAPER_TABLE2[r][key] for r in roles), (key, row)
  for key, label in table3.items():
    (row,) = _rows(text, label, 6)
    ptb, text8 = tables_lib.PAPER_TABLE3["ptb"], tables_lib.PAPER_TABLE3["text8"]
    assert row == tuple(ptb[r][key] for r in roles) + tuple(text8[r][key] for r in roles), (key, row)
  assert set(tables_lib.PAPER_TABLE2["input"]) == set(emb.WORDSIM)
  t4 = tables_lib.PAPER_TABLE4
  for pair, key in (("In Out", "in_out"), ("In Tied", "in_tied"), ("Out Tied", "out_tied")):
    (row,) = _rows(text, pair, 3)
    assert row == (t4["word2vec"][key], t4["NNLM(S)"][key], t4["NNLM(L)"][key]), (pair, row)


def test_table5():
  """Table 5 as rendering b prints it (rendering a merges its rows): size, train, valid, test per row; both
  readings of the one tied BD row carry its values. (A citation there follows a no-break space.)"""
  text = _text("press_wolf_2017_b.txt").replace("\u00a0", " ")
  labels = {"large": "Large [Zaremba et al., 2014]", "large_tied": "Large + Weight Tying",
            "large_bd_wd": "Large + BD [Gal, 2015] + WD", "large_bd_wd_tied": "Large + BD + WT",
            "large_bd_tied": "Large + BD + WT", "rhn": "RHN [Zilly et al., 2016] + BD", "rhn_tied": "RHN + BD + WT"}
  for row in lm_tables.REPORTS["table5"].rows:
    (found,) = re.findall(r"^ ?" + re.escape(labels[row.config]) + r" (\d+M) " + " ".join([NUM] * 3) + r" ?$",
                          text, flags=re.M)
    assert (found[0], *map(float, found[1:])) == (row.size, row.train, row.valid, row.test), (row.config, found)


@pytest.mark.parametrize("name", PRESS_WOLF)
def test_table6_and_table7(name):
  text = _text(name)
  labels = {"small": "Small model", "small_tied": "Small + WT", "small_pr": "Small + PR",
            "small_tied_pr": "Small + WT + PR"}
  for row in lm_tables.REPORTS["ptb_table6"].rows:
    (found,) = [r for r in re.findall(r"^ ?" + re.escape(labels[row.config]) + r" (\d\.\d+M) " +
                                      " ".join([NUM] * 3) + r"\b", text, flags=re.M)]
    assert (found[0], *map(float, found[1:])) == (row.size, row.train, row.valid, row.test), found
  # Table 7: rows of four numbers after Train / Val. / Test, in the order text8, IMDB, BBC (no text8 Val.).
  train, valid, test = (_rows(text, label, 4, line_start=False) for label in ("Train", "Val.", "Test"))
  order = ("small", "small_tied", "small_pr", "small_tied_pr")
  assert len(train) == len(test) == 3 and len(valid) == 2
  for i, corpus in enumerate(("text8", "IMDB", "BBC")):
    paper = lm_tables.PAPER_TABLE7[corpus]
    assert train[i] == tuple(paper[c][0] for c in order) and test[i] == tuple(paper[c][2] for c in order)
    assert (corpus == "text8") == all(paper[c][1] is None for c in order)
  assert valid == [tuple(lm_tables.PAPER_TABLE7[c][k][1] for k in order) for c in ("IMDB", "BBC")]
  for row in lm_tables.REPORTS["bbc_table7"].rows:
    assert (row.train, row.valid, row.test) == lm_tables.PAPER_TABLE7["BBC"][row.config]


@pytest.mark.parametrize("name", PRESS_WOLF)
def test_table8_and_table1(name):
  text = _text(name)
  spec = nmt.NMT_REPORTS["nmt_table8"]
  labels = {"none": "Baseline", "decoder": "Decoder WT", "three_way": "TWWT"}
  for row in spec.rows:
    found = re.findall(r"\b" + labels[row.tying] + r" (\d+M) (\d+\.\d\d) (\d+\.\d\d)\b", text)
    # The table lists EN→FR first, then EN→DE.
    paper = {lang: (size, v, te) for lang, size, v, te in row.paper}
    assert [(s, float(v), float(te)) for s, v, te in found] == [paper["fr"], paper["de"]], found
  found = re.findall(r"EN ?→ ?(FR|DE)\$? (\d+K) (\d+K) (\d+K)", text)
  assert {lang.lower(): tuple(c) for lang, *c in found} == {p[0]: tuple(p[1:]) for p in spec.paper_subwords}


def test_inan_table1_small_rows():
  text = _text("inan_2017.txt")
  labels = {"inan_small_vd": "VDLSTM", "inan_small_al": "VDLSTM+AL", "inan_small_re": "VDLSTM+RE",
            "inan_small_real": "VDLSTM+REAL"}
  for row in lm_tables.REPORTS["inan_ptb_table1"].rows:  # each variant in both recipes and both sessions
    variant = row.config.removesuffix("_s2").removesuffix("_keep")
    first = _rows(text, labels[variant], 4)[0]  # the small network's PTB valid/test, WikiText-2 valid/test
    assert first[:2] == (row.valid, row.test), (row.config, first)


def test_inan_tables_1_and_2_every_row():
  """The Inan page's paper values (experiments/reports/inan.py BLOCKS): per variant, the text's rows with four
  numbers are small, medium (PTB valid/test, WikiText-2 valid/test) and Table 2 (first half, second half), the
  one with two numbers the large PTB row."""
  from experiments.reports import inan
  text = _text("inan_2017.txt")
  labels = {"vd": "VDLSTM", "al": "VDLSTM+AL", "re": "VDLSTM+RE", "real": "VDLSTM+REAL"}
  paper = {(b.corpus, b.size): {v: (valid, test) for v, valid, test in b.paper} for b in inan.BLOCKS}
  assert len(paper) == len(inan.BLOCKS) == 7
  for variant, label in labels.items():
    small, medium, halves = _rows(text, label, 4)
    (large,) = _rows(text, label, 2)
    assert paper[("ptb", "small")][variant] + paper[("wikitext2", "small")][variant] == small, variant
    assert paper[("ptb", "medium")][variant] + paper[("wikitext2", "medium")][variant] == medium, variant
    assert paper[("ptb", "large")][variant] == large, variant
    assert paper[("wikitext2_half1", "small")][variant] + paper[("wikitext2_half2", "small")][variant] == halves
  assert [b.table for b in inan.BLOCKS] == [1, 1, 1, 1, 1, 2, 2]
