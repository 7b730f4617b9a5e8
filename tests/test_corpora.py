"""text8 and WikiText-2: readers, counts on the real files, downloads from a local server."""
import gzip
import io
import zipfile

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
  with pytest.raises(ValueError, match="Unknown dataset 'text9'; known: ptb, wikitext2, bbc, imdb"):
    lm_corpora.load_corpus(config)
