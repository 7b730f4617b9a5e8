"""A folder of one's own text as an LM corpus (`wt_jax.data.text_corpus`): the vocabulary rule, the id cache, the
switches, sentencepiece pieces, and every refusal; then, from the command line, a run on it end to end."""
import collections
import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from configs import lm_base
from tests.conftest import REPO
from wt_jax.data import text as text_lib
from wt_jax.data import text_corpus
from wt_jax.errors import InputError

TRAIN = "b a c a\nc b b e\n\nd a a\n"   # a ×5, b ×3, c ×2, e and d ×1 (e first: not alphabetical), <eos> ×4
VALID = "a z b\nq\n"
TEST = "d e f\n"


def write_text(folder, train=TRAIN, valid=VALID, test=TEST, gz=()):
  folder.mkdir(parents=True, exist_ok=True)
  for split, text in (("train", train), ("valid", valid), ("test", test)):
    if split in gz:
      with gzip.open(folder / f"{split}.txt.gz", "wt", encoding="utf-8") as f:
        f.write(text)
    else:
      (folder / f"{split}.txt").write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
  return folder


def text_config(folder, **overrides):
  c = lm_base.get_config()
  c.update_from_flattened_dict({"dataset": "text", "data_dir": str(folder), **overrides})
  return c


def reference_words(text, cap, min_count=0):
  """The vocabulary rule written plainly: words by count, ties by first sight, specials always in."""
  tokens = [t for line in text.splitlines() for t in (*line.split(), "<eos>")]
  counts = collections.Counter(tokens)  # (insertion order: first sight)
  plain = [w for w in sorted(counts, key=lambda w: -counts[w]) if counts[w] >= min_count and w not in ("<eos>",
                                                                                                       "<unk>")]
  kept = set(plain[:cap - 2]) | {"<eos>", "<unk>"}
  ranked = sorted(counts, key=lambda w: -counts[w])
  return [w for w in ranked if w in kept] + (["<unk>"] if "<unk>" not in counts else [])


@pytest.mark.parametrize("cap, min_count", [(100, 0), (5, 0), (100, 2)])
def test_vocabulary_by_count_ties_by_first_sight_with_the_cap_and_min_count(tmp_path, cap, min_count):
  corpus = text_corpus.load(text_config(write_text(tmp_path / "t"), vocab_size=cap, min_count=min_count))
  words = reference_words(TRAIN, cap, min_count)
  assert corpus.vocab.words == words
  index = {w: i for i, w in enumerate(words)}
  for split, text in (("train", TRAIN), ("valid", VALID), ("test", TEST)):
    tokens = [t for line in text.splitlines() for t in (*line.split(), "<eos>")]
    assert np.asarray(getattr(corpus, split)).tolist() == [index.get(t, index["<unk>"]) for t in tokens]
    oov = sum(t not in index for t in tokens)
    assert corpus.info[split]["oov"] == oov and corpus.info[split]["oov_rate"] == oov / len(tokens)
    assert corpus.info[split]["bytes"] == len(text.encode()) and corpus.info[split]["words"] == len(tokens)


def test_ids_are_cached_then_mapped_and_keyed_by_the_bytes_and_the_settings(tmp_path, monkeypatch):
  folder = write_text(tmp_path / "t", gz=("train",))
  first = text_corpus.load(text_config(folder))
  monkeypatch.setattr(text_corpus, "prepare", lambda *a: pytest.fail("prepared again: the cache was not used"))
  again = text_corpus.load(text_config(folder))
  assert isinstance(again.train, np.memmap) and again.vocab.words == first.vocab.words
  np.testing.assert_array_equal(again.test, first.test)
  keys = {text_corpus.cache_key(text_corpus.check(text_config(folder)), text_config(folder))}
  for change in ({"lowercase": True}, {"min_count": 2}, {"vocab_size": 50}, {"tokenizer": "sentencepiece"}):
    keys.add(text_corpus.cache_key(text_corpus.check(text_config(folder, **change)), text_config(folder, **change)))
  (folder / "test.txt").write_text(TEST + "e\n")
  keys.add(text_corpus.cache_key(text_corpus.check(text_config(folder)), text_config(folder)))
  assert len(keys) == 6


