"""`config.scan_unroll`: the recurrences (Zaremba's LSTM, the variational LSTM, the RHN) run the same
arithmetic whatever the number of time steps per compiled loop iteration, so one training step from the same
parameters and batch gives the same loss, gradient norm and parameters (to float32 rounding: unrolling can
only change how XLA fuses the elementwise ops of neighbouring steps)."""
import jax
import numpy as np
import pytest

from configs import large_bd_tied, rhn_tied
from tests.conftest import tiny_config
from wt_jax import losses, models
from wt_jax.models import lstm_lm
from wt_jax.train import lm, optim, trainer


def _one_step(config, loops: list | None = None):
  model = models.build(config)
  tx = optim.make_optimizer(config, steps_per_epoch=10)
  init_key, step_key = trainer.run_keys(0)
  state = lm.initial_state(config, model, tx, init_key)
  step = lm.make_train_step(model, tx, losses.make_lm_cost(config), step_key)
  rng = np.random.default_rng(0)
  x = rng.integers(0, config.vocab_size, (config.batch_size, config.bptt)).astype(np.int32)
  y = rng.integers(0, config.vocab_size, (config.batch_size, config.bptt)).astype(np.int32)
  if loops is not None:  # the compiled loops of the step (forward and backward over time, per layer)
    loops.append(step.lower(state, x, y).as_text().count("stablehlo.while"))
  state, sums = step(state, x, y)
  state, sums2 = step(state, y, x)  # a second window: the carried state goes through the loop too
  return jax.device_get((state["params"], sums, sums2))


def _shrink(config, **kw):
  config.vocab_size, config.hidden_size, config.batch_size, config.bptt = 31, 16, 4, 7
  for k, v in kw.items():
    config[k] = v
  return config


@pytest.mark.slow  # (the fast tier unrolls the LSTM's whole window in the last test of this file)
@pytest.mark.parametrize("family", ["lstm_lm", "bd_lstm_lm", "rhn_lm"])
@pytest.mark.parametrize("unroll", [2, 7])
def test_unrolled_loops_train_the_same(family, unroll):
  base = {"lstm_lm": lambda: tiny_config(dropout=0.3, bptt=7),
          "bd_lstm_lm": lambda: _shrink(large_bd_tied.get_config()),
          "rhn_lm": lambda: _shrink(rhn_tied.get_config(), depth=3)}[family]
  loops = []
  ref_params, ref_sums, ref_sums2 = _one_step(base(), loops)
  config = base()
  config.scan_unroll = unroll
  params, sums, sums2 = _one_step(config, loops)
  if unroll == config.bptt:  # it took effect: the time loops are gone (other loops of the step may remain)
    assert loops[1] < loops[0], loops
  for a, b in ((sums, ref_sums), (sums2, ref_sums2)):
    np.testing.assert_allclose(a["nll"], b["nll"], rtol=1e-6)
    np.testing.assert_allclose(a["norm/grad"], b["norm/grad"], rtol=1e-5)
  for (path, p), q in zip(jax.tree_util.tree_leaves_with_path(params), jax.tree_util.tree_leaves(ref_params)):
    np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6, err_msg=jax.tree_util.keystr(path))


def test_automatic_unroll_is_the_whole_window_for_the_lstms_on_a_gpu_only():
  config = tiny_config()
  assert config.scan_unroll == 0  # the default: automatic
  assert lstm_lm.loop_unroll(config, "gpu") is True
  assert lstm_lm.loop_unroll(config, "cpu") == lstm_lm.loop_unroll(config, "tpu") == 1
  config.scan_unroll = 5  # an explicit setting wins everywhere
  assert lstm_lm.loop_unroll(config, "gpu") == lstm_lm.loop_unroll(config, "cpu") == 5
  config.scan_unroll = -1
  with pytest.raises(ValueError, match="scan_unroll must be ≥ 0"):
    lm.check(config)


def test_the_automatic_gpu_choice_removes_the_time_loops_and_trains_the_same(monkeypatch):
  loops = []
  ref = _one_step(tiny_config(dropout=0.3, bptt=7), loops)
  monkeypatch.setattr(lstm_lm.jax, "default_backend", lambda: "gpu")  # what models.build sees on a GPU
  config = tiny_config(dropout=0.3, bptt=7)
  assert models.build(config).unroll is True
  got = _one_step(config, loops)
  assert loops[1] < loops[0], loops
  for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(ref)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
