"""The interchange export (`wt_jax.interchange`): a reader with numpy and safetensors alone
(tests/numpy_reader.py) rebuilds the project's logits from the files, tied and untied, LSTM and Transformer; a
tied matrix is stored once, and a reader that takes it in one role only is caught."""
import ast
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from configs import transformer
from tests import numpy_reader
from tests.conftest import tiny_config
from wt_jax import interchange, trained_lm
from wt_jax.train import lm

FAMILIES = {"lstm": lambda **kw: tiny_config(**kw),
            "transformer": lambda **kw: _transformer(**kw)}


def _transformer(**kw):
  c = transformer.get_config()
  c.update_from_flattened_dict({"vocab_size": 31, "hidden_size": 16, "num_layers": 2, "num_heads": 2, "mlp_size": 32,
                                "bptt": 8, "memory": 4, "test_window": 8, "batch_size": 4, "eval_batch_size": 4,
                                "words.input_scale": True, **kw})
  return c


@pytest.fixture(scope="module")
def exports(tiny_corpus, tmp_path_factory):
  """(family, mode) → (the export folder, its config.json, the run folder), trained on first use."""
  cache = {}

  def get(family, mode):
    if (family, mode) not in cache:
      workdir = tmp_path_factory.mktemp(f"{family}_{mode}")
      config = FAMILIES[family](max_steps=3, plot=False, **{"words.mode": mode})
      lm.fit(config, tiny_corpus[0], workdir)
      out, written = interchange.export_model(workdir, workdir / "export")
      cache[family, mode] = out, written, workdir
    return cache[family, mode]

  return get


def _project_logits(workdir, ids):
  run = trained_lm.load(workdir, "last")
  logits, _ = run.model.apply({"params": run.params}, jnp.asarray(ids)[None], run.model.initial_carry(1))
  return np.asarray(logits[0], np.float64)


IDS = [3, 7, 7, 1, 0, 12, 30, 5]


FAMILY_CASES = ["lstm", pytest.param("transformer", marks=pytest.mark.slow)]  # (the same code path; 12 s more)


@pytest.mark.parametrize("family", FAMILY_CASES)
@pytest.mark.parametrize("mode", ["untied", "tied"])
def test_numpy_reader_rebuilds_the_logits(exports, family, mode):
  out, config, workdir = exports(family, mode)
  np.testing.assert_allclose(numpy_reader.logits(out, IDS), _project_logits(workdir, IDS), atol=1e-5, rtol=0)
  assert config["tie_word_embeddings"] == (mode == "tied")
  assert (Path(out) / "vocab.txt").read_text().splitlines()[:2] == trained_lm.load(workdir).vocab.words[:2]


@pytest.mark.parametrize("family", FAMILY_CASES)
def test_a_tied_matrix_is_stored_once_and_a_one_role_reader_fails(exports, family):
  from safetensors import safe_open
  tied, untied = exports(family, "tied")[0], exports(family, "untied")[0]
  with safe_open(str(tied / "model.safetensors"), "np") as f:
    names, meta = set(f.keys()), f.metadata()
  assert "words.embedding" in names and "words.out_embedding" not in names
  assert meta["tie_word_embeddings"] == "true" and "output layer" in meta["words.embedding"]
  V, D = 31, 16
  sizes = {m: Path(str(exports(family, m)[0] / "model.safetensors")).stat().st_size for m in ("tied", "untied")}
  assert sizes["untied"] - sizes["tied"] == pytest.approx(V * D * 4, abs=300)  # (the headers differ a little)
  # a reader that expects an output matrix of its own and, missing one, makes it up (as a loader initialising a
  # "missing" head would) is caught by the comparison
  one_role = lambda t, c: t.get("words.out_embedding", np.zeros_like(t["words.embedding"]))
  workdir = exports(family, "tied")[2]
  assert not np.allclose(numpy_reader.logits(tied, IDS, one_role), _project_logits(workdir, IDS), atol=1e-5)
  np.testing.assert_allclose(numpy_reader.logits(untied, IDS, lambda t, c: t["words.out_embedding"]),
                             numpy_reader.logits(untied, IDS), atol=0)


def test_the_reader_imports_numpy_and_safetensors_only():
  tree = ast.parse(Path(numpy_reader.__file__).read_text())
  imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
  imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
  assert imported <= {"json", "pathlib", "numpy", "safetensors"}
