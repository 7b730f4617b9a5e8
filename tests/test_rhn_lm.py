"""`rhn_lm.rhn_recurrence` (the RHN layer's recurrence with its own backward pass) and
`rhn_lm.rhn_recurrence_remat` (the memory option) against autodiff of the plain cell: values and gradients,
depth 1 and 10, with and without the state mask, float32 and bfloat16 matmul inputs; and whole-model
training steps."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import sgd_steps
from wt_jax import precision
from wt_jax.models import rhn_lm

# float32: both sides are one float32 computation in a different order (tanh as 2σ(2z) − 1, ∂R summed over
# time in one matmul instead of step by step); differences are a few ulps of the largest value compared.
F32_RTOL = 1e-5
F32_ATOL = 2e-6  # × the largest |value| of the array compared


def plain_recurrence(xw, r, b, s0, s_mask, matmuls=precision.FLOAT32, unroll=1):
  """The RHN recurrence written plainly (jnp.tanh, jax.nn.sigmoid, `precision.dot`), differentiated by JAX.
  (`unroll`: the recurrence's signature; one step per iteration here.)"""
  d, H = r.shape[0], r.shape[1]

  def step(s, xw_Bx2H):
    for l in range(d):
      z = matmuls.dot(s * s_mask if s_mask is not None else s, r[l]) + b[l]
      if l == 0:
        z = z + xw_Bx2H
      h, t = jnp.tanh(z[:, :H]), jax.nn.sigmoid(z[:, H:])
      s = (h - s) * t + s
    return s, s

  s, y = jax.lax.scan(step, s0, xw)
  return y, s


def _inputs(T, B, H, d, seed=0):
  ks = jax.random.split(jax.random.key(seed), 7)
  xw = jax.random.normal(ks[0], (T, B, 2 * H)) * 0.5
  r = jax.random.uniform(ks[1], (d, H, 2 * H), minval=-0.5, maxval=0.5)
  b = jax.random.uniform(ks[2], (d, 2 * H), minval=-0.1, maxval=0.1).at[:, H:].add(-1.0)
  s0 = jax.random.normal(ks[3], (B, H)) * 0.5
  mask = jax.random.bernoulli(ks[4], 0.75, (B, H)).astype(jnp.float32) / 0.75
  # a loss touching every output, including the final state
  wy, ws = jax.random.normal(ks[5], (T, B, H)), jax.random.normal(ks[6], (B, H))
  return (xw, r, b, s0, mask), (wy, ws)


def _value_and_grads(fn, args, weights, matmuls, with_mask):
  wy, ws = weights

  def loss(xw, r, b, s0, mask):
    y, s = fn(xw, r, b, s0, mask if with_mask else None, matmuls)
    return jnp.sum(y * wy) + jnp.sum(s * ws)

  return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4)))(*args)


def _assert_close(ours, ref, rtol, atol_scale):
  ours, ref = np.asarray(ours), np.asarray(ref)
  np.testing.assert_allclose(ours, ref, rtol=rtol, atol=atol_scale * float(np.max(np.abs(ref))))


# (remat, with_mask, depth) in the fast tier: the mask at depth 10, and remat with the mask at depth 1 (one
# micro-layer); the other combinations repeat those paths.
_F32_FAST = {(False, True, 10), (True, True, 1)}


@pytest.mark.parametrize("remat,with_mask,depth", [
    pytest.param(remat, with_mask, depth, marks=() if (remat, with_mask, depth) in _F32_FAST else pytest.mark.slow)
    for remat in (False, True) for with_mask in (False, True) for depth in (1, 10)])
def test_matches_autodiff_float32(depth, with_mask, remat):
  args, weights = _inputs(T=5, B=3, H=6, d=depth)
  fn = rhn_lm.rhn_recurrence_remat if remat else rhn_lm.rhn_recurrence
  (v, g) = _value_and_grads(fn, args, weights, precision.FLOAT32, with_mask)
  (v_ref, g_ref) = _value_and_grads(plain_recurrence, args, weights, precision.FLOAT32, with_mask)
  _assert_close(v, v_ref, F32_RTOL, F32_ATOL)
  for name, a, b in zip(("xw", "R", "b", "s0", "mask"), g, g_ref):
    if name == "mask" and not with_mask:
      continue
    assert np.all(np.isfinite(a)), name
    _assert_close(a, b, F32_RTOL, F32_ATOL)


