"""text8 and WikiText-2: readers, counts on the real files, downloads from a local server; WikiText-2's training
text in halves (Inan et al. 2017, Table 2)."""
import gzip
import io
import zipfile

import numpy as np
import pytest

from tests.conftest import serve_folder, unused_port
from wt_jax.data import paths, text8, wikitext2


def _zip(members: dict) -> bytes:
  buf = io.BytesIO()
  with zipfile.ZipFile(buf, "w") as z:
    for name, text in members.items():
      z.writestr(name, text)
  return buf.getvalue()


def test_text8_download_and_sentences(tmp_path):
  words = [f"w{i % 7}" for i in range(2_345)]
  (tmp_path / "www").mkdir()
  (tmp_path / "www" / "text8.zip").write_bytes(_zip({"text8": " " + " ".join(words)}))  # one line, as text8
  with serve_folder(tmp_path / "www") as base:
    sents = text8.sentences(str(tmp_path / "cache"), url=f"{base}/text8.zip")
  assert [len(s) for s in sents] == [1000, 1000, 345]
  assert [w for s in sents for w in s] == words
  assert (tmp_path / "cache" / "text8" / "text8").is_file()
  assert not list((tmp_path / "cache" / "text8").glob("*.zip"))  # the archive is removed after extraction
  # Now on disk: no download needed (nothing listens at the URL any more).
  assert text8.sentences(str(tmp_path / "cache"), url=f"http://127.0.0.1:{unused_port()}/x.zip") == sents


def test_text8_missing_or_bad(tmp_path):
  with pytest.raises(paths.DataUnavailableError, match=paths.ENV_VAR):
    text8.sentences(str(tmp_path), download=False)
  with pytest.raises(paths.DataUnavailableError, match=paths.ENV_VAR):
    text8.sentences(str(tmp_path), url=f"http://127.0.0.1:{unused_port()}/text8.zip")
  (tmp_path / "www").mkdir()
  (tmp_path / "www" / "text8.zip").write_bytes(b"not a zip")
  with serve_folder(tmp_path / "www") as base:
    with pytest.raises(paths.DataUnavailableError, match="not a zip"):
      text8.sentences(str(tmp_path / "c"), url=f"{base}/text8.zip")
  (tmp_path / "e" / "text8").mkdir(parents=True)
  (tmp_path / "e" / "text8" / "text8").write_text("  ")
  with pytest.raises(ValueError, match="no words"):
    text8.sentences(str(tmp_path / "e"))


def test_wikitext2_counts_on_shared_data(shared_data_root):
  corpus = wikitext2.load(str(shared_data_root), download=False)
  assert (len(corpus.train), len(corpus.valid), len(corpus.test)) == (2_088_628, 217_646, 245_569)
  assert corpus.vocab_size == 33_278
  sents = wikitext2.sentences("train", str(shared_data_root), download=False)
  assert sum(len(s) for s in sents) == 2_051_910  # the words, without <eos>


def test_wikitext2_download_from_local_server(tmp_path):
  texts = {"train": "\n = Title = \n\n a b c <unk> a\n", "valid": " a b\n", "test": " c a\n"}
  (tmp_path / "www").mkdir()
  (tmp_path / "www" / "wikitext-2-v1.zip").write_bytes(
      _zip({f"wikitext-2/wiki.{s}.tokens": t for s, t in texts.items()}))
  with serve_folder(tmp_path / "www") as base:
    corpus = wikitext2.load(str(tmp_path / "cache"), url=f"{base}/wikitext-2-v1.zip")
  assert len(corpus.train) == 1 + 4 + 1 + 6  # lines "", " = Title = ", "", " a b c <unk> a", each + <eos>
  assert corpus.vocab.decode(corpus.valid) == ["a", "b", "<eos>"]
  assert wikitext2.sentences("train", str(tmp_path / "cache")) == [["=", "Title", "="], ["a", "b", "c", "<unk>", "a"]]


def test_wikitext2_gzipped_and_missing(tmp_path):
  folder = tmp_path / "wikitext2"
  folder.mkdir()
  for s in ("train", "valid", "test"):
    with gzip.open(folder / f"wiki.{s}.tokens.gz", "wt") as f:
      f.write(" x y\n")
  assert wikitext2.load(str(tmp_path), download=False).vocab_size == 3
  with pytest.raises(paths.DataUnavailableError, match=paths.ENV_VAR):
    wikitext2.load(str(tmp_path / "none"), download=False)


