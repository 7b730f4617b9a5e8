"""experiments.embeddings: Tables 2–4 from the checkpoints of tiny trained runs."""
import subprocess
import sys

import numpy as np
import pytest

from experiments import embeddings as tables_lib
from tests.conftest import REPO, tiny_config, write_corpus
from tests.test_skipgram_train import _config as w2v_config, _sentences
from wt_jax.analysis import embeddings as emb
from wt_jax.data import ptb
from wt_jax.errors import InputError
from wt_jax.train import lm, skipgram


def _wordsim(root, vocab=40):
  """Five small similarity sets over the generated corpora's words w0…w{vocab-1}, plus one unknown word."""
  rng = np.random.default_rng(0)
  (root / "wordsim").mkdir(parents=True, exist_ok=True)
  for name, fname in emb.WORDSIM.items():
    rows = [f"w{a}\tw{b}\t{rng.uniform(0, 10):.2f}" for a, b in rng.integers(0, vocab, size=(12, 2))]
    rows.append("w1\tzebra\t5.0")  # never in the vocabulary: excluded and counted
    (root / "wordsim" / fname).write_text("\n".join(rows) + "\n")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  root = tmp_path_factory.mktemp("emb")
  write_corpus(root / "ptb", vocab=30)
  _wordsim(root)
  corpus = ptb.load(str(root), download=False)
  for tying in ("untied", "tied"):
    skipgram.fit_skipgram(w2v_config(tying=tying, num_epochs=1), _sentences(), root / f"w2v_{tying}")
    lm.fit(tiny_config(max_steps=6, words=dict(mode=tying)), corpus, root / f"lm_{tying}")
  return root


def test_tables_from_checkpoints(runs):
  w2v, lm = (runs / "w2v_untied", runs / "w2v_tied"), (runs / "lm_untied", runs / "lm_tied")
  t = tables_lib.build_tables(w2v, lm, "ptb", str(runs))
  for key in ("table2", "table3"):
    assert set(t[key]["rho"]) == {"input", "output", "tied"}
    for row in t[key]["rho"].values():
      assert set(row) == set(emb.WORDSIM)
      assert all(r["pairs"] == 13 and r["covered"] <= 12 and np.isfinite(r["rho"]) for r in row.values())
  # Table 4 from the checkpoints equals the direct computation on the saved matrices.
  mats = tables_lib.three_embeddings(*lm)
  assert mats["input"].shape == mats["tied"].shape == (31, 16)
  assert t["table4"]["LM (ptb)"]["out_tied"] == pytest.approx(emb.pairwise_distance_rho(mats["output"], mats["tied"]))
  assert t["table4"]["word2vec"]["vocab"] == 40
  md = tables_lib.to_markdown(t)
  assert "Table 2: word2vec" in md and "Table 3: LM" in md and "ρ(Out, Tied)" in md
  # The paper's values stand beside ours: Table 2's text8 word2vec, Table 3's PTB columns, Table 4's rows.
  assert "| input | 0.30 / " in md and "| tied | 0.17 / " in md  # Table 2, SimLex-999
  assert "| input | 0.02 / " in md and "| output | 0.13 / " in md  # Table 3, PTB, SimLex-999
  assert "| LM (ptb) | 31 | NNLM(S) | 0.13 / " in md and "| not run here | — | NNLM(L) | 0.16 / — |" in md
  assert t["table2"]["training"]["tied"]["epochs"] == 1 and t["table3"]["corpus"] == "ptb"


def test_table2_reading_states_a_contradiction_with_its_evidence():
  rho = {role: {s: {"rho": v, "covered": 5, "pairs": 9} for s, v in zip(emb.WORDSIM, vals)}
         for role, vals in (("input", [.2] * 5), ("output", [.2] * 5), ("tied", [.3] * 5))}
  training = {"untied": {"tokens": 1000, "epochs": 5, "loss_first": 2.7, "loss_last": 2.3},
              "tied": {"tokens": 1000, "epochs": 5, "loss_first": 4.13, "loss_last": 4.08}}
  md = tables_lib.to_markdown({"table2": {"source": "x", "rho": rho, "training": training}})
  assert "below both the input and the output embedding on 0 of 5 sets (paper: 5 of 5)" in md
  assert "contradicts the paper's Table 2" in md and "1,000 training words" in md and "from 4.130" in md
  rho["tied"] = {s: {"rho": .1, "covered": 5, "pairs": 9} for s in emb.WORDSIM}
  md = tables_lib.to_markdown({"table2": {"source": "x", "rho": rho}})
  assert "on 5 of 5 sets (paper: 5 of 5). Agrees with the paper." in md and "contradicts" not in md


