"""Tying is one shared leaf: structure, use, gradients, optimizer state, parameter counts, PR penalty."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tests.conftest import tiny_config
from wt_jax import losses, models, tying
from wt_jax.models import lstm_lm


V, H, B, T = 23, 8, 3, 4


def _model(mode, **kw):
  return lstm_lm.LSTMLM(vocab_size=V, hidden=H, num_layers=2, tying=mode, init_scale=0.3, **kw)


def _init(model, seed=0):
  x = jnp.zeros((B, T), jnp.int32)
  return model.init(jax.random.key(seed), x, model.initial_carry(B))["params"]


def _data(seed=1):
  k1, k2 = jax.random.split(jax.random.key(seed))
  return jax.random.randint(k1, (B, T), 0, V), jax.random.randint(k2, (B, T), 0, V)


@pytest.mark.parametrize("mode,n_matrices", [("untied", 2), ("tied", 1), ("projection", 2),
                                              ("tied_projection", 1)])
def test_number_of_embedding_matrices(mode, n_matrices):
  params = _init(_model(mode))
  vxh = [p for p in jax.tree_util.tree_leaves(params) if p.shape == (V, H)]
  assert len(vxh) == n_matrices
  assert len(tying.embedding_leaves(params)) == n_matrices
  assert ("proj_kernel" in params["words"]) == ("projection" in mode)


def test_tied_lookup_and_logits_use_the_one_matrix():
  model = _model("tied")
  params = _init(model)
  S, b = params["words"]["embedding"], params["words"]["out_bias"]
  ids = jnp.array([[1, 5, 7]])
  emb = model.apply({"params": params}, ids, method=lambda m, i: m.words.embed(i))
  np.testing.assert_array_equal(emb, S[ids])
  h = jax.random.normal(jax.random.key(3), (2, H))
  logits = model.apply({"params": params}, h, method=lambda m, x: m.words.logits(x))
  np.testing.assert_allclose(logits, h @ S.T + b, rtol=1e-6, atol=1e-6)
  # Changing the one matrix changes both the lookup and the logits.
  params2 = jax.tree_util.tree_map(lambda x: x, params)
  params2["words"]["embedding"] = S.at[5].add(1.0)
  emb2 = model.apply({"params": params2}, ids, method=lambda m, i: m.words.embed(i))
  logits2 = model.apply({"params": params2}, h, method=lambda m, x: m.words.logits(x))
  assert not np.allclose(emb2, emb)
  assert not np.allclose(logits2[:, 5], logits[:, 5])


@pytest.mark.parametrize("tied_mode,untied_mode", [
    ("tied", "untied"), pytest.param("tied_projection", "projection", marks=pytest.mark.slow)])
def test_tied_gradient_is_sum_of_input_and_output_gradients(tied_mode, untied_mode):
  """Press & Wolf Sec. 3: the tied update is the sum of the input- and output-embedding updates."""
  x, y = _data()
  tied, untied = _model(tied_mode), _model(untied_mode)
  p_tied = _init(tied)
  p_untied = _init(untied)
  p_untied = jax.tree_util.tree_map(lambda a: a, p_untied)
  for k, v in p_tied.items():  # copy every shared parameter, then set U = V = S
    if k != "words":
      p_untied[k] = v
  p_untied["words"] = dict(p_tied["words"], out_embedding=p_tied["words"]["embedding"])

  def loss(model, params):
    logits, _ = model.apply({"params": params}, x, model.initial_carry(B))
    return losses.zaremba_cost(losses.token_nll(logits, y))

  g_tied = jax.jit(jax.grad(lambda p: loss(tied, p)))(p_tied)
  g_untied = jax.jit(jax.grad(lambda p: loss(untied, p)))(p_untied)
  np.testing.assert_allclose(loss(tied, p_tied), loss(untied, p_untied), rtol=1e-6)
  summed = g_untied["words"]["embedding"] + g_untied["words"]["out_embedding"]
  np.testing.assert_allclose(g_tied["words"]["embedding"], summed, rtol=1e-5, atol=1e-6)
  # Both parts are non-trivial, so the test would fail if either use were missing.
  assert float(jnp.abs(g_untied["words"]["embedding"]).sum()) > 1e-3
  assert float(jnp.abs(g_untied["words"]["out_embedding"]).sum()) > 1e-3


def test_tied_leaf_has_one_optimizer_slot():
  params = _init(_model("tied"))
  state = optax.adam(1e-3).init(params)
  mu = state[0].mu
  chex.assert_trees_all_equal_structs(mu, params)
  assert len([l for l in jax.tree_util.tree_leaves(mu) if l.shape == (V, H)]) == 1
  untied_mu = optax.adam(1e-3).init(_init(_model("untied")))[0].mu
  assert len([l for l in jax.tree_util.tree_leaves(untied_mu) if l.shape == (V, H)]) == 2


EXPECTED_COUNTS = {
    # Press & Wolf (2017) Tables 5/6 sizes; PR rows include the authors' projection bias (see BUILD_NOTES.md).
    "small": 4_651_600, "small_tied": 2_651_600, "small_pr": 4_691_800, "small_tied_pr": 2_691_800,
    "medium": 19_775_200, "medium_tied": 13_275_200, "large": 66_022_000, "large_tied": 51_022_000,
}


@pytest.mark.parametrize("name", sorted(EXPECTED_COUNTS))
def test_parameter_counts(name):
  import importlib
  config = importlib.import_module(f"configs.{name}").get_config()
  model = models.build(config)
  x = jnp.zeros((1, 2), jnp.int32)
  shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), x, model.initial_carry(1))["params"])
  assert tying.count_params(shapes) == EXPECTED_COUNTS[name]


def test_projection_without_bias_adds_exactly_the_projection_matrix():
  """Without the authors' proj_b, the PR rows are exactly 40,000 (= 200²) above the plain rows."""
  from configs import small_pr, small_tied_pr
  for mod, expected in ((small_pr, 4_691_600), (small_tied_pr, 2_691_600)):
    config = mod.get_config()
    config.words.proj_bias = False
    model = models.build(config)
    x = jnp.zeros((1, 2), jnp.int32)
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), x, model.initial_carry(1))["params"])
    assert tying.count_params(shapes) == expected


