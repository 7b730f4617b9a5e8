"""The VD-LSTM's recurrence with its own backward pass (`lstm_lm.masked_lstm_recurrence`, used by
`bd_lstm_lm`) against autodiff of the plain cell with the state mask: per-gate masks (G = 4, Gal's code) and
one shared mask (G = 1, Inan et al.'s VD-LSTM); values and gradients in float32 (tight) and with bfloat16
matmul inputs (loose); and whole-model training steps with the masks on."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import sgd_steps
from wt_jax import precision
from wt_jax.models import bd_lstm_lm, lstm_lm

# float32: the same computation up to reassociation and tanh(z) = 2σ(2z) − 1: a few ulps of the largest
# value compared.
F32_RTOL = 1e-5
F32_ATOL = 2e-6  # × the largest |value| of the array compared


def plain_masked_recurrence(xw, w_hh, c0, h0, h_mask, matmuls=precision.FLOAT32, unroll=1):
  """The cell as bd_lstm_lm wrote it before it had its own VJP (per-gate masks through an einsum, plain
  σ and tanh), differentiated by JAX. (`unroll`: the recurrence's signature; one step per iteration here.)"""
  H = w_hh.shape[0]

  def gates(h):
    if h_mask is None:
      return matmuls.dot(h, w_hh)
    if h_mask.shape[0] == 1:
      return matmuls.dot(h * h_mask[0], w_hh)
    out = jnp.einsum("gbk,kgh->bgh", h[None] * h_mask, w_hh.reshape(H, 4, H))
    return out.reshape(out.shape[0], 4 * H)

  def cell(carry, xw_t):
    c, h = carry
    i, j, f, o = jnp.split(xw_t + gates(h), 4, axis=-1)
    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(j)
    h = jax.nn.sigmoid(o) * jnp.tanh(c)
    return (c, h), h

  (c, h), hs = jax.lax.scan(cell, (c0, h0), xw)
  return hs, c, h


def _inputs(T, B, H, G, seed=0):
  ks = jax.random.split(jax.random.key(seed), 8)
  xw = jax.random.normal(ks[0], (T, B, 4 * H))
  w = jax.random.normal(ks[1], (H, 4 * H)) * 0.5
  c0, h0 = jax.random.normal(ks[2], (B, H)), jax.random.normal(ks[3], (B, H))
  mask = jax.random.bernoulli(ks[4], 0.7, (G, B, H)).astype(jnp.float32) / 0.7
  weights = (jax.random.normal(ks[5], (T, B, H)), jax.random.normal(ks[6], (B, H)),
             jax.random.normal(ks[7], (B, H)))
  return (xw, w, c0, h0, mask), weights


def _value_and_grads(fn, args, weights, matmuls):
  wy, wc, wh = weights

  def loss(*a):
    hs, c, h = fn(*a, matmuls)
    return jnp.sum(hs * wy) + jnp.sum(c * wc) + jnp.sum(h * wh)

  return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4)))(*args)


def _assert_close(ours, ref, rtol, atol_scale):
  ours, ref = np.asarray(ours), np.asarray(ref)
  np.testing.assert_allclose(ours, ref, rtol=rtol, atol=atol_scale * float(np.max(np.abs(ref))))


@pytest.mark.parametrize("G", [1, 4])
def test_masked_recurrence_matches_autodiff_float32(G):
  args, weights = _inputs(T=6, B=3, H=5, G=G)
  v, g = _value_and_grads(lstm_lm.masked_lstm_recurrence, args, weights, precision.FLOAT32)
  v_ref, g_ref = _value_and_grads(plain_masked_recurrence, args, weights, precision.FLOAT32)
  _assert_close(v, v_ref, F32_RTOL, F32_ATOL)
  for name, a, b in zip(("xw", "w_hh", "c0", "h0", "mask"), g, g_ref):
    assert a.shape == b.shape, name
    _assert_close(a, b, F32_RTOL, F32_ATOL)


@pytest.mark.parametrize("G", [1, 4])
def test_masked_recurrence_outputs(G):
  (xw, w, c0, h0, mask), _ = _inputs(T=6, B=3, H=5, G=G)
  for ours, ref in zip(lstm_lm.masked_lstm_recurrence(xw, w, c0, h0, mask, precision.FLOAT32),
                       plain_masked_recurrence(xw, w, c0, h0, mask)):
    _assert_close(ours, ref, F32_RTOL, F32_ATOL)