def test_rerender_from_committed_files(runs, tmp_path):
  """tables.md can be rebuilt from tables.json and the word2vec runs' results.json, without checkpoints."""
  import json
  import shutil
  t = tables_lib.build_tables((runs / "w2v_untied", runs / "w2v_tied"), None, "ptb", str(runs))
  del t["table2"]["training"]  # as in a tables.json written before the training summary existed
  (tmp_path / "tables.json").write_text(json.dumps(t))
  for k in ("untied", "tied"):
    (tmp_path / f"w2v_{k}").mkdir()
    shutil.copy(runs / f"w2v_{k}" / "results.json", tmp_path / f"w2v_{k}" / "results.json")
  md = tables_lib.rerender(tmp_path)
  assert (tmp_path / "tables.md").read_text() == md + "\n" and "0.30 / " in md
  assert json.loads((tmp_path / "tables.json").read_text())["table2"]["training"]["untied"]["epochs"] == 1


def test_saved_params_are_the_trained_ones(runs):
  """restore_saved (no target) gives the same matrices as the loop's own restore."""
  import jax
  from wt_jax import models
  from wt_jax.train import optim
  from wt_jax.train.checkpoint import Checkpoints
  config = tiny_config(max_steps=6, words=dict(mode="untied"))
  model = models.build(config)
  params = models.init_params(model, config, jax.random.key(0))
  ck = Checkpoints(runs / "lm_untied" / "checkpoints")
  saved, _ = ck.restore_saved("last")
  assert int(saved["step"]) == 6
  tx = optim.make_optimizer(config, 10)
  target = {**saved, "params": params, "opt_state": tx.init(params)}
  restored, _ = ck.restore("last", jax.tree_util.tree_map(np.asarray, target))
  np.testing.assert_array_equal(saved["params"]["words"]["out_embedding"],
                                restored["params"]["words"]["out_embedding"])


def test_wrong_pairs_fail_clearly(runs):
  with pytest.raises(ValueError, match="not an untied run"):
    tables_lib.three_embeddings(runs / "lm_tied", runs / "lm_tied")
  with pytest.raises(ValueError, match="not a tied run"):
    tables_lib.three_embeddings(runs / "lm_untied", runs / "lm_untied")
  with pytest.raises(ValueError, match="different vocabularies"):
    tables_lib.three_embeddings(runs / "w2v_untied", runs / "lm_tied")
  # A pair given the other way round is named as such; a run of another kind or corpus than its flags say is
  # refused from its checkpoint's config.
  with pytest.raises(InputError, match="lm_untied an untied one: --lm_untied and --lm_tied swapped"):
    tables_lib.three_embeddings(runs / "lm_tied", runs / "lm_untied", "lm")
  with pytest.raises(InputError, match="w2v_untied is not a language-model run"):
    tables_lib.three_embeddings(runs / "w2v_untied", runs / "lm_tied", "lm")
  with pytest.raises(InputError, match="lm_untied is not a word2vec run"):
    tables_lib.three_embeddings(runs / "lm_untied", runs / "w2v_tied", "w2v")
  with pytest.raises(InputError, match="was trained on ptb, not wikitext2: give --lm_corpus=ptb"):
    tables_lib.three_embeddings(runs / "lm_untied", runs / "lm_tied", "lm", "wikitext2")
  for ok in ("ptb", None):
    assert set(tables_lib.three_embeddings(runs / "lm_untied", runs / "lm_tied", "lm", ok)) == {"input", "output",
                                                                                                "tied"}
  config = {"model": "lstm_lm", "dataset": "wikitext2_half1"}  # a half of WikiText-2 has its vocabulary
  tables_lib.check_run("run", config, "lm", "wikitext2")
  tables_lib.check_run("run", {}, "w2v")  # (a checkpoint without a config is not checked)
  with pytest.raises(InputError, match="not a language-model run .its model: NMT"):
    tables_lib.check_run("run", {"dataset": "multi30k"}, "lm")


