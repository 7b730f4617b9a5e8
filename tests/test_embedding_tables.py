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


def test_entry_point(runs, tmp_path):
  r = subprocess.run([sys.executable, "-m", "experiments.embeddings", f"--w2v_untied={runs / 'w2v_untied'}",
                      f"--w2v_tied={runs / 'w2v_tied'}", f"--data_dir={runs}", f"--tables_dir={tmp_path}"],
                     cwd=REPO, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  assert "Table 2: word2vec" in r.stdout and (tmp_path / "tables.json").is_file()
  r = subprocess.run([sys.executable, "-m", "experiments.embeddings", f"--lm_untied={runs / 'lm_untied'}"],
                     cwd=REPO, capture_output=True, text=True, timeout=300)
  assert r.returncode != 0 and "go together" in r.stderr
