"""The Zaremba LSTM LM: the cell against a plain NumPy reference, state carrying, dropout on/off."""
import jax
import jax.numpy as jnp
import numpy as np

from wt_jax.models import lstm_lm

V, H, B = 17, 6, 2


def _np_lstm_step(x, c, h, w_ih, w_hh, b):
  """TensorFlow BasicLSTMCell, forget_bias 0: gates (i, j, f, o)."""
  sig = lambda z: 1 / (1 + np.exp(-z))
  g = x @ w_ih + h @ w_hh + b
  i, j, f, o = np.split(g, 4, axis=-1)
  c = sig(f) * c + sig(i) * np.tanh(j)
  return c, sig(o) * np.tanh(c)


def test_matches_numpy_reference():
  model = lstm_lm.LSTMLM(vocab_size=V, hidden=H, num_layers=2, tying="untied", init_scale=0.5)
  x = jax.random.randint(jax.random.key(0), (B, 5), 0, V)
  params = model.init(jax.random.key(1), x, model.initial_carry(B))["params"]
  params = jax.tree_util.tree_map(np.asarray, params)
  # give the zero-initialised biases some value, so their use is tested too
  for l in range(2):
    params[f"lstm_{l}"]["bias"] = np.linspace(-1, 1, 4 * H).astype(np.float32)
  logits, (c_out, h_out) = model.apply({"params": params}, x, model.initial_carry(B))

  w = params["words"]
  c = np.zeros((2, B, H), np.float32)
  h = np.zeros((2, B, H), np.float32)
  expected = []
  for t in range(5):
    inp = w["embedding"][np.asarray(x[:, t])]
    for l in range(2):
      p = params[f"lstm_{l}"]
      c[l], h[l] = _np_lstm_step(inp, c[l], h[l], p["w_ih"], p["w_hh"], p["bias"])
      inp = h[l]
    expected.append(inp @ w["out_embedding"].T + w["out_bias"])
  np.testing.assert_allclose(logits, np.stack(expected, axis=1), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(c_out, c, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(h_out, h, rtol=1e-4, atol=1e-5)


def test_state_carried_across_windows_equals_one_long_window():
  model = lstm_lm.LSTMLM(vocab_size=V, hidden=H, num_layers=2, tying="tied")
  x = jax.random.randint(jax.random.key(0), (B, 8), 0, V)
  params = model.init(jax.random.key(1), x, model.initial_carry(B))
  whole, carry_whole = model.apply(params, x, model.initial_carry(B))
  first, carry = model.apply(params, x[:, :3], model.initial_carry(B))
  second, carry = model.apply(params, x[:, 3:], carry)
  np.testing.assert_allclose(jnp.concatenate([first, second], axis=1), whole, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(carry[1], carry_whole[1], rtol=1e-5, atol=1e-6)


def test_dropout_only_in_training():
  model = lstm_lm.LSTMLM(vocab_size=V, hidden=H, num_layers=2, tying="tied", dropout=0.5)
  x = jax.random.randint(jax.random.key(0), (B, 4), 0, V)
  params = model.init(jax.random.key(1), x, model.initial_carry(B))
  ev1, _ = model.apply(params, x, model.initial_carry(B), train=False)
  ev2, _ = model.apply(params, x, model.initial_carry(B), train=False)
  np.testing.assert_array_equal(ev1, ev2)
  tr1, _ = model.apply(params, x, model.initial_carry(B), train=True, rngs={"dropout": jax.random.key(2)})
  tr2, _ = model.apply(params, x, model.initial_carry(B), train=True, rngs={"dropout": jax.random.key(3)})
  assert not np.allclose(tr1, ev1)
  assert not np.allclose(tr1, tr2)


def _autodiff_recurrence(xw, w_hh, c0, h0):
  """The recurrence written plainly (jnp.tanh for j), differentiated by JAX."""
  def cell(carry, x):
    c, h = carry
    i, j, f, o = jnp.split(x + h @ w_hh, 4, axis=-1)
    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(j)
    h = jax.nn.sigmoid(o) * jnp.tanh(c)
    return (c, h), h
  (c, h), hs = jax.lax.scan(cell, (c0, h0), xw)
  return hs, c, h


def test_custom_vjp_matches_autodiff():
  T, Bq, Hq = 5, 3, 4
  ks = jax.random.split(jax.random.key(0), 6)
  xw = jax.random.normal(ks[0], (T, Bq, 4 * Hq))
  w_hh = jax.random.normal(ks[1], (Hq, 4 * Hq)) * 0.5
  c0, h0 = jax.random.normal(ks[2], (Bq, Hq)), jax.random.normal(ks[3], (Bq, Hq))
  # a loss touching every output, including the final state
  wy, wc = jax.random.normal(ks[4], (T, Bq, Hq)), jax.random.normal(ks[5], (Bq, Hq))

  def loss(fn, *args):
    hs, c, h = fn(*args)
    return jnp.sum(hs * wy) + jnp.sum(c * wc) + jnp.sum(h ** 2)

  ours = jax.jit(jax.grad(lambda *a: loss(lstm_lm.lstm_recurrence, *a), argnums=(0, 1, 2, 3)))(xw, w_hh, c0, h0)
  ref = jax.jit(jax.grad(lambda *a: loss(_autodiff_recurrence, *a), argnums=(0, 1, 2, 3)))(xw, w_hh, c0, h0)
  np.testing.assert_allclose(loss(lstm_lm.lstm_recurrence, xw, w_hh, c0, h0),
                             loss(_autodiff_recurrence, xw, w_hh, c0, h0), rtol=1e-5)
  for a, b in zip(ours, ref):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_embedding_init_scale_draws_only_the_word_layers_wider():
  """`words.init_scale` > 0 widens U(−s, s) for the embedding / output layer and leaves the LSTM at
  init_scale; other models refuse the field rather than ignore it."""
  import pytest
  from configs import nnlm, small
  from wt_jax import models
  from wt_jax.train import lm

  c = small.get_config()
  c.vocab_size, c.hidden_size, c.words.init_scale = 200, 30, 2.0
  model = models.build(c)
  x = jnp.zeros((B, 3), jnp.int32)
  params = model.init(jax.random.key(0), x, model.initial_carry(B))["params"]
  for leaf in ("embedding", "out_embedding"):
    m = float(jnp.abs(params["words"][leaf]).max())
    assert c.init_scale < 1.5 < m <= 2.0, (leaf, m)
  assert float(jnp.abs(params["lstm_0"]["w_ih"]).max()) <= c.init_scale
  c.words.init_scale = 0.0  # off: everything from init_scale
  params = models.build(c).init(jax.random.key(0), x, model.initial_carry(B))["params"]
  assert float(jnp.abs(params["words"]["embedding"]).max()) <= c.init_scale
  n = nnlm.get_config()
  n.words.init_scale = 1.0
  with pytest.raises(ValueError, match="words.init_scale"):  # (refused by the one config check)
    lm.check(n)
