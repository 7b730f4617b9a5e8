"""A gs:// workdir end to end, on a stand-in for the bucket.

Every file the trainer writes must go through `etils.epath` or orbax. The stand-in maps `gs://bucket/...`
onto a local folder `store/bucket/...` for both: epath's backend through `etils.epath.testing.mock_epath`
(every function given the mapped path; glob and walk results mapped back), orbax's TensorStore specs for GCS
through the file driver. A write that bypasses them (`pathlib.Path("gs://b/x")` is the local `gs:/b/x`)
lands elsewhere, under the working directory, and the test finds it. The stand-in follows local-disk rules
(renames succeed), so it checks the paths, not a bucket's consistency model.
"""
import json
import os

import pytest
from etils.epath import testing as epath_testing

from tests.conftest import assert_same_numbers, resumed_config
from wt_jax.train import lm


@pytest.fixture
def bucket(tmp_path, monkeypatch):
  import orbax.checkpoint as ocp
  from orbax.checkpoint._src.path import gcs_utils
  if not hasattr(gcs_utils, "get_kvstore_for_gcs"):  # (e.g. orbax 0.12.4 builds them in tensorstore_utils)
    pytest.skip(f"orbax {ocp.__version__} builds TensorStore's GCS specs elsewhere: the stand-in redirects "
                "gcs_utils.get_kvstore_for_gcs")
  store, cwd = tmp_path / "store", tmp_path / "cwd"
  store.mkdir()
  cwd.mkdir()
  monkeypatch.chdir(cwd)
  to_local = lambda p: str(p).replace("gs://", f"{store}/") if str(p).startswith("gs://") else p
  to_url = lambda p: str(p).replace(f"{store}/", "gs://")
  one = lambda fn, path, *a, **kw: fn(to_local(path), *a, **kw)
  two = lambda fn, path, dst, *a, **kw: fn(to_local(path), to_local(dst), *a, **kw)

  def walk(fn, top, **kw):
    for root, dirs, files in fn(to_local(top), **kw):
      yield to_url(root), dirs, files

  monkeypatch.setattr(gcs_utils, "get_kvstore_for_gcs", lambda path: {"driver": "file", "path": to_local(path)})
  monkeypatch.setattr(gcs_utils, "is_hierarchical_namespace_enabled", lambda path: False)
  with epath_testing.mock_epath(
      open=one, exists=one, isdir=one, listdir=one, makedirs=one, mkdir=one, remove=one, rmtree=one, stat=one,
      rename=two, replace=two, copy=two, walk=walk,
      glob=lambda fn, pattern: [to_url(p) for p in fn(to_local(pattern))]):
    yield "gs://bucket/runs/tiny", store / "bucket" / "runs" / "tiny", cwd


def test_a_bucket_workdir_trains_stops_resumes_and_writes_results(uninterrupted, tiny_corpus, bucket, tmp_path):
  """A run stopped after a few steps and resumed in the bucket ends with the numbers of the uninterrupted run
  (trained on a local disk, tests/conftest.py) and writes every output through the bucket's paths."""
  url, local, cwd = bucket
  corpus, _ = tiny_corpus
  first = lm.fit(resumed_config(max_steps=5, checkpoint_every_steps=3, plot=True), corpus, url)  # stopped part-way
  assert first["steps"] == 5
  assert sorted(p.name for p in (local / "checkpoints" / "last").iterdir()) == ["3", "5"]
  res = lm.fit(resumed_config(plot=True), corpus, url)  # the same run without the stop: resumes from the bucket
  assert res["resumed_from_step"] == 5
  assert_same_numbers(res, uninterrupted)
  saved = json.loads((local / "results.json").read_text())
  assert saved["steps"] == res["steps"] and saved["test_ppl"] == res["test_ppl"]
  records = [json.loads(l) for l in (local / "metrics.jsonl").read_text().splitlines()]
  assert [r["epoch"] for r in records if r["kind"] == "epoch"] == [1, 2]
  assert (local / "curves.png").stat().st_size > 1000
  assert not (local / "run.lock").exists()
  assert os.listdir(cwd) == []  # nothing written through a local interpretation of the URL
  # The folder describes itself in the bucket, and exports from there with no corpus anywhere.
  from gensim.models import KeyedVectors
  from wt_jax import export
  assert json.loads((local / "run.json").read_text())["resumes"][0]["step"] == 5
  assert (local / "vocab.txt").read_text().splitlines() == corpus.vocab.words
  out, manifest = export.export_run(url, tmp_path / "export", data_dir=str(tmp_path / "no_data_here"))
  kv = KeyedVectors.load_word2vec_format(str(out / "tied.w2v.txt"), binary=False)  # (the one matrix of a tied model)
  assert list(kv.index_to_key) == corpus.vocab.words and manifest["workdir"] == url
  assert os.listdir(cwd) == []
