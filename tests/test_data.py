"""PTB reading, data-directory resolution, download, and Zaremba batching."""
import io
import tarfile

import numpy as np
import pytest

from tests.conftest import serve_folder, unused_port, write_corpus
from wt_jax.data import batching, paths, ptb


def test_ptb_counts_on_shared_data(shared_data_root):
  corpus = ptb.load(str(shared_data_root), download=False)
  assert (len(corpus.train), len(corpus.valid), len(corpus.test)) == (929_589, 73_760, 82_430)
  assert corpus.vocab_size == 10_000
  assert "<unk>" in corpus.vocab and "<eos>" in corpus.vocab
  assert corpus.vocab.words[0] == "the"  # ids by frequency, as the TensorFlow reader
  assert corpus.train.dtype == np.int32 and corpus.train.max() == 9_999


@pytest.mark.parametrize("gz", [False, True])
def test_reads_txt_and_gz(tmp_path, gz):
  write_corpus(tmp_path / "ptb", gz=gz)
  corpus = ptb.load(str(tmp_path), download=False)
  assert corpus.vocab_size == 31  # w0..w29 + <eos>
  text = (tmp_path / "ptb" / "ptb.valid.txt").read_text() if not gz else None
  if text is not None:
    assert len(corpus.valid) == sum(len(l.split()) + 1 for l in text.splitlines())
  assert corpus.vocab.decode(corpus.train[:3])[0].startswith("w")


def test_data_root_resolution(monkeypatch, tmp_path):
  monkeypatch.setenv(paths.ENV_VAR, str(tmp_path / "env"))
  assert paths.data_root(str(tmp_path / "flag")) == tmp_path / "flag"
  assert paths.data_root(None) == tmp_path / "env"
  monkeypatch.delenv(paths.ENV_VAR)
  monkeypatch.setenv("HOME", str(tmp_path / "home"))
  assert paths.data_root(None) == tmp_path / "home" / ".cache" / "wt_jax"


def test_missing_data_without_download_names_the_env_var(tmp_path):
  with pytest.raises(paths.DataUnavailableError, match=paths.ENV_VAR):
    ptb.load(str(tmp_path / "nowhere"), download=False)


def test_no_network_fails_with_clear_message(tmp_path):
  with pytest.raises(paths.DataUnavailableError, match=paths.ENV_VAR):
    ptb.load(str(tmp_path), url=f"http://127.0.0.1:{unused_port()}/simple-examples.tgz")
  assert not list((tmp_path / "ptb").glob("*.part"))  # no partial file left behind


def _tgz_of(folder):
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w:gz") as tar:
    for split in ("train", "valid", "test"):
      tar.add(folder / f"ptb.{split}.txt", arcname=f"./simple-examples/data/ptb.{split}.txt")
    tar.add(folder / "ptb.train.txt", arcname="./simple-examples/data/ptb.char.train.txt")
  return buf.getvalue()


def test_download_from_local_http_server(tmp_path):
  src = write_corpus(tmp_path / "src")
  (tmp_path / "www").mkdir()
  (tmp_path / "www" / "simple-examples.tgz").write_bytes(_tgz_of(src))
  with serve_folder(tmp_path / "www") as base:
    corpus = ptb.load(str(tmp_path / "cache"), url=f"{base}/simple-examples.tgz")
  got = sorted(p.name for p in (tmp_path / "cache" / "ptb").iterdir())
  assert got == ["ptb.test.txt", "ptb.train.txt", "ptb.valid.txt"]
  assert (tmp_path / "cache" / "ptb" / "ptb.train.txt").read_bytes() == (src / "ptb.train.txt").read_bytes()
  assert corpus.vocab_size == 31


def test_empty_corpus_is_rejected(tmp_path):
  write_corpus(tmp_path / "ptb")
  (tmp_path / "ptb" / "ptb.valid.txt").write_text("\n\n")
  with pytest.raises(ValueError, match="valid split .* contains no words"):
    ptb.load(str(tmp_path), download=False)


@pytest.mark.parametrize("damage", ["cut", "not_gzip", "not_utf8"])
def test_a_damaged_corpus_file_is_one_line_naming_it(tmp_path, damage):
  """A corpus file that is there but cannot be decoded (a gzip cut short, a file that is not gzip under a .gz
  name, bytes that are not UTF-8: a download or copy that did not finish) is an InputError naming the file,
  from every reader (`paths.read_lines`); an entry point's `experiments.one_line` prints an InputError as one
  line."""
  from wt_jax.data import multi30k, text8, wikitext2
  from wt_jax.errors import InputError
  write_corpus(tmp_path / "ptb", gz=damage != "not_utf8")
  name = "ptb.train.txt" + ("" if damage == "not_utf8" else ".gz")
  path = tmp_path / "ptb" / name
  data = path.read_bytes()
  path.write_bytes({"cut": data[:len(data) // 2], "not_gzip": b"<html>not found</html>",
                    "not_utf8": data[:100] + b"\xff\xfe" + data[100:]}[damage])
  with pytest.raises(InputError, match=f"{name} cannot be read as UTF-8 text.*Fetch it again") as refused:
    ptb.load(str(tmp_path), download=False)
  assert str(refused.value).startswith(str(path)) and "\n" not in str(refused.value)
  with pytest.raises(InputError, match=name):
    ptb.sentences("train", str(tmp_path), download=False)
  for reader in (wikitext2.read_lines, multi30k.read_lines, text8.read_words):
    with pytest.raises(InputError, match=name):
      reader(path)
  assert paths.read_lines(tmp_path / "ptb" / ("ptb.valid.txt" + ("" if damage == "not_utf8" else ".gz")))


def test_windows_follow_the_reference_iterator():
  stream = np.arange(103, dtype=np.int32)
  w = batching.lm_windows(stream, batch_size=4, bptt=5)
  row_len = 103 // 4  # 25
  assert len(w) == (row_len - 1) // 5  # the reference's epoch_size: 4
  rows = stream[: 4 * row_len].reshape(4, row_len)
  for i in range(len(w)):
    np.testing.assert_array_equal(w.x[i], rows[:, i * 5:(i + 1) * 5])
    np.testing.assert_array_equal(w.y[i], rows[:, i * 5 + 1:(i + 1) * 5 + 1])
  assert w.mask.all()
  # consecutive windows continue each row (what lets the state be carried)
  np.testing.assert_array_equal(w.x[1][:, 0], w.y[0][:, -1])


def test_windows_without_drop_score_every_target():
  stream = np.arange(103, dtype=np.int32)
  w = batching.lm_windows(stream, batch_size=1, bptt=10, drop_remainder=False)
  assert w.num_tokens == 102  # N - 1 targets, as the reference's batch-1 test
  ys = w.y.reshape(-1)[w.mask.reshape(-1) > 0]
  np.testing.assert_array_equal(ys, stream[1:])


def test_windows_reject_too_short_streams():
  with pytest.raises(ValueError, match="too short"):
    batching.lm_windows(np.arange(5), batch_size=4, bptt=2)
