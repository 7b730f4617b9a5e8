"""One training step on a GPU against the same step on the CPU, from the same parameters, batch and dropout
key, for every model family (Zaremba's LSTM, the variational LSTM, the RHN, the Transformer LM, attention
NMT). Runs where JAX sees a GPU; skipped elsewhere (CI has none).

What may differ is rounding. The CPU computes float32 products exactly rounded in float32; the GPU either does
the same in another summation order (`matmul_precision = "float32"`), or rounds the matmul inputs to TF32's
11 significant bits (`"tensorfloat32"`, what an A100/H100 does by default). A dot product of K terms then
differs by about √K·u relative (u = 2⁻²⁴ in float32, 2⁻¹¹ for TF32 inputs), and the loss and the gradient
inherit that through the few layers of one step; the bounds below are those sizes with a margin, and the
test compares the step's update Δθ = θ' − θ (what the step computed), not θ' (which hides it under θ):
  float32        loss 1e-5, ‖Δθ_gpu − Δθ_cpu‖ / ‖Δθ_cpu‖ 1e-4
  tensorfloat32  loss 3e-3, update 3e-2
"""
import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from configs import large_bd_tied, rhn_tied, transformer
from tests.conftest import tiny_config
from wt_jax import losses, models, parallel, precision
from wt_jax.train import lm, optim, trainer


def _gpu():
  try:
    return jax.devices("gpu")[0]
  except RuntimeError:
    return None


GPU = _gpu()
pytestmark = pytest.mark.skipif(GPU is None, reason="no GPU visible to JAX: this test compares a GPU's train "
                                                    "step with the CPU's (run it on a GPU host with "
                                                    "JAX_PLATFORMS=cuda,cpu: the suite is on the CPU otherwise)")
TOLERANCE = {"float32": (1e-5, 1e-4), "tensorfloat32": (3e-3, 3e-2)}  # (loss, update), relative


def _on(device) -> parallel.DataParallel:
  return parallel.DataParallel(Mesh(np.array([device]), (parallel.DATA_AXIS,)))


def _lm_config(family):
  if family == "lstm_lm":
    c = tiny_config(dropout=0.3, hidden_size=64, bptt=12, batch_size=8)
  elif family == "bd_lstm_lm":
    c = large_bd_tied.get_config()
    c.hidden_size, c.batch_size, c.bptt = 64, 8, 12
  elif family == "rhn_lm":
    c = rhn_tied.get_config()
    c.hidden_size, c.depth, c.batch_size, c.bptt = 64, 4, 8, 12
  else:
    c = transformer.get_config("tied,sqrt_d")
    c.hidden_size, c.mlp_size, c.num_layers, c.batch_size, c.bptt, c.memory = 64, 128, 2, 8, 12, 4
    c.test_window = c.bptt
  c.vocab_size = 97
  return c


def _lm_step(config, dp):
  """(loss, θ, θ') of one step of `lm.make_train_step` compiled for dp's one device."""
  model = models.build(config)
  tx = optim.make_optimizer(config, steps_per_epoch=10)
  with jax.default_device(jax.devices("cpu")[0]):  # the same initial values for both devices
    init_key, step_key = trainer.run_keys(0)
    state = lm.initial_state(config, model, tx, init_key)
  before = jax.device_get(state["params"])
  rng = np.random.default_rng(1)
  x = rng.integers(0, config.vocab_size, (config.batch_size, config.bptt)).astype(np.int32)
  y = rng.integers(0, config.vocab_size, (config.batch_size, config.bptt)).astype(np.int32)
  step = lm.make_train_step(model, tx, losses.make_lm_cost(config), step_key, dp)
  state = dp.replicate(state)
  state = {**state, "carry": dp.shard_batch(jax.device_get(state["carry"]), models.CARRY_BATCH_AXIS)}
  state, sums = step(state, *dp.shard_batch((x, y)))
  return float(sums["nll"] / sums["tokens"]), before, jax.device_get(state["params"])


def _nmt_step(dp):
  from configs import nmt_multi30k
  from wt_jax.models import nmt
  from wt_jax.train import nmt as nmt_train
  c = nmt_multi30k.get_config("three_way")
  c.emb_size, c.hidden_size, c.dropout = 32, 48, 0.2
  V, B, S, T = 61, 8, 9, 7
  model = nmt.from_config(c, V, V)
  tx = nmt_train.make_optimizer(c)
  with jax.default_device(jax.devices("cpu")[0]):
    state = nmt_train.init_state(model, tx, jax.random.key(0), "uniform", [], _on(jax.devices("cpu")[0]))
    dropout_key = jax.random.key(5)
  before = jax.device_get(state["params"])
  rng = np.random.default_rng(2)
  src = rng.integers(4, V, (B, S)).astype(np.int32)
  src[:, -1] = 3  # EOS
  tgt = rng.integers(4, V, (B, T + 1)).astype(np.int32)
  tgt[:, 0] = 2  # BOS
  step = nmt_train.make_train_step(model, tx, dropout_key, dp)
  state, (nll, tokens) = step(dp.replicate(jax.device_get(state)), *dp.shard_batch((src, tgt[:, :-1], tgt[:, 1:])))
  return float(nll / tokens), before, jax.device_get(state["params"])


