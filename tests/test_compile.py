"""Ahead-of-time compilation for a TPU topology (`wt_jax.aot`, `experiments/compile.py`) on this CPU machine.

The tiny models are compiled by libtpu's TPU compiler for a v5e:2x2 slice (4 chips, data parallel); each
executable must be a TPU one with positive memory figures. `test_the_cpu_trap_is_caught` lowers a step with no
shardings on the TPU mesh — jit then compiles it for the CPU without complaint — and shows the platform check
rejects it. The tests that compile need libtpu (`pip install "jax[tpu]==<jax version>"`) and are skipped
without it.
"""
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from configs import nmt_multi30k, rhn_tied
from tests.conftest import REPO, tiny_config
from wt_jax import aot, batch_search, models
from wt_jax import lm_eval

try:
  import libtpu  # noqa: F401
  HAVE_LIBTPU = True
except ImportError:
  HAVE_LIBTPU = False
needs_libtpu = pytest.mark.skipif(not HAVE_LIBTPU, reason=f"libtpu is not installed ({aot.install_command()})")


@pytest.fixture(scope="module")
def dp():
  return aot.data_parallel("v5e:2x2")


def _tiny_rhn():
  base = rhn_tied.get_config()
  return tiny_config(model="rhn_lm", depth=2, num_layers=1, transform_bias=base.transform_bias,
                     dropout_x=base.dropout_x, dropout_i=base.dropout_i, dropout_h=base.dropout_h,
                     dropout_o=base.dropout_o, weight_decay=base.weight_decay,
                     weight_decay_mode=base.weight_decay_mode, words=dict(mode="tied"))


@needs_libtpu
@pytest.mark.parametrize("make_config", [lambda: tiny_config(words=dict(mode="tied")), _tiny_rhn],
                         ids=["lstm_tied", "rhn_tied"])
def test_lm_steps_compile_for_v5e_2x2(dp, make_config):
  config = make_config()
  assert dp.num_devices == 4 and dp.mesh.devices.flat[0].device_kind == "TPU v5 lite"
  programs = aot.compile_lm(config, dp)
  assert set(programs) == {"train_step", "eval_step"}
  for p in programs.values():
    assert aot.platforms(p.compiled) == {"tpu"} and p.platform == "tpu"
    assert p.memory.arguments > 0 and p.memory.outputs > 0 and p.memory.total > 0, p.memory
    assert p.seconds > 0
    assert "num_partitions=4" in p.compiled.as_text()  # one program for the 4 chips (SPMD)
  train = programs["train_step"]
  assert train.batch_size == config.batch_size and train.memory.aliased > 0  # the donated state is reused


@pytest.mark.slow  # (TPU compilation of the translation model: the LM's tests show the path)
@needs_libtpu
def test_nmt_train_step_and_beam_search_compile(dp):
  config = nmt_multi30k.get_config("three_way")
  config.emb_size = config.hidden_size = 16
  config.bpe_vocab_size, config.max_len, config.buckets = 40, 6, (8,)
  config.batch_size, config.eval_batch_size, config.beam_size, config.decode_max_len = 8, 4, 2, 12
  programs = aot.compile_nmt(config, dp)
  assert set(programs) == {"train_step", "beam_search"}
  for p in programs.values():
    assert p.platform == "tpu" and p.memory.total > 0


@needs_libtpu
def test_the_cpu_trap_is_caught(dp):
  """The eval window is a bare jit: lowered on ShapeDtypeStructs without shardings it is compiled for the
  CPU (no error from JAX); check_tpu refuses it. With the TPU shardings attached, the same jit is TPU."""
  config = tiny_config(words=dict(mode="tied"))
  model = models.build(config)
  params = jax.eval_shape(lambda k: models.init_params(model, config, k), jax.random.key(0))
  carry = jax.eval_shape(lambda: model.initial_carry(config.eval_batch_size))
  ids = jax.ShapeDtypeStruct((config.eval_batch_size, config.bptt), jnp.int32)
  mask = jax.ShapeDtypeStruct(ids.shape, jnp.float32)
  window = lm_eval.make_eval_window(model)
  compiled = window.lower(params, carry, ids, ids, mask).compile()  # no sharding, no mesh set: the CPU
  assert aot.platforms(compiled) == {"cpu"}
  with pytest.raises(aot.NotCompiledForTPU, match="cpu"):
    aot.check_tpu(compiled, "eval_step")
  with pytest.raises(aot.NotCompiledForTPU):
    aot.compile_program("eval_step", window, params, carry, ids, ids, mask)
  assert aot.compile_lm_eval(config, dp).platform == "tpu"


