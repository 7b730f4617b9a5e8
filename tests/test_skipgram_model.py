"""Skip-gram model: one leaf when tied, and the losses and gradients against hand computations."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wt_jax.models.skipgram import SkipGram, negative_sampling_loss, window_loss

V, D = 12, 4


def _init(tying):
  model = SkipGram(vocab_size=V, dim=D, tying=tying)
  c, o, n = jnp.array([1]), jnp.array([2]), jnp.array([[3, 4]])
  return model, model.init(jax.random.key(0), c, o, n)["params"]


def _sig(x):
  return 1 / (1 + np.exp(-x))


def test_tied_has_one_leaf_untied_two():
  _, tied = _init("tied")
  _, untied = _init("untied")
  assert len(jax.tree_util.tree_leaves(tied)) == 1
  assert set(untied["words"]) == {"embedding", "out_embedding"} and set(tied["words"]) == {"embedding"}
  assert np.abs(np.asarray(tied["words"]["embedding"])).max() <= 0.5 / D
  with pytest.raises(ValueError, match="Unknown skip-gram tying"):
    SkipGram(V, D, "projection").init(jax.random.key(0), jnp.array([1]), jnp.array([2]), jnp.array([[3]]))


@pytest.mark.parametrize("tying", ["untied", "tied"])
def test_negative_sampling_loss_and_gradient_by_hand(tying):
  model, params = _init(tying)
  params = jax.tree_util.tree_map(lambda p: jax.random.normal(jax.random.key(3), p.shape), params)
  U = np.asarray(params["words"]["embedding"], np.float64)
  Vm = np.asarray(params["words"]["out_embedding"] if tying == "untied" else U, np.float64)
  c, o, negs = 1, 2, [3, 4]
  loss, grads = jax.value_and_grad(lambda p: model.apply({"params": p}, jnp.array([c]), jnp.array([o]),
                                                          jnp.array([negs]), method=model.negative_sampling))(params)
  want = -np.log(_sig(U[c] @ Vm[o])) - sum(np.log(_sig(-U[c] @ Vm[k])) for k in negs)
  assert float(loss) == pytest.approx(want, rel=1e-5)
  # ∂/∂u_c = (σ(u·v_o) − 1) v_o + Σ_k σ(u·v_k) v_k; ∂/∂v_o = (σ(u·v_o) − 1) u; ∂/∂v_k = σ(u·v_k) u
  g_in = np.zeros((V, D))
  g_out = np.zeros((V, D))
  g_in[c] = (_sig(U[c] @ Vm[o]) - 1) * Vm[o] + sum(_sig(U[c] @ Vm[k]) * Vm[k] for k in negs)
  g_out[o] += (_sig(U[c] @ Vm[o]) - 1) * U[c]
  for k in negs:
    g_out[k] += _sig(U[c] @ Vm[k]) * U[c]
  if tying == "untied":
    np.testing.assert_allclose(grads["words"]["embedding"], g_in, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(grads["words"]["out_embedding"], g_out, rtol=1e-4, atol=1e-6)
  else:  # the one leaf gets both roles' gradients, summed
    np.testing.assert_allclose(grads["words"]["embedding"], g_in + g_out, rtol=1e-4, atol=1e-6)


def test_full_softmax_gradient_is_p_minus_onehot_times_u():
  model, params = _init("untied")
  params = jax.tree_util.tree_map(lambda p: jax.random.normal(jax.random.key(4), p.shape), params)
  U = np.asarray(params["words"]["embedding"], np.float64)
  Vm = np.asarray(params["words"]["out_embedding"], np.float64)
  c, o = 5, 7
  loss, grads = jax.value_and_grad(lambda p: model.apply({"params": p}, jnp.array([c]), jnp.array([o]),
                                                          method=model.full_softmax))(params)
  logits = Vm @ U[c]
  p = np.exp(logits - logits.max())
  p /= p.sum()
  assert float(loss) == pytest.approx(-np.log(p[o]), rel=1e-5)
  onehot = np.eye(V)[o]
  np.testing.assert_allclose(grads["words"]["out_embedding"], np.outer(p - onehot, U[c]), rtol=1e-4, atol=1e-6)
  g_u = np.zeros((V, D))
  g_u[c] = Vm.T @ (p - onehot)  # only the input word's row of U moves
  np.testing.assert_allclose(grads["words"]["embedding"], g_u, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("shared", [True, False])
def test_the_window_loss_and_its_gradient_by_hand(shared):
  """`window_loss`: Σ over the kept (row, output) pairs of −log σ(u·v₀) (the centre, slot 0) and −log σ(−u·v_k)
  (noise), its gradient σ(u·v) − label times the other side — shared, N blocks of T text rows scored against each
  of G centres' output sets; a noise set a slot, B windows of J slots. Shared, it is the per-slot form with each
  centre's set repeated over the rows; every pair kept, it is `negative_sampling_loss` of the same pairs."""
  rng = np.random.default_rng(5)
  N, T, G, O = 3, 4, 2, 3  # (per slot: B = N windows of J = T slots)
  u = rng.normal(size=(N, T, D))
  v = rng.normal(size=(N, G, O, D)) if shared else rng.normal(size=(N, T, O, D))
  mask = rng.random((N, T, G, O) if shared else (N, T, O)) < 0.7
  loss, (g_u, g_v) = jax.value_and_grad(window_loss, argnums=(0, 1))(jnp.asarray(u), jnp.asarray(v), mask)
  want, want_u, want_v = 0.0, np.zeros_like(u), np.zeros_like(v)
  for n, t, *g, o in zip(*np.nonzero(mask)):
    vo = v[n, g[0], o] if shared else v[n, t, o]
    label, s = float(o == 0), u[n, t] @ vo
    want -= np.log(_sig(s)) if o == 0 else np.log(_sig(-s))
    want_u[n, t] += (_sig(s) - label) * vo
    want_v[(n, g[0], o) if shared else (n, t, o)] += (_sig(s) - label) * u[n, t]
  assert float(loss) == pytest.approx(want, rel=1e-5)
  np.testing.assert_allclose(g_u, want_u, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(g_v, want_v, rtol=1e-4, atol=1e-6)
  if shared:  # each centre's set repeated over the rows: the per-slot form, a window per (block, centre)
    per_slot = (np.repeat(u, G, axis=0), np.broadcast_to(v[:, :, None], (N, G, T, O, D)).reshape(N * G, T, O, D),
                mask.transpose(0, 2, 1, 3).reshape(N * G, T, O))
    assert float(window_loss(*per_slot)) == pytest.approx(float(loss), rel=1e-6)
  else:  # all pairs kept: the pairs' negative-sampling loss (context as input, centre as positive)
    every = np.ones((N, T, O), bool)
    pairs = negative_sampling_loss(u.reshape(-1, D), v[:, :, 0].reshape(-1, D), v[:, :, 1:].reshape(-1, O - 1, D))
    assert float(window_loss(u, v, every)) == pytest.approx(float(pairs), rel=1e-6)