def test_outputs_match_the_plain_recurrence():
  (xw, r, b, s0, mask), _ = _inputs(T=7, B=2, H=5, d=3)
  y, s = rhn_lm.rhn_recurrence(xw, r, b, s0, mask, precision.FLOAT32)
  y_ref, s_ref = plain_recurrence(xw, r, b, s0, mask)
  _assert_close(y, y_ref, F32_RTOL, F32_ATOL)
  _assert_close(s, s_ref, F32_RTOL, F32_ATOL)
  np.testing.assert_array_equal(y[-1], s)


@pytest.mark.slow  # (the fast tier: the bfloat16 gradient's matmuls, test_bfloat16_gradient_runs_every_matmul_…)
@pytest.mark.parametrize("with_mask", [False, True])
def test_matches_autodiff_bfloat16(with_mask):
  """bfloat16 matmul inputs: against autodiff of the plain cell with the same bfloat16 matmuls (loose: the
  roundings happen at different places, e.g. ∂R from bfloat16 ∂z summed in one float32 matmul)."""
  args, weights = _inputs(T=5, B=3, H=8, d=4)
  v, g = _value_and_grads(rhn_lm.rhn_recurrence, args, weights, precision.BFLOAT16, with_mask)
  v_ref, g_ref = _value_and_grads(plain_recurrence, args, weights, precision.BFLOAT16, with_mask)
  _, g32 = _value_and_grads(plain_recurrence, args, weights, precision.FLOAT32, with_mask)
  assert float(v) == pytest.approx(float(v_ref), rel=2e-2, abs=2e-2)
  for a, b, c in zip(g[:4], g_ref[:4], g32[:4]):
    assert a.dtype == jnp.float32
    _assert_close(a, b, 0.0, 5e-2)
    _assert_close(a, c, 0.0, 5e-2)


def test_bfloat16_gradient_runs_every_matmul_on_bfloat16():
  from tests.test_precision import _dot_input_dtypes
  args, weights = _inputs(T=3, B=2, H=4, d=2)
  for fn in (rhn_lm.rhn_recurrence, rhn_lm.rhn_recurrence_remat):
    dots = _dot_input_dtypes(lambda *a: _value_and_grads(fn, a, weights, precision.BFLOAT16, True), *args)
    assert len(dots) >= 6 and all(d == ("bfloat16", "bfloat16") for d in dots), dots


@pytest.mark.slow  # (the recurrence's own gradient against autodiff: the fast tier's test_matches_autodiff_float32)
def test_model_training_steps_match_the_plain_recurrence(monkeypatch):
  """A few SGD steps of a small RHN LM with all four dropout masks: the same losses and parameters with the
  custom-VJP recurrence as with autodiff of the plain cell (float32 reassociation only)."""
  V, H, B, T = 50, 12, 4, 6
  model = rhn_lm.RHNLM(vocab_size=V, hidden=H, depth=3, dropout_x=0.25, dropout_i=0.5, dropout_h=0.25,
                       dropout_o=0.5, tying="tied")
  ids = jax.random.randint(jax.random.key(0), (5, B, T + 1), 0, V)
  params0 = model.init(jax.random.key(1), ids[0, :, :T], model.initial_carry(B))["params"]

  def train(recurrence):
    monkeypatch.setattr(rhn_lm, "rhn_recurrence", recurrence)
    return sgd_steps(model, params0, ids, lr=0.5)

  ours, p_ours = train(rhn_lm.rhn_recurrence)
  ref, p_ref = train(plain_recurrence)
  np.testing.assert_allclose(ours, ref, rtol=1e-6)
  jax.tree_util.tree_map(lambda a, b: _assert_close(a, b, F32_RTOL, F32_ATOL), p_ours, p_ref)
