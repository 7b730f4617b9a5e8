"""IMDB reviews as an LM corpus, on a generated archive in the layout of aclImdb_v1.tar.gz."""
import io
import tarfile

import pytest

from tests.conftest import serve_folder, unused_port
from wt_jax.data import imdb, paths
from wt_jax.errors import InputError


def _tar(files: dict) -> bytes:
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w:gz") as tar:
    for name, text in files.items():
      data = text.encode()
      info = tarfile.TarInfo(f"aclImdb/{name}")
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  return buf.getvalue()


def test_imdb_split_tokens_and_download(tmp_path, monkeypatch):
  files = {f"train/{lab}/{i}_7.txt": f"A {lab} film.<br /><br />Seen in 1999!" for lab in ("pos", "neg", "unsup")
           for i in range(3)}
  files.update({f"test/{lab}/{i}_1.txt": f"Test {lab} review {i}" for lab in ("pos", "neg") for i in range(4)})
  files["imdb.vocab"] = "not a review"
  (tmp_path / "www").mkdir()
  (tmp_path / "www" / "aclImdb_v1.tar.gz").write_bytes(_tar(files))
  monkeypatch.setattr(imdb, "VOCAB_SIZE", 8)
  with serve_folder(tmp_path / "www") as base:
    corpus = imdb.load(str(tmp_path / "cache"), url=f"{base}/aclImdb_v1.tar.gz")
  words = corpus.vocab.decode
  assert words(corpus.train).count("<eos>") == 9 and words(corpus.train)[:6] == ["a", "neg", "film", "seen", "in", "N"]
  assert words(corpus.valid).count("<eos>") == 4 and words(corpus.test).count("<eos>") == 4
  assert corpus.vocab_size == 8 and "<unk>" in words(corpus.valid)  # "test", "review" never seen in train
  again = imdb.load(str(tmp_path / "cache"), url=f"http://127.0.0.1:{unused_port()}/x.tgz")
  assert (again.train == corpus.train).all()


def test_imdb_missing_or_bad(tmp_path):
  with pytest.raises(paths.DataUnavailableError, match=paths.ENV_VAR):
    imdb.load(str(tmp_path), download=False)
  with pytest.raises(paths.DataUnavailableError, match=paths.ENV_VAR):
    imdb.load(str(tmp_path), url=f"http://127.0.0.1:{unused_port()}/a.tgz")
  (tmp_path / "imdb").mkdir(exist_ok=True)
  (tmp_path / "imdb" / "aclImdb_v1.tar.gz").write_bytes(b"garbage")
  with pytest.raises(InputError, match="not a readable tar"):
    imdb.load(str(tmp_path))
