"""Exporting a run's embeddings (word2vec text read by gensim, npz, manifest) and converting parameters between
tied and untied (Press & Wolf 2017: one shared matrix S, or an input U and an output V)."""
import dataclasses
import json
import os
import subprocess
import sys
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import REPO, tiny_config, write_corpus
from wt_jax import convert, export, models
from wt_jax.data import ptb
from wt_jax.train import lm
from wt_jax.train.checkpoint import Checkpoints

STEPS = 10


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """A tiny corpus and two tiny trained runs on it, tied and untied (STEPS steps each, no epoch ends).
  The tied run's config names its data folder; the untied one's leaves data_dir empty, as the shipped
  configs do, so its vocabulary is found through $WT_JAX_DATA."""
  root = tmp_path_factory.mktemp("data")
  write_corpus(root / "ptb")
  corpus = ptb.load(str(root), download=False)
  out = {"root": root, "corpus": corpus}
  for mode, data_dir in (("tied", str(root)), ("untied", "")):
    workdir = tmp_path_factory.mktemp(f"run_{mode}")
    lm.fit(_run_config(mode, corpus.vocab_size, data_dir), corpus, workdir)
    out[mode] = workdir
  return out


def _run_config(mode, vocab_size, data_dir=""):
  config = tiny_config(words=dict(mode=mode), vocab_size=vocab_size, max_steps=STEPS, num_epochs=1, eval_max_tokens=200,
                       data_dir=data_dir, download=False)
  config.name = f"tiny_{mode}"
  return config


def _checkpoint_params(workdir):
  ckpts = Checkpoints(workdir / "checkpoints", read_only=True)
  state, _ = ckpts.restore_saved("last")
  ckpts.close()
  return state["params"]


def _export(runs, mode, tmp_path, **kw):
  env = {"WT_JAX_DATA": str(runs["root"])} if mode == "untied" else {}
  with mock.patch.dict(os.environ, env):
    return export.export_run(runs[mode], tmp_path / "out", **kw)


# --- export ------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode,names", [("tied", ["tied"]), ("untied", ["input", "output"])])
def test_gensim_reads_the_word2vec_files_and_their_vectors_are_the_checkpoint_rows(runs, tmp_path, mode, names):
  from gensim.models import KeyedVectors  # (the `test` extra installs gensim)

  out, manifest = _export(runs, mode, tmp_path, formats=["word2vec"])
  words = runs["corpus"].vocab.words
  assert "<eos>" in words  # an angle-bracket token, written as it is
  params = _checkpoint_params(runs[mode])
  leaves = {"tied": params["words"]["embedding"], "input": params["words"]["embedding"],
            "output": params["words"].get("out_embedding")}
  assert sorted(manifest["matrices"]) == names
  for name in names:
    kv = KeyedVectors.load_word2vec_format(str(out / f"{name}.w2v.txt"), binary=False)
    assert kv.index_to_key == words
    np.testing.assert_array_equal(kv.vectors, np.asarray(leaves[name], np.float32))
    np.testing.assert_array_equal(kv["w7"], leaves[name][runs["corpus"].vocab.index["w7"]])
  if mode == "untied":  # two different matrices were written, not one twice
    assert not np.allclose(leaves["input"], leaves["output"])
  assert not (out / "embeddings.npz").exists()


@pytest.mark.parametrize("mode", ["tied", "untied"])
def test_npz_round_trip(runs, tmp_path, mode):
  out, manifest = _export(runs, mode, tmp_path, formats=["npz"])
  words, matrices = export.read_npz(out / "embeddings.npz")
  assert words == runs["corpus"].vocab.words
  expected = export.embedding_matrices(_checkpoint_params(runs[mode]))
  assert sorted(matrices) == sorted(expected)
  for name, m in expected.items():
    np.testing.assert_array_equal(matrices[name], m)
    assert matrices[name].dtype == m.dtype
  with np.load(out / "embeddings.npz", allow_pickle=False) as z:  # no pickled objects in the file
    assert z["words"].dtype.kind == "U"
  assert not list(out.glob("*.w2v.txt"))