def _cli(*args):
  env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
  env["PYTHONPATH"] = str(REPO)
  return subprocess.run([sys.executable, "-m", "experiments.compile", *args], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=300)


def _tiny_flags(batch_size=4):
  return ["--config=configs/small_tied.py", "--config.vocab_size=31", "--config.hidden_size=16",
          "--config.bptt=5", f"--config.batch_size={batch_size}", "--config.eval_batch_size=4"]


def _aot_record(r):
  assert r.returncode == 0, r.stderr[-2000:]
  return json.loads(next(l for l in r.stdout.splitlines() if l.startswith("AOT_JSON "))[len("AOT_JSON "):])


@pytest.mark.slow
@needs_libtpu
def test_cli_find_max_batch_on_a_tiny_model(tmp_path):
  """On a pretend chip exactly as large as the compiler's figure for a batch of 8 (or for the eval step, if
  larger), the search ends at a batch of at least 8 that fits, next to one a chip-count larger that does not,
  both compiled. The chip size is measured, not fixed: each libtpu release accounts a program's bytes a little
  differently."""
  at_8 = _aot_record(_cli(*_tiny_flags(batch_size=8), "--topology=v5e:1x1"))["programs"]
  limit = max(at_8["train_step"]["total_bytes"], at_8["eval_step"]["total_bytes"])
  r = _cli(*_tiny_flags(batch_size=2), "--topology=v5e:1x1", "--find_max_batch", f"--hbm_gib={limit / aot.GIB}",
           f"--dump_dir={tmp_path}")
  record = _aot_record(r)
  assert record["fits"] and record["chips"] == 1 and record["hbm_bytes_per_chip"] == limit
  assert {p["platform"] for p in record["programs"].values()} == {"tpu"}
  best = record["max_batch"]
  assert best >= 8 and record["smallest_not_fitting"] == best + 1, r.stdout
  assert f"batch {best:7d}:" in r.stdout and f"batch {best + 1:7d}:" in r.stdout
  hlo = sorted(p.name for p in tmp_path.iterdir())
  assert hlo == ["small_tied.v5e_1x1.eval_step.hlo.txt", "small_tied.v5e_1x1.train_step.hlo.txt"]
  assert (tmp_path / hlo[1]).read_text().startswith("HloModule")


@pytest.mark.slow
@needs_libtpu
def test_cli_errors_are_one_line():
  r = _cli(*_tiny_flags(), "--topology=v9:2x2")
  assert r.returncode != 0 and r.stderr.strip().splitlines()[-1].startswith("error: Unknown TPU topology 'v9:2x2'")
  r = _cli(*_tiny_flags(), "--topology=v5e:1x1", f"--hbm_gib={1024 / aot.GIB}")
  assert r.returncode != 0
  assert "does not fit v5e:1x1: train_step needs" in r.stderr.strip().splitlines()[-1]


def test_unknown_topology_names():
  for name in ("v9:2x2", "v5e", "v5e:2", "tpu:2x2", "v5e:0x2"):
    with pytest.raises(aot.TopologyError, match="Unknown TPU topology"):
      aot.parse_topology(name)
  assert aot.parse_topology("v5e:2x4") == ("v5e", (2, 4, 1))
  assert aot.hbm_bytes("v5p:2x2x1") == 95 * aot.GIB


def test_missing_libtpu_names_the_install_command(monkeypatch):
  monkeypatch.setitem(sys.modules, "libtpu", None)  # `import libtpu` now raises ImportError
  with pytest.raises(aot.LibTPUMissing, match=r'pip install "jax\[tpu\]==' + jax.__version__.replace(".", r"\.")):
    aot.topology_devices("v5e:2x2")