def test_lm_corpora_by_config_name(shared_data_root):
  """`config.dataset` picks the reader (experiments.ptb and experiments.bench both go through this)."""
  import ml_collections
  from wt_jax.data import lm_corpora
  config = ml_collections.ConfigDict({"dataset": "ptb", "data_dir": str(shared_data_root), "download": False})
  corpus = lm_corpora.load_corpus(config)
  assert corpus.vocab_size == 10_000 and len(corpus.train) == 929_589
  config.dataset = "text9"
  known = "ptb, wikitext2, wikitext2_half1, wikitext2_half2, bbc, imdb"
  with pytest.raises(ValueError, match=f"Unknown dataset 'text9'; known: {known}"):
    lm_corpora.load_corpus(config)


def _article(title: str, first: int, second: int) -> list[str]:
  """A WikiText-style article's lines: its title, a paragraph of `first` words, a section heading, a paragraph
  of `second` words, each between empty lines ({first} + {second} + 17 tokens with one <eos> per line)."""
  words = lambda n, w: " " + " ".join([w] * n) + " "
  return [" ", f" = {title} = ", " ", words(first, "a"), " ", " = = Section = = ", " ", words(second, "b"), " "]


def test_wikitext2_halves_cut_at_the_article_start_nearest_the_middle(tmp_path):
  """Articles of 37, 82, 42 and 19 tokens (180): the starts lie at 0, 37, 119 and 161 tokens, so the cut is at
  119, 29 from the middle (90), neither the first nor the last start. Neither half the tokens (90) nor the
  empty line before article B's section heading (69, 21 from the middle) is an article boundary."""
  folder = tmp_path / "wikitext2"
  folder.mkdir()
  lines = _article("A", 10, 10) + _article("B", 25, 40) + _article("C", 20, 5) + _article("D", 1, 1)
  (folder / "wiki.train.tokens").write_text("".join(l + "\n" for l in lines))
  (folder / "wiki.valid.tokens").write_text(" a b Section\n")
  (folder / "wiki.test.tokens").write_text(" b a\n")
  assert wikitext2.article_starts(lines) == [0, 9, 18, 27]
  full = wikitext2.load(str(tmp_path), download=False)
  first, second = (wikitext2.load_half(h, str(tmp_path), download=False) for h in (1, 2))
  assert (len(full.train), len(first.train), len(second.train)) == (180, 119, 61)
  np.testing.assert_array_equal(np.concatenate([first.train, second.train]), full.train)
  assert second.vocab.decode(second.train[:5]) == ["<eos>", "=", "C", "=", "<eos>"]  # begins with a title
  for half in (first, second):  # WikiText-2's vocabulary, ids, validation and test texts
    assert half.vocab.words == full.vocab.words
    np.testing.assert_array_equal(half.valid, full.valid)
    np.testing.assert_array_equal(half.test, full.test)
  with pytest.raises(ValueError, match="half must be one of"):
    wikitext2.load_half(3, str(tmp_path), download=False)
  (folder / "wiki.train.tokens").write_text("".join(l + "\n" for l in _article("A", 3, 3)))
  with pytest.raises(ValueError, match="fewer than two articles"):
    wikitext2.load_half(1, str(tmp_path), download=False)


@pytest.mark.slow  # (the whole of WikiText-2, read twice)
def test_wikitext2_halves_on_shared_data(shared_data_root):
  """On the official file: 600 articles; the halves are 305 and 295 whole articles (1,044,532 and 1,044,096
  tokens, the paper's "1044K" each), together the whole training stream, with WikiText-2's vocabulary and ids,
  validation and test texts; `config.dataset` names them."""
  import ml_collections
  from wt_jax.data import lm_corpora
  if not (shared_data_root / "wikitext2").is_dir():
    pytest.skip(f"WikiText-2 not found in {shared_data_root}")
  lines = wikitext2.read_lines(wikitext2.split_file(shared_data_root / "wikitext2", "train"))
  starts = wikitext2.article_starts(lines)
  assert len(starts) == 600 and starts.index(wikitext2.half_boundary(lines)) == 305
  full = wikitext2.load(str(shared_data_root), download=False)
  config = ml_collections.ConfigDict({"data_dir": str(shared_data_root), "download": False})
  halves = []
  for name in ("wikitext2_half1", "wikitext2_half2"):
    config.dataset = name
    halves.append(lm_corpora.load_corpus(config))
  assert [len(h.train) for h in halves] == [1_044_532, 1_044_096]
  np.testing.assert_array_equal(np.concatenate([h.train for h in halves]), full.train)
  assert halves[1].vocab.decode(halves[1].train[:5]) == ["<eos>", "=", "Arikamedu", "=", "<eos>"]
  for half in halves:
    assert half.vocab_size == 33_278 and half.vocab.words == full.vocab.words
    np.testing.assert_array_equal(half.valid, full.valid)
    np.testing.assert_array_equal(half.test, full.test)
