"""BBC News as an LM corpus: tokenisation, the deterministic stratified split, the 10k vocabulary, download."""
import io
import zipfile

import numpy as np
import pytest

from tests.conftest import serve_folder, unused_port
from wt_jax.data import bbc, paths
from wt_jax.errors import InputError


def _archive(articles: dict) -> bytes:
  buf = io.BytesIO()
  with zipfile.ZipFile(buf, "w") as z:
    z.writestr("bbc-fulltext/bbc/", "")
    for name, text in articles.items():
      z.writestr(f"bbc-fulltext/bbc/{name}", text)
  return buf.getvalue()


def test_tokenize_line():
  assert bbc.tokenize_line("Ad sales boost Time Warner profit (£1.13bn), up 76% in 2004; don't!") == \
      ["ad", "sales", "boost", "time", "warner", "profit", "N", "bn", "up", "N", "in", "N", "don't"]


def test_split_vocab_and_download(tmp_path, monkeypatch):
  arts = {f"{cat}/{i:03d}.txt": f"Title {cat} {i}\n\nThe {cat} story number {i}.\n" for cat in ("sport", "tech")
          for i in range(1, 21)}
  arts["tech/007.txt"] = "Title\n\nRare words: zyx qwv.\n"
  (tmp_path / "www").mkdir()
  (tmp_path / "www" / "bbc-fulltext.zip").write_bytes(_archive(arts))
  monkeypatch.setattr(bbc, "VOCAB_SIZE", 12)
  with serve_folder(tmp_path / "www") as base:
    corpus = bbc.load(str(tmp_path / "cache"), url=f"{base}/bbc-fulltext.zip")
  # Per category, sorted by file name: the 9th and 19th articles are valid, the 10th and 20th test.
  words = corpus.vocab.decode
  assert words(corpus.valid).count("<eos>") == 2 * 2 * 2  # 2 articles × 2 lines × 2 categories
  assert words(corpus.test).count("<eos>") == 8
  assert corpus.vocab_size == 12 and corpus.vocab.words[-2:] == ["<unk>", "<eos>"]
  assert corpus.vocab.words[0] == "N" and "title" in corpus.vocab  # numbers: twice in every article
  assert "<unk>" in words(corpus.train)  # rare words (and numbers' rarer neighbours) fall outside the 10
  # On disk now: no download needed.
  again = bbc.load(str(tmp_path / "cache"), url=f"http://127.0.0.1:{unused_port()}/x.zip")
  np.testing.assert_array_equal(again.train, corpus.train)


def test_missing_or_bad(tmp_path):
  with pytest.raises(paths.DataUnavailableError, match=paths.ENV_VAR):
    bbc.load(str(tmp_path), download=False)
  with pytest.raises(paths.DataUnavailableError, match=paths.ENV_VAR):
    bbc.load(str(tmp_path), url=f"http://127.0.0.1:{unused_port()}/bbc.zip")
  (tmp_path / "bbc").mkdir(exist_ok=True)
  (tmp_path / "bbc" / "bbc-fulltext.zip").write_bytes(b"not a zip")
  with pytest.raises(InputError, match="not a zip"):
    bbc.load(str(tmp_path))


def test_real_bbc_counts(shared_data_root):
  corpus = bbc.load(str(shared_data_root), download=False)
  assert (len(corpus.train), len(corpus.valid), len(corpus.test), corpus.vocab_size) == \
      (699_715, 86_923, 91_589, 10_000)