@pytest.mark.parametrize("true_max,multiple", [(1, 1), (37, 1), (36, 4), (1000, 8), (4, 4)])
def test_find_max_batch_finds_the_largest_multiple(true_max, multiple):
  """Against a memory curve with jumps (as XLA's is): the answer is exact and every batch tried is counted."""
  calls = []

  def total(b):
    calls.append(b)
    return b * 10 + (500 if b > 16 else 0)

  limit = true_max * 10 + (500 if true_max > 16 else 0)
  s = batch_search.find_max_batch(total, multiple, limit)
  assert s.batch_size == true_max // multiple * multiple and not s.capped
  assert len(calls) == len(set(calls)) == len(s.tried)
  assert len(calls) <= 2 * (true_max // multiple).bit_length() + 2


def test_find_max_batch_edges():
  assert batch_search.find_max_batch(lambda b: b, 4, 3).batch_size == 0  # not even one row per chip
  capped = batch_search.find_max_batch(lambda b: b, 2, 10 ** 9, cap=64)
  assert capped.batch_size == 64 and capped.capped
  def refused(b):  # what the TPU compiler does for a batch far too big
    if b > 40:
      raise batch_search.DoesNotFit(f"train_step at batch {b}: RESOURCE_EXHAUSTED")
    return b
  s = batch_search.find_max_batch(refused, 4, 10 ** 9)
  assert s.batch_size == 40 and s.tried[44] is None and s.tried[40] == 40
  for start in (8, 600, 1000, 1001, 5000):  # from above or below the answer: the same exact answer
    near = batch_search.find_max_batch(lambda b: b, 4, 1000, start=start)
    assert near.batch_size == 1000 and all((b <= 1000) == (v is not None and v <= 1000) for b, v in near.tried.items())
  assert len(batch_search.find_max_batch(lambda b: b, 4, 1000, start=1000, rel_tol=0.25).tried) == 4  # 1000, 2000, 1500, 1248
  assert batch_search.find_max_batch(lambda b: b, 4, 3, start=64).batch_size == 0
  coarse = batch_search.find_max_batch(lambda b: b, 1, 1000, rel_tol=0.25)
  above = min(b for b in coarse.tried if b > coarse.batch_size)
  assert coarse.batch_size <= 1000 < above <= 1.25 * coarse.batch_size


@pytest.mark.slow  # (TPU compilation of members: the LM's tests show the path)
@needs_libtpu
def test_members_compile_with_the_member_axis_over_the_chips(dp):
  """Members of a tiny RHN on v5e:2x2: 8 members with the member axis over the 4 chips put 2 members'
  parameters on each chip (the arguments twice one model's), 4 members over 4 chips one each, 4 members over
  2 chips (the batch over the other 2) two each."""
  config = _tiny_rhn()
  params = aot.compile_lm_train(config, aot.data_parallel("v5e:1x1")).memory.arguments
  devices = list(dp.mesh.devices.flat)
  per_chip = {}
  for k, m in ((8, 4), (4, 4), (4, 2)):
    p = aot.compile_lm_members(config, devices, k, member_devices=m)
    assert p.platform == "tpu" and p.batch_size == k and p.memory.aliased > 0
    assert "num_partitions=4" in p.compiled.as_text()
    per_chip[k, m] = p.memory.arguments / params
  assert 1.6 < per_chip[8, 4] < 2.5 and 0.8 < per_chip[4, 4] < 1.3 and 1.6 < per_chip[4, 2] < 2.5, per_chip


def test_a_memory_budget_that_is_not_a_size_is_refused_in_its_flag():
  """--hbm_gib=-1 had been compared against as "-1048576.0 KiB per chip" and recorded; now absl's one-line
  flags error, before any compile."""
  r = subprocess.run([sys.executable, "-m", "experiments.compile", "--config=configs/small.py",
                      "--topology=v5e:2x2", "--hbm_gib=-1"], cwd=REPO, capture_output=True, text=True, timeout=300)
  assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
  assert "--hbm_gib must be a finite number of GiB > 0" in r.stderr, r.stderr[-2000:]