def test_lowercase_and_numbers_as_n(tmp_path):
  folder = write_text(tmp_path / "t", train="The 3.5 cats 1,000 x2 THE\nthe 7 Cats\n")
  words = text_corpus.load(text_config(folder, lowercase=True, numbers_as_n=True)).vocab.words
  assert set(words) == {"the", "N", "cats", "x2", "<eos>", "<unk>"}
  tok = text_lib.tokenizer_of(text_config(folder, lowercase=True, numbers_as_n=True))
  assert tok.words(["The 3.5 cats 1,000 x2\n"]) == ["the", "N", "cats", "N", "x2", "<eos>"]


@pytest.mark.parametrize("case, match", [
    ("no data_dir", "give it with --config.data_dir"),
    ("no folder", "No folder at"),
    ("missing split", "has no valid.txt"),
    ("empty file", "test.txt is empty"),
    ("not UTF-8", "not UTF-8 text"),
    ("damaged gzip", "cannot be read as gzip"),
    ("no word", "has no word"),
    ("vocab_size 1", "vocab_size must be an integer ≥ 2"),
    ("min_count above every word", "would hold 0 word"),
    ("unknown tokenizer", "Unknown tokenizer 'chars'"),
    ("unknown subword model", "Unknown subword_model 'wordpiece'"),
])
def test_each_bad_folder_or_setting_is_refused_with_one_line(tmp_path, case, match):
  folder, overrides = write_text(tmp_path / "t"), {}
  if case == "no data_dir":
    overrides["data_dir"] = ""
  elif case == "no folder":
    overrides["data_dir"] = str(tmp_path / "nowhere")
  elif case == "missing split":
    (folder / "valid.txt").unlink()
  elif case == "empty file":
    (folder / "test.txt").write_text("")
  elif case == "not UTF-8":
    (folder / "train.txt").write_bytes(b"a b\nc \xff d\n")
  elif case == "damaged gzip":
    (folder / "train.txt").unlink()
    (folder / "train.txt.gz").write_bytes(gzip.compress(TRAIN.encode())[:-12])
  elif case == "no word":
    (folder / "train.txt").write_text("\n  \n\n")
  elif case == "vocab_size 1":
    overrides["vocab_size"] = 1
  elif case == "min_count above every word":
    overrides["min_count"] = 99
  elif case == "unknown tokenizer":
    overrides["tokenizer"] = "chars"
  else:
    overrides["subword_model"] = "wordpiece"
  with pytest.raises(InputError, match=match) as e:
    text_corpus.load(text_config(folder, **overrides))
  assert "\n" not in str(e.value)


def test_sentencepiece_pieces_and_the_per_word_measures(tmp_path):
  train = "".join(f"the {w} sat on the mat {i % 7}\n" for i, w in enumerate(["cat", "dog", "cow", "hen"] * 40))
  folder = write_text(tmp_path / "t", train=train, valid="the cat sat\n", test="a dog on the mat zzz\n")
  config = text_config(folder, tokenizer="sentencepiece", vocab_size=40)
  corpus = text_corpus.load(config)
  tok = text_lib.tokenizer_of(config, corpus.model)
  assert corpus.vocab.words[:2] == ["<unk>", "<eos>"] and len(corpus.vocab) == 40
  assert corpus.vocab.words == [tok.pieces.id_to_piece(i) for i in range(40)]
  pieces = tok.words(["a dog on the mat zzz\n"])
  np.testing.assert_array_equal(corpus.test, text_lib.encode(pieces, corpus.vocab).ids)
  assert tok.render(pieces) == "a dog on the mat zzz\n"
  assert corpus.info["test"]["words"] == 7 and corpus.info["test"]["tokens"] == len(pieces)
  assert corpus.info["test"]["oov"] == int(np.sum(np.asarray(corpus.test) == 0)) > 0  # ('z' is not in the text)
  out = text_corpus.measures(corpus.info, 10.0, 0)
  nll = np.log(10.0) * (len(pieces) - 1)
  assert out["test_ppl_per_word"] == pytest.approx(np.exp(nll / 6))
  assert out["test_bits_per_byte"] == pytest.approx(nll / np.log(2) / len("a dog on the mat zzz\n"))
  assert text_corpus.measures(corpus.info, 10.0, eval_max_tokens=3) == {"corpus": corpus.info}