def test_all_ones_mask_is_the_unmasked_recurrence():
  (xw, w, c0, h0, _), _ = _inputs(T=4, B=2, H=3, G=1)
  for G in (1, 4):
    ones = jnp.ones((G, 2, 3))
    for a, b in zip(lstm_lm.masked_lstm_recurrence(xw, w, c0, h0, ones, precision.FLOAT32),
                    lstm_lm.lstm_recurrence(xw, w, c0, h0, precision.FLOAT32)):
      _assert_close(a, b, F32_RTOL, F32_ATOL)


@pytest.mark.slow  # (bd_lstm_lm runs its gates in float32; tests/test_precision.py proves the bfloat16 dots)
@pytest.mark.parametrize("G", [1, 4])
def test_masked_recurrence_bfloat16(G):
  """bfloat16 matmul inputs (not used by bd_lstm_lm, whose gates stay float32, but supported like
  lstm_recurrence's): loose agreement with the plain cell in bfloat16 and in float32; every matmul bf16."""
  from tests.test_precision import _dot_input_dtypes
  args, weights = _inputs(T=5, B=3, H=8, G=G)
  v, g = _value_and_grads(lstm_lm.masked_lstm_recurrence, args, weights, precision.BFLOAT16)
  v32, g32 = _value_and_grads(plain_masked_recurrence, args, weights, precision.FLOAT32)
  assert float(v) == pytest.approx(float(v32), rel=3e-2, abs=3e-2)
  for a, b in zip(g, g32):
    assert a.dtype == jnp.float32
    _assert_close(a, b, 0.0, 5e-2)
  dots = _dot_input_dtypes(lambda *a: _value_and_grads(lstm_lm.masked_lstm_recurrence, a, weights,
                                                        precision.BFLOAT16), *args)
  assert dots and all(d == ("bfloat16", "bfloat16") for d in dots), dots


@pytest.mark.slow  # (the recurrence's gradient against autodiff: the fast tier's test_masked_recurrence_matches_…)
@pytest.mark.parametrize("kind", ["gal", "inan"])
def test_model_training_steps_match_the_plain_recurrence(monkeypatch, kind):
  """A few SGD steps of a 2-layer BD LSTM LM with its masks on — Gal's per-gate masks, or Inan et al.'s one
  tied mask per state — give the same losses and parameters with the custom-VJP recurrence as with
  autodiff of the plain cell (float32 reassociation only)."""
  V, H, B, T = 40, 8, 3, 5
  kw = (dict(mask_per_gate=True) if kind == "gal" else dict(mask_per_gate=False, tie_state_masks=True))
  model = bd_lstm_lm.BDLSTMLM(vocab_size=V, hidden=H, num_layers=2, dropout_x=0.2, dropout_i=0.3,
                              dropout_h=0.4, dropout_o=0.3, tying="tied", **kw)
  ids = jax.random.randint(jax.random.key(0), (4, B, T + 1), 0, V)
  params0 = model.init(jax.random.key(1), ids[0, :, :T], model.initial_carry(B))["params"]

  def train(masked, unmasked):
    monkeypatch.setattr(lstm_lm, "masked_lstm_recurrence", masked)
    monkeypatch.setattr(lstm_lm, "lstm_recurrence", unmasked)
    out, p = sgd_steps(model, params0, ids, lr=1.0)
    eval_logits, _ = model.apply({"params": p}, ids[0, :, :T], model.initial_carry(B))  # no masks
    return out, p, eval_logits

  ours = train(lstm_lm.masked_lstm_recurrence, lstm_lm.lstm_recurrence)
  ref = train(plain_masked_recurrence,
              lambda xw, w, c0, h0, matmuls, unroll=1: plain_masked_recurrence(xw, w, c0, h0, None, matmuls))
  np.testing.assert_allclose(ours[0], ref[0], rtol=1e-6)
  jax.tree_util.tree_map(lambda a, b: _assert_close(a, b, F32_RTOL, F32_ATOL), ours[1], ref[1])
  _assert_close(ours[2], ref[2], F32_RTOL, F32_ATOL)