@pytest.mark.slow
def test_entry_point(runs, tmp_path):
  r = subprocess.run([sys.executable, "-m", "experiments.embeddings", f"--w2v_untied={runs / 'w2v_untied'}",
                      f"--w2v_tied={runs / 'w2v_tied'}", f"--data_dir={runs}", f"--tables_dir={tmp_path}"],
                     cwd=REPO, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  assert "Table 2: word2vec" in r.stdout and (tmp_path / "tables.json").is_file()


def test_the_entry_points_refusals_are_one_line_each(runs, tmp_path):
  """`main` as the entry point runs it (`experiments.one_line`): half a pair of flags; a run folder with no
  checkpoint; the pair swapped; --rerender where no tables were built: one line each, nothing written."""
  from tests.in_process import main_ends_with
  ends = lambda **flag_values: main_ends_with(tables_lib.main, ["embeddings"], **flag_values)
  assert "go together" in ends(lm_untied=str(runs / "lm_untied"))
  out = tmp_path / "fresh"
  for flag_values, says in (
      (dict(lm_untied=str(tmp_path / "none"), lm_tied=str(runs / "lm_tied")), "checkpoint"),
      (dict(lm_untied=str(runs / "lm_tied"), lm_tied=str(runs / "lm_untied")), "swapped?"),
      (dict(rerender=True), "No tables.json in")):
    line = ends(**flag_values, data_dir=str(runs), tables_dir=str(out))
    assert line is not None and "\n" not in line and says in line, line
    assert not out.exists()


def test_table4_over_a_word_sample_is_the_all_pairs_measure_on_those_rows():
  """--table4_words: the three ρ over the pairs among a seeded random subset of the words, the same rows of
  every matrix, recorded with the sample; a sample at least the vocabulary's size is all words."""
  rng = np.random.default_rng(3)
  mats = {k: rng.normal(size=(60, 5)) for k in ("input", "output")}
  mats["tied"] = mats["output"] + 0.5 * rng.normal(size=(60, 5))
  row = tables_lib.correlation_row(mats, words=25, seed=7)
  rows = np.sort(np.random.default_rng(7).choice(60, 25, replace=False))
  assert row["out_tied"] == pytest.approx(emb.pairwise_distance_rho(mats["output"][rows], mats["tied"][rows]))
  assert row["in_tied"] == pytest.approx(emb.pairwise_distance_rho(mats["input"][rows], mats["tied"][rows]))
  assert (row["sampled_words"], row["sample_seed"]) == (25, 7)
  assert row["out_tied"] != pytest.approx(tables_lib.correlation_row(mats, words=25, seed=8)["out_tied"])
  full = tables_lib.correlation_row(mats)
  assert tables_lib.correlation_row(mats, words=60) == full and "sampled_words" not in full


def test_the_quality_record_of_a_wt_jax_run_and_of_a_gensim_one(runs, tmp_path):
  """experiments.studies.w2v_quality: a wt_jax run's record names its step and holds the five ρ of its checkpoint's
  matrices; a gensim folder's (vectors.npz, vocab.txt in gensim's row order) the ρ of its rows by its own vocabulary."""
  import json
  from experiments.studies import w2v_quality
  record = w2v_quality.measure(runs / "w2v_untied", str(runs))
  mats, _ = tables_lib.run_embeddings(runs / "w2v_untied")
  want = tables_lib.similarity_table({"input": mats["embedding"], "output": mats["out_embedding"]},
                                     tables_lib.run_vocab(runs / "w2v_untied"), str(runs))
  assert record["similarity"] == want and (record["scheme"], record["tying"], record["seed"]) == ("pairs", "untied", 0)
  assert set(w2v_quality.measure(runs / "w2v_tied", str(runs))["similarity"]) == {"tied"}
  g = tmp_path / "ptb_gensim_untied_seed1"
  g.mkdir()
  words = [f"w{i}" for i in range(40)][::-1]  # (another row order than the wt_jax run's)
  rng = np.random.default_rng(1)
  U, V = rng.normal(size=(40, 8)), rng.normal(size=(40, 8))
  np.savez(g / "vectors.npz", embedding=U, out_embedding=V)
  (g / "vocab.txt").write_text("".join(w + "\n" for w in words))
  (g / "gensim.json").write_text(json.dumps({"gensim": "4.4.0", "dataset": "ptb", "seed": 1, "workers": 2, "epochs": 5,
                                             "train_s": 1.0, "in_vocab_words_per_s": 1e5, "dim": 8, "window": 5,
                                             "negative": 5, "sample": 1e-3}))
  record = w2v_quality.measure(g, str(runs))
  vocab = {w: i for i, w in enumerate(words)}
  assert record["similarity"] == tables_lib.similarity_table({"input": U, "output": V}, vocab, str(runs))
  assert (record["scheme"], record["seed"], record["devices"]) == ("gensim", 1, 2)
  assert w2v_quality.measure(tmp_path, str(runs)) is None  # (no run in it)