def test_a_named_corpus_refuses_a_tokenizer(tmp_path):
  from wt_jax.data import lm_corpora
  c = lm_base.get_config()
  c.tokenizer = "sentencepiece"
  with pytest.raises(InputError, match="is for dataset=text"):
    lm_corpora.load_corpus(c)


# --- from the command line ---------------------------------------------------------------------------------------

def _tool(tool, *args):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  return subprocess.run([sys.executable, "-m", f"experiments.{tool}", *args], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("tokenizer", ["word", "sentencepiece"])
def test_a_text_folder_trains_resumes_scores_samples_and_exports(tmp_path, tokenizer):
  train = "".join(f"the {w} saw {v} on day {i % 9}\n" for i, (w, v) in enumerate(
      zip(["cat", "dog", "cow", "hen", "fox"] * 60, ["a hen", "the fox", "one cat", "two dogs"] * 75)))
  folder = write_text(tmp_path / "text", train=train, valid=train[:400], test=train[-400:])
  workdir = tmp_path / "run"
  args = ["--config=configs/small_tied.py", "--config.dataset=text", f"--config.data_dir={folder}",
          f"--config.tokenizer={tokenizer}", "--config.vocab_size=60", "--config.hidden_size=8",
          "--config.batch_size=4", "--config.eval_batch_size=4", "--config.plot=false", f"--workdir={workdir}"]
  first = _tool("ptb", *args, "--config.max_steps=3")
  assert first.returncode == 0, first.stderr[-2000:]
  resumed = _tool("ptb", *args, "--config.max_steps=6")
  assert resumed.returncode == 0, resumed.stderr[-2000:]
  results = json.loads((workdir / "results.json").read_text())
  assert results["steps"] == 6 and results["resumed_from_step"] == 3 and results["dataset"] == "text"
  assert results["corpus"]["tokenizer"]["tokenizer"] == tokenizer
  if tokenizer == "word":  # (a word is a token: the per-word perplexity is the perplexity)
    assert results["test_ppl_per_word"] == pytest.approx(results["test_ppl"], rel=1e-12)
  assert (workdir / "tokenizer.model").is_file() == (tokenizer == "sentencepiece")
  score = _tool("score", f"--workdir={workdir}", "--split=test")
  assert score.returncode == 0, score.stderr[-2000:]
  assert json.loads(score.stdout.splitlines()[-1])["ppl"] == pytest.approx(results["test_ppl"], rel=1e-6)
  (tmp_path / "new.txt").write_text("the cat saw a zebra\n")
  new = _tool("score", f"--workdir={workdir}", f"--text={tmp_path / 'new.txt'}")
  assert new.returncode == 0, new.stderr[-2000:]
  assert ("ppl_per_word" in json.loads(new.stdout.splitlines()[-1])) == (tokenizer == "sentencepiece")
  sample = _tool("generate", f"--workdir={workdir}", "--prompt=the cat", "--max_len=6", "--temperature=0")
  assert sample.returncode == 0 and "the cat |" in sample.stdout, sample.stderr[-2000:]
  export = _tool("export", f"--workdir={workdir}", f"--out={tmp_path / 'export'}")
  assert export.returncode == 0 and (tmp_path / "export" / "tied.w2v.txt").is_file(), export.stderr[-2000:]
  model = _tool("export", f"--workdir={workdir}", "--format=safetensors", f"--out={tmp_path / 'model'}")
  assert model.returncode == 0, model.stderr[-2000:]
  assert (tmp_path / "model" / "tokenizer.model").is_file() == (tokenizer == "sentencepiece")
  assert (tmp_path / "model" / "vocab.txt").read_text() == (workdir / "vocab.txt").read_text()


@pytest.mark.slow
def test_a_bad_text_folder_ends_with_one_line_and_writes_nothing(tmp_path):
  folder = write_text(tmp_path / "text")
  (folder / "valid.txt").write_bytes(b"\xff\xfe")
  workdir = tmp_path / "run"
  out = _tool("ptb", "--config=configs/small_tied.py", "--config.dataset=text", f"--config.data_dir={folder}",
              f"--workdir={workdir}")
  assert out.returncode == 1 and "valid.txt is not UTF-8 text" in out.stderr.strip().splitlines()[-1]
  assert not workdir.exists() or not any(workdir.iterdir())
