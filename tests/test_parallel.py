"""Data parallelism (wt_jax.parallel through every trainer) on simulated CPU devices, and two real processes.

The tiny models train for 24 steps with dropout on; 1, 2, 4 and 8 devices (and 2 processes × 2 devices)
must give the single-device loss trajectory and final parameters to float32 rounding. Each configuration
runs in a helper process (tests/dp_worker.py) because the device count is fixed when JAX starts.
"""
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO, write_corpus

# (rhn: a tied model on 8 devices, a row of the batch each, and the variational masks module, as bd_lstm_lm's; w2v:
# the skip-gram trainer, negatives drawn on device; w2vw: its windows step, each device its share of the text, the
# changes summed at each call's end — a step a call, so the same updates as one device;
# nmt: the translation trainer, with dropout, filler rows in the last batch and sharded beam search)
RUNS = ["lstm:1", "lstm:2", "rhn:1", "rhn:8", "w2v:1", "w2v:4", "w2vw:1", "w2vw:2", "nmt:1", "nmt:4", "mlstm:1",
        "mlstm:2", "mlstm:8"]
# (mlstm: 4 members of a run, wt_jax.members, each with its own dropout and learning rates; 2 devices hold 2
# members each, 8 devices 1 each on a [4, 2] mesh, the batch over 2. More devices for the plain LSTM, or members
# of the variational LSTM, would repeat what these show: the all-reduce, the masks, the member axis over a mesh.)
TIMEOUT_S = 600
pytestmark = pytest.mark.slow  # (every test runs helper processes)