def test_manifest_describes_the_files(runs, tmp_path):
  out, m = _export(runs, "untied", tmp_path)
  assert json.loads((out / "manifest.json").read_text()) == m
  V, D = runs["corpus"].vocab_size, 16
  assert m["tying"] == "untied" and m["tied"] is False and m["projection"] is False and m["output_bias"]
  assert m["config"] == "tiny_untied" and m["dataset"] == "ptb" and m["model"] == "lstm_lm"
  assert m["checkpoint"] == "last" and m["step"] == STEPS
  assert m["vocab_size"] == V and m["vocab_source"] == f"the run's {runs['untied'] / 'vocab.txt'}"
  assert m["matrices"]["input"]["leaf"] == "words/embedding"
  assert m["matrices"]["output"]["leaf"] == "words/out_embedding"
  for name, entry in m["matrices"].items():
    assert entry["shape"] == [V, D]
    assert (out / entry["word2vec"]).is_file() and (out / entry["npz"]["file"]).is_file()
  _, t = _export(runs, "tied", tmp_path)
  assert t["tying"] == "tied" and t["tied"] is True and list(t["matrices"]) == ["tied"]
  assert t["config"] == "tiny_tied"


def test_the_run_vocabulary_is_the_folder_s_own(runs):
  """A language-model run writes its vocabulary (vocab.txt, id order) at its first start; export reads it."""
  run = export.load_run(runs["tied"])
  words, source = export.run_vocabulary(run)
  assert words == runs["corpus"].vocab.words and source == f"the run's {runs['tied'] / 'vocab.txt'}"


@pytest.fixture
def without_vocab_file(runs):
  """The tied run as a folder from before runs wrote vocab.txt."""
  own = runs["tied"] / "vocab.txt"
  own.rename(own.with_name("vocab.txt.hidden"))
  yield runs
  own.with_name("vocab.txt.hidden").rename(own)


def test_an_older_run_s_vocabulary_is_rebuilt_from_the_stored_config(without_vocab_file):
  runs = without_vocab_file
  run = export.load_run(runs["tied"])
  assert run.config["data_dir"] == str(runs["root"])
  words, source = export.run_vocabulary(run)
  assert words == runs["corpus"].vocab.words and "rebuilt from the ptb corpus" in source


def test_a_run_folder_copied_elsewhere_exports_without_its_corpus(runs, tmp_path):
  """The folder alone is enough: copied away from its corpus (no data anywhere), the run exports word2vec
  text that gensim reads, its rows the checkpoint's."""
  import shutil
  from gensim.models import KeyedVectors
  moved = tmp_path / "elsewhere" / "run"
  shutil.copytree(runs["tied"], moved)
  with mock.patch.dict(os.environ, {"WT_JAX_DATA": str(tmp_path / "no_data_here")}):
    out, manifest = export.export_run(moved, tmp_path / "out", data_dir=str(tmp_path / "no_data_here"))
  kv = KeyedVectors.load_word2vec_format(str(out / "tied.w2v.txt"), binary=False)
  words = runs["corpus"].vocab.words
  assert list(kv.index_to_key) == words and manifest["vocab_source"].endswith("vocab.txt")
  np.testing.assert_allclose(kv[words[3]], np.asarray(_checkpoint_params(moved)["words"]["embedding"])[3],
                             rtol=1e-6)