def _relative_update_error(before, cpu_after, gpu_after) -> float:
  num = den = 0.0
  for b, c, g in zip(*(jax.tree_util.tree_leaves(t) for t in (before, cpu_after, gpu_after))):
    d_cpu, d_gpu = np.asarray(c, np.float64) - b, np.asarray(g, np.float64) - b
    num += float(np.sum((d_gpu - d_cpu) ** 2))
    den += float(np.sum(d_cpu ** 2))
  return (num / max(den, 1e-300)) ** 0.5


@pytest.mark.parametrize("matmul_precision", ["float32", "tensorfloat32"])
@pytest.mark.parametrize("family", ["lstm_lm", "bd_lstm_lm", "rhn_lm", "transformer_lm", "nmt"])
def test_one_train_step_on_the_gpu_matches_the_cpu(family, matmul_precision):
  loss_tol, update_tol = TOLERANCE[matmul_precision]
  results = {}
  for name, device in (("cpu", jax.devices("cpu")[0]), ("gpu", GPU)):
    with jax.default_matmul_precision(precision.MATMUL_PRECISIONS[matmul_precision]):
      results[name] = _nmt_step(_on(device)) if family == "nmt" else _lm_step(_lm_config(family), _on(device))
  (loss_c, before, after_c), (loss_g, _, after_g) = results["cpu"], results["gpu"]
  assert np.isfinite(loss_g) and abs(loss_g - loss_c) <= loss_tol * abs(loss_c), (loss_g, loss_c)
  err = _relative_update_error(before, after_c, after_g)
  print(f"{family} {matmul_precision}: loss {loss_c:.7g} (cpu) {loss_g:.7g} (gpu), update error {err:.2e}")
  assert err <= update_tol, err


# --- run-to-run determinism on the GPU ----------------------------------------------------------------------
# XLA:GPU's scatter-adds (the embedding gradient: many tokens add into the same rows) and some reductions use
# atomics by default, whose order varies run to run. With `config.deterministic` (experiments.apply_determinism:
# XLA_FLAGS=--xla_gpu_deterministic_ops=true, read once per process, so each run is its own process) two runs
# of the same steps must give the same bits.
_DETERMINISM_RUN = """
import hashlib, sys
import numpy as np
from configs import large_bd_tied
import experiments
from wt_jax import parallel
c = large_bd_tied.get_config()
c.hidden_size, c.batch_size, c.bptt, c.vocab_size = 256, 20, 35, 97
c.matmul_precision, c.deterministic = "tensorfloat32", sys.argv[1] == "1"
experiments.apply_determinism(c)  # (before JAX starts its backends)
import jax
from jax.sharding import Mesh
from wt_jax import losses, models, parallel
from wt_jax.train import lm, optim, trainer
dp = parallel.DataParallel(Mesh(np.array([jax.devices("gpu")[0]]), (parallel.DATA_AXIS,)))
model, tx = models.build(c), optim.make_optimizer(c, steps_per_epoch=10)
init_key, step_key = trainer.run_keys(0)
state = dp.replicate(lm.initial_state(c, model, tx, init_key))
state = {**state, "carry": dp.shard_batch(jax.device_get(state["carry"]), models.CARRY_BATCH_AXIS)}
step = lm.make_train_step(model, tx, losses.make_lm_cost(c), step_key, dp)
rng = np.random.default_rng(1)
for _ in range(5):
  x, y = (rng.integers(0, c.vocab_size, (c.batch_size, c.bptt)).astype(np.int32) for _ in range(2))
  state, sums = step(state, *dp.shard_batch((x, y)))
digest = hashlib.sha256()
for leaf in jax.tree_util.tree_leaves(jax.device_get(state["params"])):
  digest.update(np.asarray(leaf).tobytes())
print(parallel.determinism_in(__import__("os").environ.get("XLA_FLAGS", "")), digest.hexdigest())
"""


def _params_digest(deterministic: bool) -> str:
  import os
  import subprocess
  import sys
  from tests.conftest import REPO
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  res = subprocess.run([sys.executable, "-c", _DETERMINISM_RUN, "1" if deterministic else "0"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
  assert res.returncode == 0, res.stderr[-3000:]
  flag, digest = res.stdout.split()[-2:]
  assert flag == ("True" if deterministic else "None")  # the flag reached XLA_FLAGS before the backend
  return digest


def test_two_deterministic_runs_give_the_same_parameters_bit_for_bit():
  first, second = _params_digest(True), _params_digest(True)
  default = {_params_digest(False), _params_digest(False)}
  print(f"\nparameters after 5 steps: deterministic runs {first[:12]} {second[:12]}; default runs "
        f"{' '.join(d[:12] for d in default)} ({'the same' if len(default) == 1 else 'different'})")
  assert first == second