def _env(devices: int, **extra) -> dict:
  env = {k: v for k, v in os.environ.items() if not k.startswith("WT_JAX_") or k == "WT_JAX_DATA"}
  env.update(XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", JAX_PLATFORMS="cpu", **extra)
  return env


def _worker(args, env):
  return subprocess.Popen([sys.executable, "-m", "tests.dp_worker", *args], cwd=REPO, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait(procs):
  try:
    outs = [p.communicate(timeout=TIMEOUT_S)[0] for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  for p, out in zip(procs, outs):
    assert p.returncode == 0, out[-3000:]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  root = tmp_path_factory.mktemp("dp_data")
  write_corpus(root / "ptb")
  return root


def _reads(item) -> list[str]:
  """The single-process runs (of RUNS) a test of this module compares: its `run` and that model's one-device
  run (`lstm:0`, two processes, is not one of them)."""
  run = item.callspec.params.get("run") if hasattr(item, "callspec") else None
  if run is None:
    return []
  return [r for r in (f"{run.split(':')[0]}:1", run) if r in RUNS]


class _Trained:
  """The single-process runs, each trained once, on first use, by a helper process with 8 simulated devices.
  The first use trains every run that the selected tests of this module compare, in one helper
  process (one JAX start-up for them all), so `-k lstm` trains only what it compares; a run
  not foreseen trains when it is asked for."""

  def __init__(self, data, folder, foreseen):
    self._data, self._folder, self._foreseen, self._done = data, folder, foreseen, {}

  def __getitem__(self, run):
    if run not in self._done:
      runs = [r for r in RUNS if r == run or (r in self._foreseen and r not in self._done)]
      out = self._folder / f"out{len(self._done)}.json"
      _wait([_worker([f"--data={self._data}", f"--workdir={self._folder}", f"--out={out}",
                      f"--runs={','.join(runs)}"], _env(8))])
      self._done.update(json.loads(out.read_text()))
    return self._done[run]


@pytest.fixture(scope="module")
def single_process(data, tmp_path_factory, request):
  foreseen = {r for item in request.session.items if item.module is request.module for r in _reads(item)}
  return _Trained(data, tmp_path_factory.mktemp("dp"), foreseen)


def _assert_same_training(got, want, rel=1e-5):
  """N devices train the same model as one, up to float32 reassociation.

  Data parallelism changes only the order of float32 sums (each device sums its rows, then the all-reduce
  adds the partial sums), so every gradient differs from the single-device one by a few ulps (relative
  ~N·2⁻²⁴ ≈ 1e-7 for the sums here), and 24 SGD steps carry and amplify those differences. How much depends
  on the CPU's kernels (vector width, FMA): on some x86 CPUs single parameters end up 1.4e-5 apart. So the
  bound is relative to the parameters' own scale: the whole vector within `rel` (1e-5) of its norm, each parameter
  within 1e-4 of the largest magnitude (plus rtol 1e-4). A real error — an all-reduce that averages instead
  of summing, a mask that depends on the sharding, a missed shard — moves parameters by whole update sizes
  (≥ 1e-3 of the scale here) and fails both bounds. (NMT's bound: `test_nmt_devices_differ_by_rounding_alone`.)
  """
  np.testing.assert_allclose(got["train_ppl"], want["train_ppl"], rtol=1e-5)
  g, w = np.asarray(got["params"]), np.asarray(want["params"])
  assert np.linalg.norm(g - w) <= rel * np.linalg.norm(w), np.linalg.norm(g - w) / np.linalg.norm(w)
  np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * np.abs(w).max())
  if want["valid_ppl"] is not None:
    assert got["valid_ppl"] == pytest.approx(want["valid_ppl"], rel=1e-5)
    assert got["test_ppl"] == pytest.approx(want["test_ppl"], rel=1e-5)


@pytest.mark.parametrize("run", [r for r in RUNS if not r.endswith(":1") and not r.startswith("m")])
def test_devices_reproduce_single_device(single_process, run):
  name, n = run.split(":")
  got, want = single_process[run], single_process[f"{name}:1"]
  assert got["num_devices"] == int(n) and want["num_devices"] == 1
  assert len(want["train_ppl"]) == (24 if name not in ("w2v", "w2vw", "nmt") else len(got["train_ppl"])) > 5
  assert want["train_ppl"][-1] < 0.95 * want["train_ppl"][0]  # it learned something worth comparing
  _assert_same_training(got, want, rel=NMT_REL if name == "nmt" else 1e-5)


# The translation run amplifies float32 rounding most (Adadelta at learning rate 30): 4 devices end 1.1e-6 of the
# parameters' norm from one with jax 0.10.2 and 1.5e-5 with jax 0.12.1, while the same runs in float64 end within
# rounding of each other (test_nmt_devices_differ_by_rounding_alone): the gap is reassociation, and its bound is
# set above the float32 gap measured, far below a real error's 1e-3.
NMT_REL = 1e-4


def test_nmt_devices_differ_by_rounding_alone(data, tmp_path):
  """The NMT runs of 1 and 4 devices in float64 (tests/dp_float64.py: every parameter and product in 64 bits) end
  with parameters within 1e-12 of their norm of each other (3.9e-15 measured): what separates them in float32 is
  the order of float32 sums, not the sharding."""
  out = tmp_path / "out64.json"
  _wait([subprocess.Popen([sys.executable, "-m", "tests.dp_float64", f"--data={data}", f"--workdir={tmp_path}",
                           f"--out={out}", "--runs=nmt:1,nmt:4"], cwd=REPO, env=_env(8), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)])
  runs = json.loads(out.read_text())
  g, w = np.asarray(runs["nmt:4"]["params"]), np.asarray(runs["nmt:1"]["params"])
  assert runs["nmt:4"]["num_devices"] == 4 and runs["nmt:4"]["params_dtypes"] == ["float64"] and len(g) == len(w)
  assert np.linalg.norm(g - w) <= 1e-12 * np.linalg.norm(w), np.linalg.norm(g - w) / np.linalg.norm(w)
  np.testing.assert_allclose(runs["nmt:4"]["train_ppl"], runs["nmt:1"]["train_ppl"], rtol=1e-12)


@pytest.mark.parametrize("run", [r for r in RUNS if not r.endswith(":1") and r.startswith("m")])
def test_members_sharded_over_devices_reproduce_one_device(single_process, run):
  """The member axis split over the devices (and, with 8 devices for 4 members, the batch over the rest)
  trains each member as the one-device members run does."""
  name, n = run.split(":")
  got, want = single_process[run], single_process[f"{name}:1"]
  assert got["num_devices"] == int(n) and want["num_devices"] == 1
  assert len(got["members"]) == len(want["members"]) == 4
  for g, w in zip(got["members"], want["members"]):
    assert w["train_ppl"][-1] < 0.95 * w["train_ppl"][0]
    _assert_same_training(g, w)
  assert len({round(m["test_ppl"], 6) for m in got["members"]}) == 4  # four different models


@pytest.mark.parametrize("run", ["lstm:0", "mlstm:0"])
def test_two_processes_reproduce_single_process(single_process, data, tmp_path, run):
  """Two processes on loopback (gloo collectives), 2 simulated devices each: 4 devices in all. With 4 members
  (mlstm) each process holds two members' state."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  out = tmp_path / "out.json"
  procs = [_worker([f"--data={data}", f"--workdir={tmp_path}", f"--out={out}", f"--runs={run}"],
                   _env(2, WT_JAX_COORDINATOR=f"127.0.0.1:{port}", WT_JAX_NUM_PROCESSES="2",
                        WT_JAX_PROCESS_ID=str(i)))
           for i in range(2)]
  _wait(procs)
  got, want = json.loads(out.read_text())[run], single_process[f"{run.split(':')[0]}:1"]
  assert got["num_devices"] == 4 and got["num_processes"] == 2
  if "members" not in want:
    _assert_same_training(got, want)
    return
  assert len(got["members"]) == len(want["members"]) == 4
  for g, w in zip(got["members"], want["members"]):
    _assert_same_training(g, w)


def test_batch_not_divisible_by_devices_is_a_clear_error():
  code = ("from wt_jax import parallel\n"
          "dp = parallel.DataParallel.create()\n"
          "assert dp.num_devices == 3, dp.num_devices\n"
          "dp.check_batch(20)\n")
  r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_env(3), capture_output=True, text=True,
                     timeout=120)
  assert r.returncode != 0
  assert "batch_size=20 cannot be split over 3 devices" in r.stderr, r.stderr[-2000:]
  assert "--config.batch_size=18" in r.stderr


def test_a_run_saved_from_two_devices_reads_in_a_one_device_process(single_process):
  """`Checkpoints.restore_saved` (the analyses' reader: experiments.embeddings, the word2vec quality records) reads
  a checkpoint that two devices saved, in this one-device process, as the parameters the run ended with."""
  import jax
  from wt_jax.train.checkpoint import Checkpoints
  got = single_process["w2vw:2"]
  assert jax.device_count() == 1
  state, _ = Checkpoints(single_process._folder / "w2vw_2" / "checkpoints", read_only=True).restore_saved("last")
  flat = np.concatenate([np.ravel(np.asarray(p)) for p in jax.tree_util.tree_leaves(state["params"])])
  np.testing.assert_array_equal(flat, np.asarray(got["params"], dtype=flat.dtype))