def test_a_vocabulary_of_the_wrong_size_is_refused(runs, tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("a\nb\nc\n")
  with pytest.raises(export.ExportError, match=r"has 3 words but the embeddings have 31 rows") as e:
    export.export_run(runs["tied"], tmp_path / "out", vocab_file=vocab)
  assert "\n" not in str(e.value)


def test_missing_corpus_is_one_line(without_vocab_file, tmp_path):
  runs = without_vocab_file
  with pytest.raises(export.ExportError, match="Cannot rebuild the vocabulary") as e:
    export.export_run(runs["tied"], tmp_path / "out", data_dir=str(tmp_path / "nowhere"))
  assert "\n" not in str(e.value)


@pytest.mark.parametrize("setup,message", [
    ("missing", "No run folder at"),
    ("empty", "No 'last' checkpoint in"),
])
def test_bad_workdirs_are_one_line_errors(tmp_path, setup, message):
  workdir = tmp_path / "run"
  if setup == "empty":
    workdir.mkdir()
  with pytest.raises(export.ExportError, match=message) as e:
    export.export_run(workdir)
  assert "\n" not in str(e.value)


def test_no_best_checkpoint_before_an_epoch_ends(runs, tmp_path):
  with pytest.raises(export.ExportError, match="No 'best' checkpoint"):
    export.export_run(runs["tied"], tmp_path / "out", kind="best")


def test_word2vec_refuses_words_with_whitespace(tmp_path):
  with pytest.raises(export.ExportError, match="whitespace"):
    export.write_word2vec(tmp_path / "v.txt", ["a", "b c"], np.zeros((2, 3)))
  with pytest.raises(export.ExportError, match="one row per word"):
    export.write_word2vec(tmp_path / "v.txt", ["a"], np.zeros((2, 3)))


@pytest.mark.slow
def test_entry_point(runs, tmp_path):
  """The CLI: an export, and a one-line error (no traceback) for a missing run."""
  env = {**os.environ, "PYTHONPATH": str(REPO)}
  ok = subprocess.run([sys.executable, "-m", "experiments.export", f"--workdir={runs['tied']}",
                       f"--out={tmp_path / 'cli'}", "--format=word2vec"], cwd=REPO, env=env,
                      capture_output=True, text=True, timeout=120)
  assert ok.returncode == 0, ok.stderr[-2000:]
  assert sorted(p.name for p in (tmp_path / "cli").iterdir()) == ["manifest.json", "tied.w2v.txt"]
  bad = subprocess.run([sys.executable, "-m", "experiments.export", f"--workdir={tmp_path / 'nope'}"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
  assert bad.returncode == 1
  assert bad.stderr.strip().splitlines()[-1] == f"error: No run folder at {tmp_path / 'nope'}."
  assert "Traceback" not in bad.stderr


# --- tie / untie -------------------------------------------------------------------------------

def _model_and_params(mode, output_bias=True, seed=0, init_scale=0.5):
  """A tiny LSTM LM and its random parameters; init_scale 0.5 gives logits of order 1, so that equal and
  different logits are told apart well above float32 rounding."""
  config = tiny_config(words=dict(mode=mode, output_bias=output_bias), init_scale=init_scale)
  model = models.build(config)
  return model, models.init_params(model, config, jax.random.key(seed))


def _logits(model, params, seed=1):
  x = jax.random.randint(jax.random.key(seed), (4, 5), 0, 31)
  logits, _ = model.apply({"params": params}, x, model.initial_carry(4), train=False)
  return np.asarray(logits)


def _assert_same_logits(a, b):
  scale = np.abs(b).max()
  assert scale > 1e-2  # not a model whose logits are all near zero (that would make any two look equal)
  np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6 * scale)


def _differ(a, b):
  return np.abs(a - b).max() > 1e-2 * np.abs(b).max()


@pytest.mark.parametrize("tied,untied", [("tied", "untied"), ("tied_projection", "projection")])
@pytest.mark.parametrize("output_bias", [True, False])
def test_untie_gives_the_same_logits(tied, untied, output_bias):
  tied_model, params = _model_and_params(tied, output_bias)
  untied_model, fresh = _model_and_params(untied, output_bias, seed=2)
  converted = convert.untie(params)
  # the converted tree is exactly the untied model's tree (leaves and shapes), so it loads into it
  assert jax.tree_util.tree_structure(converted) == jax.tree_util.tree_structure(fresh)
  assert convert.tying_mode(converted) == untied
  assert ("out_bias" in converted["words"]) == output_bias
  _assert_same_logits(_logits(untied_model, converted), _logits(tied_model, params))
  # ...which the untied model's own random parameters do not give
  assert _differ(_logits(untied_model, fresh), _logits(tied_model, params))
  # U = V = S, as two separate arrays: training one does not move the other
  U, V = converted["words"]["embedding"], converted["words"]["out_embedding"]
  np.testing.assert_array_equal(U, params["words"]["embedding"])
  np.testing.assert_array_equal(V, params["words"]["embedding"])
  assert not np.shares_memory(U, V)
  U += 1.0
  np.testing.assert_array_equal(V, params["words"]["embedding"])


@pytest.mark.parametrize("untied,tied", [("untied", "tied"), ("projection", "tied_projection")])
@pytest.mark.parametrize("output_bias", [True, False])
def test_tie_keeps_the_chosen_matrix(untied, tied, output_bias):
  _, params = _model_and_params(untied, output_bias)
  tied_model, fresh = _model_and_params(tied, output_bias)
  U, V = np.asarray(params["words"]["embedding"]), np.asarray(params["words"]["out_embedding"])
  assert not np.allclose(U, V)
  for which, expected in (("output", V), ("input", U)):
    t = convert.tie(params, which=which)
    assert convert.tying_mode(t) == tied and "out_embedding" not in t["words"]
    np.testing.assert_array_equal(t["words"]["embedding"], expected)
    assert jax.tree_util.tree_structure(t) == jax.tree_util.tree_structure(fresh)
    # every other leaf (recurrent layers, bias, projection) is carried over unchanged
    rest = lambda p: {k: v for k, v in convert.flatten(p).items() if "embedding" not in k}
    jax.tree_util.tree_map(np.testing.assert_array_equal, rest(t), rest(params))
    assert np.isfinite(_logits(tied_model, t)).all()
  assert convert.tie(params)["words"]["embedding"] is not params["words"]["out_embedding"]
  np.testing.assert_array_equal(convert.tie(params)["words"]["embedding"], V)  # the default is the output


def test_untie_then_tie_is_the_identity():
  _, params = _model_and_params("tied")
  for which in convert.KEEP:
    back = convert.tie(convert.untie(params), which)
    jax.tree_util.tree_map(np.testing.assert_array_equal, back, params)


def test_conversions_refuse_the_wrong_direction():
  _, tied = _model_and_params("tied")
  _, untied = _model_and_params("untied")
  with pytest.raises(convert.ConversionError, match="untie needs a tied model; these parameters are untied"):
    convert.untie(untied)
  with pytest.raises(convert.ConversionError, match="tie needs an untied model; these parameters are tied"):
    convert.tie(tied)
  with pytest.raises(convert.ConversionError, match="not 'middle'"):
    convert.tie(untied, which="middle")
  with pytest.raises(convert.ConversionError, match="no word embeddings"):
    convert.untie({"dense": {"kernel": jnp.zeros((2, 2))}})


def test_converted_run_loads_into_the_new_model_and_keeps_its_logits(runs, tmp_path):
  """convert_run on the trained tied run → params.npz that `load_init` fits into a freshly built untied
  model; that model's logits are the trained tied model's."""
  folder, manifest = export.convert_run(runs["tied"], tmp_path / "init", "untie")
  assert manifest["tying"] == "untied" and manifest["config_overrides"] == {"words.mode": "untied", "init_from": str(tmp_path / "init")}
  assert manifest["from"]["step"] == STEPS and manifest["from"]["tying"] == "tied"
  assert json.loads((folder / "manifest.json").read_text()) == manifest
  trained = _checkpoint_params(runs["tied"])
  untied_model, fresh = _model_and_params("untied")
  tied_model, _ = _model_and_params("tied")
  init = convert.load_init(folder, like=fresh)
  assert jax.tree_util.tree_structure(init) == jax.tree_util.tree_structure(fresh)
  _assert_same_logits(_logits(untied_model, init), _logits(tied_model, trained))
  assert _differ(_logits(untied_model, fresh), _logits(tied_model, trained))
  # a tied model's parameters do not fit: the error names the leaf
  _, tied_fresh = _model_and_params("tied")
  with pytest.raises(convert.ConversionError, match=r"only in the file: \['words/out_embedding'\]"):
    convert.load_init(folder, like=tied_fresh)


@pytest.mark.parametrize("given, says", [
    ("run", "is a run's folder: convert its checkpoint first, python -m experiments.export"),
    ("empty", "cannot be read as converted parameters (EOFError"),
    ("not_npz", "cannot be read as converted parameters (BadZipFile"),
    ("cut", "cannot be read as converted parameters")])
def test_an_init_that_is_not_converted_parameters_is_one_line(runs, tmp_path, given, says):
  """--config.init_from naming a run's folder (not its converted parameters), or a params.npz that is empty,
  not an npz or cut short: a ConversionError from `load_init`, in one line (an InputError, which the entry
  point's `experiments.one_line` prints as that line)."""
  if given == "run":
    init = runs["tied"]
  else:
    folder, _ = export.convert_run(runs["tied"], tmp_path / "init", "copy")
    data = (folder / convert.PARAMS_FILE).read_bytes()
    init = tmp_path / "params.npz"
    init.write_bytes({"empty": b"", "not_npz": b"PK\x03\x04 not a zip", "cut": data[:len(data) // 2]}[given])
  with pytest.raises(convert.ConversionError, match=says.replace("(", r"\(")) as refused:
    convert.load_init(init)
  assert "\n" not in str(refused.value)


def test_the_trainer_refuses_an_init_that_is_not_converted_parameters(runs, tmp_path):
  """The trainer reads `config.init_from` with `load_init` as it builds the starting state: a run's folder
  given there is refused before a step is trained or saved."""
  config = _run_config("tied", runs["corpus"].vocab_size)
  config.init_from = str(runs["tied"])
  with pytest.raises(convert.ConversionError, match="is a run's folder: convert its checkpoint first"):
    lm.fit(config, runs["corpus"], tmp_path / "run")
  assert not (tmp_path / "run" / "results.json").exists() and not list((tmp_path / "run").glob("checkpoints/*/*"))


def test_convert_run_tie_keeps_the_output_embedding_by_default(runs, tmp_path):
  folder, manifest = export.convert_run(runs["untied"], tmp_path / "init", "tie")
  assert manifest["kept"] == "output" and manifest["tying"] == "tied"
  trained = _checkpoint_params(runs["untied"])
  np.testing.assert_array_equal(convert.load_init(folder)["words"]["embedding"],
                                trained["words"]["out_embedding"])
  with pytest.raises(convert.ConversionError, match="already tied"):
    export.convert_run(runs["tied"], tmp_path / "x", "tie")


@pytest.mark.parametrize("config, says", [({"model": "skipgram"}, "is a word2vec run"),
                                          ({"model": "nmt", "src_lang": "en"}, "is a translation run")])
def test_convert_run_refuses_a_run_that_is_not_a_language_model(runs, tmp_path, config, says):
  """Only experiments.ptb reads converted parameters (--config.init_from): a word2vec or translation run's
  conversion is refused, not written with a command its configs have no key for."""
  run = export.load_run(runs["tied"])
  faked = mock.patch.object(export, "load_run",
                            lambda *a, **kw: dataclasses.replace(run, meta={**run.meta, "config": config}))
  with faked, pytest.raises(convert.ConversionError, match=says):
    export.convert_run(runs["tied"], tmp_path / "init", "untie")
  assert not (tmp_path / "init").exists()


def test_training_from_an_untied_init_moves_the_two_copies_apart(runs, tmp_path):
  """A run started from a converted init (`--config.init_from`): the untied model's first SGD step. Press &
  Wolf's update rules (Section 3) show at once: the input embedding U changes only in the rows of the
  window's input words, the output embedding V in every row, so U = V no longer holds."""
  from wt_jax.data import batching
  from wt_jax.train.checkpoint import Checkpoints

  folder, manifest = export.convert_run(runs["tied"], tmp_path / "init", "untie")
  config = _run_config("untied", runs["corpus"].vocab_size)
  config.update_from_flattened_dict({**manifest["config_overrides"], "max_steps": 1})
  start = convert.load_init(folder)
  lm.fit(config, runs["corpus"], tmp_path / "run")
  ck = Checkpoints(tmp_path / "run" / "checkpoints", read_only=True)
  state, _ = ck.restore_saved("last")
  ck.close()
  assert int(state["step"]) == 1
  x = batching.lm_windows(runs["corpus"].train, config.batch_size, config.bptt).x[0]
  U, V = np.asarray(state["params"]["words"]["embedding"]), np.asarray(state["params"]["words"]["out_embedding"])
  moved_U = np.abs(U - start["words"]["embedding"]).max(axis=1) > 0
  moved_V = np.abs(V - start["words"]["out_embedding"]).max(axis=1) > 0
  assert sorted(np.flatnonzero(moved_U)) == sorted(np.unique(x))
  assert moved_V.all()
  assert not np.allclose(U, V)


def test_copy_starts_a_second_session_from_the_final_parameters(runs, tmp_path):
  """`--convert=copy` (Inan et al.'s footnote 4): the run's own parameters, for a new run with the schedule
  restarted; the new run starts from them exactly."""
  folder, manifest = export.convert_run(runs["tied"], tmp_path / "init", "copy")
  assert manifest["tying"] == manifest["from"]["tying"] == "tied" and manifest["same_logits"]
  saved = export.load_run(runs["tied"]).params
  jax.tree_util.tree_map(np.testing.assert_array_equal, convert.load_init(folder), saved)
  config = _run_config("tied", runs["corpus"].vocab_size)
  config.update_from_flattened_dict({**manifest["config_overrides"], "max_steps": 1, "learning_rate": 0.0})
  lm.fit(config, runs["corpus"], tmp_path / "second")
  second = export.load_run(tmp_path / "second").params
  jax.tree_util.tree_map(np.testing.assert_array_equal, second, saved)  # lr 0: still the first session's
