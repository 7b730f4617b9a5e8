"""Section 3's update rules (wt_jax/analysis/update_rules.py): the checks pass on random models of every
tying mode and fail when fed a deliberately wrong gradient."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wt_jax.analysis import update_rules as ur
from wt_jax.models import lstm_lm, skipgram

V, H, B, T = 40, 8, 3, 5


def _lm(tying, seed=0):
  model = lstm_lm.LSTMLM(vocab_size=V, hidden=H, num_layers=2, tying=tying)
  kx, ky, kp = jax.random.split(jax.random.PRNGKey(seed), 3)
  x = jax.random.randint(kx, (B, T), 0, V // 2)  # only half the vocabulary as inputs: rows to tell apart
  y = jax.random.randint(ky, (B, T), 0, V)
  params = model.init(kp, x, model.initial_carry(B))["params"]
  return model, params, x, y


def _split(loss_fn, params):
  return ur.role_gradients(loss_fn, params), ur.capture_output_layer(loss_fn, params)


@pytest.mark.parametrize("tying", ["untied", "tied", "projection", "tied_projection"])
def test_lm_section3_holds(tying):
  model, params, x, y = _lm(tying)
  loss_fn = ur.lm_loss(model, x, y)
  grads, cap = _split(loss_fn, params)
  report = ur.section3_checks(grads, cap, params, y, 1.0 / B, x)
  assert report["ok"], report
  assert report["input_rows_moved"] == report["input_words"] == len(np.unique(np.asarray(x)))
  assert report["output_rows_moved"] == V
  assert report["tied"] == (tying in ("tied", "tied_projection"))
  if report["tied"]:
    assert report["tied_rows_moved"] == V  # every row of S moves
  # The split is of the leaves' own gradients: untied U = input role, V = output role; tied S = their sum.
  leaf_grads = jax.grad(loss_fn)(params)["words"]
  if report["tied"]:
    np.testing.assert_allclose(leaf_grads["embedding"], grads["input"] + grads["output"], atol=1e-7)
  else:
    np.testing.assert_allclose(leaf_grads["embedding"], grads["input"], atol=1e-7)
    np.testing.assert_allclose(leaf_grads["out_embedding"], grads["output"], atol=1e-7)


@pytest.mark.parametrize("tying", ["untied", "tied"])
def test_skipgram_full_softmax_by_hand(tying):
  """Skip-gram with a full softmax, h = u_c: ∂U_c = Σ_k (p_k − y_k) V_k and ∂V = (p − y) ⊗ u_c, by NumPy."""
  model = skipgram.SkipGram(vocab_size=12, dim=4, tying=tying)
  centers, contexts = jnp.array([1, 2, 2]), jnp.array([5, 1, 7])
  params = model.init(jax.random.PRNGKey(0), centers, contexts, jnp.zeros((3, 1), jnp.int32))["params"]
  params = jax.tree_util.tree_map(lambda p: p * 40.0, params)  # larger vectors: non-trivial softmax
  loss_fn = lambda p: model.apply({"params": p}, centers, contexts, method=model.full_softmax)
  grads, cap = _split(loss_fn, params)
  assert ur.section3_checks(grads, cap, params, contexts, 1.0, centers)["ok"]

  U = np.asarray(params["words"]["embedding"], np.float64)
  Vm = U if tying == "tied" else np.asarray(params["words"]["out_embedding"], np.float64)
  want_in, want_out = np.zeros_like(U), np.zeros_like(U)
  for c, o in zip(np.asarray(centers), np.asarray(contexts)):
    z = Vm @ U[c]
    p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    err = p - np.eye(12)[o]
    want_in[c] += err @ Vm
    want_out += np.outer(err, U[c])
  np.testing.assert_allclose(grads["input"], want_in, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(grads["output"], want_out, rtol=1e-5, atol=1e-6)


def test_negative_sampling_roles_and_no_softmax_to_capture():
  model = skipgram.SkipGram(vocab_size=12, dim=4, tying="tied")
  c, o, neg = jnp.array([1, 2]), jnp.array([5, 1]), jnp.array([[3, 4], [6, 3]])
  params = model.init(jax.random.PRNGKey(0), c, o, neg)["params"]
  loss_fn = lambda p: model.apply({"params": p}, c, o, neg)
  grads = ur.role_gradients(loss_fn, params)
  assert set(np.flatnonzero(ur.rows_moved(grads["input"]))) == {1, 2}
  assert set(np.flatnonzero(ur.rows_moved(grads["output"]))) == {1, 3, 4, 5, 6}  # contexts and negatives
  with pytest.raises(ValueError, match="full softmax"):
    ur.capture_output_layer(loss_fn, params)


def test_checks_fail_on_wrong_gradients():
  model, params, x, y = _lm("tied")
  grads, cap = _split(ur.lm_loss(model, x, y), params)
  check = lambda g, weight=1.0 / B: ur.section3_checks(g, cap, params, y, weight, x)
  assert check(grads)["ok"]

  # The loss scaled differently (per-token weight 1 instead of 1/B): the output rule is off by B.
  bad = check(grads, weight=1.0)
  assert not bad["ok"] and bad["output_rule_err"] > 0.5

  # An input-role gradient that moves a row of a word that was never an input.
  outsider = int(np.setdiff1d(np.arange(V), np.asarray(x))[0])
  g_in = grads["input"].at[outsider].set(1e-3)
  bad = check(dict(grads, input=g_in))
  assert not bad["ok"] and bad["input_rows_outside"] == 1

  # A tied gradient without the output role (what stop_gradient on the output use would give).
  leaf = {"words/embedding": grads["input"]}
  bad = check(dict(grads, leaves=leaf))
  assert not bad["ok"] and bad["tied_rows_err"] > 0.5 and bad["sum_err"] > 0.5

  # The output gradient with the wrong sign (y − p instead of p − y).
  bad = check(dict(grads, output=-grads["output"]))
  assert not bad["ok"] and bad["output_rule_err"] > 1.0


def test_rows_moved_and_errors():
  g = jnp.zeros((4, 3)).at[1, 2].set(0.5).at[3, 0].set(1e-9)
  np.testing.assert_array_equal(ur.rows_moved(g), [False, True, False, True])
  np.testing.assert_array_equal(ur.rows_moved(g, tol=1e-6), [False, True, False, False])
  with pytest.raises(ValueError, match="embedding"):
    ur.role_gradients(lambda p: jnp.sum(p["w"]), {"w": jnp.ones(3)})