def test_projection_penalty_value_and_gradient():
  lam = 0.25
  head = tying.WordEmbeddings(vocab_size=V, dim=H, mode="tied_projection", pr_lambda=lam)
  h = jax.random.normal(jax.random.key(0), (5, H))
  params = head.init(jax.random.key(1), h, method=head.logits)["params"]
  P = jnp.arange(H * H, dtype=jnp.float32).reshape(H, H) / 10.0
  params = dict(params, proj_kernel=P)

  def penalty(p):
    _, aux = head.apply({"params": p}, h, method=head.logits, mutable=[tying.PENALTIES])
    return sum(jax.tree_util.tree_leaves(aux[tying.PENALTIES]), jnp.zeros((), jnp.float32))

  np.testing.assert_allclose(penalty(params), lam * 0.5 * float(jnp.sum(P ** 2)), rtol=1e-6)
  g = jax.grad(penalty)(params)
  np.testing.assert_allclose(g["proj_kernel"], lam * P, rtol=1e-6)
  # Only P is penalised.
  for k in g:
    if k != "proj_kernel":
      assert float(jnp.abs(g[k]).max()) == 0.0


def test_logit_scale_flag():
  h = jax.random.normal(jax.random.key(0), (2, H))
  plain = tying.WordEmbeddings(vocab_size=V, dim=H, mode="tied", output_bias=False)
  scaled = tying.WordEmbeddings(vocab_size=V, dim=H, mode="tied", output_bias=False, logit_scale=True)
  params = plain.init(jax.random.key(1), h, method=plain.logits)
  np.testing.assert_allclose(scaled.apply(params, h, method=scaled.logits),
                             plain.apply(params, h, method=plain.logits) / np.sqrt(H), rtol=1e-6)


def test_unknown_mode_is_rejected():
  with pytest.raises(ValueError, match="tying mode"):
    _init(_model("shared"))


def test_tiny_config_builds():
  """tiny_config (small.py shrunk, untied): V = 31, H = 16, two LSTM layers of W_ih, W_hh (H × 4H) and one 4H
  bias, the V × H embedding, the V × H output matrix and its V biases."""
  assert tying.count_params(_init(models.build(tiny_config()))) == 2 * (2 * 16 * 64 + 64) + 2 * 31 * 16 + 31
