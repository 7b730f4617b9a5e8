"""Every step the trainers compile lowers for TPU and GPU, checked on this CPU-only machine.

`jax.export` lowers a jitted function for other platforms without their hardware: for each model family the
data-parallel train step (over a 4-device abstract mesh, as on a TPU v5e-4 or a 4-GPU host) and NMT's beam
search are exported for ("tpu", "cuda"). Export refuses host callbacks for those platforms, and the modules
are checked for custom calls (CPU-only kernels); `test_a_host_callback_is_caught` shows the check fails when
such a construct enters a step.
"""
import jax
import jax.numpy as jnp
import optax
import pytest

from configs import large_bd_wd_tied, lbl, nmt_multi30k, nnlm, rhn_tied, small_tied_pr, transformer, w2v_tied
from tests.conftest import tiny_config
from wt_jax import decode, losses, models, parallel
from wt_jax.models import nmt as nmt_model
from wt_jax.models.skipgram import SkipGram
from wt_jax.train import lm, nmt, optim, skipgram

PLATFORMS = ("tpu", "cuda")
DP = parallel.DataParallel(jax.sharding.AbstractMesh((4,), (parallel.DATA_AXIS,)))


def _export(fn, *args):
  exported = jax.export.export(fn, platforms=PLATFORMS)(*args)
  text = exported.mlir_module()
  assert exported.platforms == PLATFORMS
  assert "stablehlo.custom_call" not in text, [l for l in text.splitlines() if "custom_call" in l][:3]
  return exported


def _lm_config(module, **kw):
  base = module.get_config()
  family = {k: base[k] for k in ("model", "depth", "dropout", "dropout_x", "dropout_i", "dropout_h", "dropout_o",
                                 "mask_per_gate", "tie_state_masks", "transform_bias", "context",
                                 "output_projection", "direct", "weight_decay", "weight_decay_mode")}
  return tiny_config(**{**family, "batch_size": 8, "eval_batch_size": 8, "emb_size": 16, **kw},
                     words=dict(mode=base.words.mode, input_scale=base.words.input_scale))


@pytest.mark.parametrize("module,extra", [
    (small_tied_pr, {}), (large_bd_wd_tied, {}), (rhn_tied, {"depth": 2, "num_layers": 1}), (nnlm, {}),
    (lbl, {}), (small_tied_pr, {"compute_dtype": "bfloat16"}),
    (transformer, {"num_layers": 1, "num_heads": 2, "mlp_size": 32, "memory": 4, "optimizer": "adam", "test_window": 5,
                   "warmup_steps": 10}),
    (small_tied_pr, {"softmax": {"kind": "sampled", "num_samples": 8}}),
    (large_bd_wd_tied, {"softmax": {"kind": "nce", "num_samples": 8}}),
    (small_tied_pr, {"softmax": {"kind": "class", "class_bounds": (0, 3, 10, 31)}})],
    ids=["lstm_pr", "bd_lstm", "rhn", "nnlm", "lbl", "lstm_bf16", "transformer", "lstm_sampled", "bd_lstm_nce",
         "lstm_class"])
def test_lm_train_and_eval_steps_lower_for_tpu_and_gpu(module, extra):
  config = _lm_config(module, **extra)
  model = models.build(config)
  tx = optim.make_optimizer(config, steps_per_epoch=100)
  state = jax.eval_shape(lambda k: lm.initial_state(config, model, tx, k), jax.random.key(0))
  x = jax.ShapeDtypeStruct((config.batch_size, config.bptt), jnp.int32)
  step = lm.make_train_step(model, tx, losses.make_lm_cost(config), jax.random.key(1), DP)
  _export(step, state, x, x)
  window = jax.jit(lambda p, c, x, y: model.apply({"params": p}, x, c)[0].sum())
  _export(window, state["params"], state["carry"], x, x)


@pytest.mark.parametrize("batching", ["pairs", "windows", "windows_shared"])
def test_skipgram_step_lowers_for_tpu_and_gpu(batching):
  config = w2v_tied.get_config()
  V, K, N = 50, 4, 16
  model = SkipGram(vocab_size=V, dim=8, tying=config.tying)
  tx = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
  noise = jnp.full((V,), 1.0 / V)
  if batching == "pairs":
    step = skipgram.make_step(model, tx, noise, config.negatives, DP, jax.random.key(0), sparse=True)
  else:  # (one device: the text and its windows whole)
    alias = (jnp.ones((V,)), jnp.arange(V, dtype=jnp.int32))
    step = skipgram.make_window_step(model, alias, config.negatives, config.window, batching == "windows_shared",
                                     jax.random.key(0))

  def init(key):
    one = jnp.zeros((1,), jnp.int32)
    params = model.init(key, one, one, jnp.zeros((1, 1), jnp.int32))["params"]
    return {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32)}

  state = jax.eval_shape(init, jax.random.key(1))
  lrs, first = jax.ShapeDtypeStruct((K,), jnp.float32), jax.ShapeDtypeStruct((), jnp.int32)
  if batching == "pairs":
    ids = jax.ShapeDtypeStruct((K, N), jnp.int32)
    _export(step, state, ids, ids, lrs, first)
  else:
    text = jax.ShapeDtypeStruct((K * N + 2 * config.window,), jnp.int32)
    _export(step, state, text, text, jax.ShapeDtypeStruct((K, N), jnp.int32), lrs, first)


def test_nmt_train_step_and_beam_search_lower_for_tpu_and_gpu():
  config = nmt_multi30k.get_config("three_way")
  config.emb_size, config.hidden_size = 16, 16
  model = nmt_model.from_config(config, 40, 40)
  tx = nmt.make_optimizer(config)
  dummy = jnp.ones((1, 4), jnp.int32)
  params = jax.eval_shape(lambda k: model.init(k, dummy, dummy)["params"], jax.random.key(0))
  state = {"params": params, "opt_state": jax.eval_shape(tx.init, params),
           "step": jax.ShapeDtypeStruct((), jnp.int32)}
  B, S = 8, 12
  ids = jax.ShapeDtypeStruct((B, S), jnp.int32)
  _export(nmt.make_train_step(model, tx, jax.random.key(1), DP), state, ids, ids, ids)
  rows = DP.batch_sharding(0)
  beam = jax.jit(lambda p, src: decode.beam_search(model, p, src, 3, 10, 1.0)[0],
                 in_shardings=(DP.replicated, rows), out_shardings=rows)
  _export(beam, params, ids)


def test_a_host_callback_is_caught():
  """A step that calls back into Python (a debug print left in a cost) cannot be exported for TPU/GPU."""
  config = _lm_config(small_tied_pr)
  model = models.build(config)
  tx = optim.make_optimizer(config, steps_per_epoch=100)
  cost = losses.make_lm_cost(config)

  def cost_with_print(params, logits, targets, penalties, key):
    total, nll = cost(params, logits, targets, penalties, key)
    jax.debug.print("cost {c}", c=total)
    return total, nll

  state = jax.eval_shape(lambda k: lm.initial_state(config, model, tx, k), jax.random.key(0))
  x = jax.ShapeDtypeStruct((config.batch_size, config.bptt), jnp.int32)
  step = lm.make_train_step(model, tx, cost_with_print, jax.random.key(1), DP)
  _export(lm.make_train_step(model, tx, cost, jax.random.key(1), DP), state, x, x)  # without the print: fine
  for platform in PLATFORMS:
    with pytest.raises(ValueError, match="platform"):
      jax.export.export(step, platforms=(platform,))(state, x, x)
