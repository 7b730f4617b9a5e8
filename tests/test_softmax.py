"""Softmax approximations over the word matrix (`wt_jax.softmax`): the estimates, the rows they reach, the
class-factored model's normalisation, and their place in the one train step."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import tiny_config
from wt_jax import losses, models, softmax, tying
from wt_jax.train import lm, optim

V, D, N = 40, 6, 5


def _head(seed=0):
  k = jax.random.split(jax.random.key(seed), 4)
  z = jax.random.normal(k[0], (N, D))
  w = 0.5 * jax.random.normal(k[1], (V, D))
  b = 0.5 * jax.random.normal(k[2], (V,))
  y = jax.random.randint(k[3], (N,), 0, V)
  return z, w, b, y


def _full_nll(z, w, b, y):
  return jax.nn.logsumexp(z @ w.T + b, axis=1) - softmax.target_scores(z, w, b, y)


# --- the proposal and the draw ---------------------------------------------------------------------------

def test_log_uniform_proposal_is_tensorflows_and_draws_follow_it():
  log_q = softmax.proposal_log_probs("log_uniform", V)
  r = np.arange(V)
  np.testing.assert_allclose(np.exp(log_q), (np.log(r + 2) - np.log(r + 1)) / np.log(V + 1), rtol=1e-12)
  assert np.exp(log_q).sum() == pytest.approx(1.0, abs=1e-12)
  edges, _ = softmax.quantise(log_q)
  ids = softmax.draw(jax.random.key(0), jnp.asarray(edges), 200_000)
  freq = np.bincount(np.asarray(ids), minlength=V) / 200_000
  # 4 standard deviations of a binomial proportion at n = 200k
  assert np.all(np.abs(freq - np.exp(log_q)) < 4 * np.sqrt(np.exp(log_q) / 200_000))


@pytest.mark.parametrize("vocab", [V, 33_278])  # 33,278: WikiText-2, whose rarest words Q gives ≈ 2.9e-6
def test_the_draw_follows_exactly_the_q_the_costs_correct_with(vocab):
  """`draw` maps a uniform 32-bit integer u to the id whose interval [E_{i−1}, E_i) holds it, so it returns id i
  with probability (E_i − E_{i−1}) / 2^32 — and that is exp(log Q') of `quantise`, the log Q the costs
  subtract. Checked at every interval's two ends; Q' is Q to within 2^−33 (the likeliest word: V · 2^−33)."""
  log_q = softmax.proposal_log_probs("log_uniform", vocab)
  edges, log_q_rounded = softmax.quantise(log_q)
  lo = np.concatenate([[0], edges.astype(np.int64)])
  hi = np.concatenate([edges.astype(np.int64), [2**32]])
  # exp(log x) in float64 returns x to within |log x| · 2^−52 relative (|log x| < 23 here)
  np.testing.assert_allclose(np.exp(log_q_rounded), (hi - lo) / 2**32, rtol=23 * 2.0**-52, atol=0)
  assert np.all(hi > lo)  # every word can be drawn
  for bits in (lo, hi - 1):
    ids = softmax.ids_of_bits(jnp.asarray(edges), jnp.asarray(bits.astype(np.uint32)))
    np.testing.assert_array_equal(np.asarray(ids), np.arange(vocab))
  tiny = softmax.quantise(np.log([1 - 1e-12, 1e-12]))  # a word below 2^−33 still gets one 2^−32
  assert tiny[0][0] == 2**32 - 1 and np.exp(tiny[1][1]) == pytest.approx(2.0**-32, rel=1e-14)
  err = np.abs(np.exp(log_q_rounded) - np.exp(log_q))
  assert np.max(np.delete(err, np.argmax(log_q))) <= 2.0**-33 and err.max() <= vocab * 2.0**-33
  # the costs read log Q' in float32: off by at most half an ulp of |log Q'| ≤ 16 (2^−20), a relative 1e-6 of Q'
  cost_log_q = np.asarray(jnp.asarray(log_q_rounded, jnp.float32), np.float64)
  assert np.max(np.abs(cost_log_q - log_q_rounded)) <= 2.0**-20


def test_expected_distinct_candidates():
  """Σ_w 1 − (1 − Q(w))^K: V(1 − (1 − 1/V)^K) for a uniform Q, and the count a simulation of K draws reaches."""
  assert softmax.expected_distinct(np.full(V, -np.log(V)), 60) == pytest.approx(V * (1 - (1 - 1 / V) ** 60))
  log_q = softmax.proposal_log_probs("log_uniform", 10_000)
  edges, _ = softmax.quantise(log_q)
  draws = jax.vmap(lambda k: softmax.draw(k, jnp.asarray(edges), 1000))(jax.random.split(jax.random.key(0), 200))
  seen = np.mean([len(np.unique(d)) for d in np.asarray(draws)])
  expected = softmax.expected_distinct(log_q, 1000)
  assert expected == pytest.approx(536.6, abs=0.05)  # PTB's log-uniform K = 1,000 (configs/lm_base.py)
  assert abs(seen - expected) < 1.5  # the count's sd is ≈ 11 per draw: ≈ 0.8 over 200 draws
  assert softmax.expected_candidate_rows(tiny_config(vocab_size=10_000, softmax=dict(kind="nce"))) == \
      pytest.approx(expected, rel=1e-6)  # the config's K and Q (the draw's rounded Q: within 2^−33 per word)
  unigram = tiny_config(vocab_size=4, softmax=dict(kind="sampled", proposal="unigram", unigram_power=1.0,
                                                   num_samples=2))
  assert softmax.expected_candidate_rows(unigram, np.array([2, 1, 1, 0])) == pytest.approx(
      sum(1 - (1 - q) ** 2 for q in (0.4, 0.2, 0.2, 0.2)), rel=1e-8)  # a zero count counts as 1
  assert softmax.expected_candidate_rows(tiny_config(softmax=dict(kind="class"))) is None


def test_unigram_proposal_and_bad_proposals():
  counts = np.array([9, 4, 1, 0])
  q = np.exp(softmax.proposal_log_probs("unigram", 4, counts, power=0.5))
  np.testing.assert_allclose(q, np.array([3, 2, 1, 1]) / 7, rtol=1e-12)  # a zero count counts as 1
  with pytest.raises(ValueError, match="training counts"):
    softmax.proposal_log_probs("unigram", 4, None)
  with pytest.raises(ValueError, match="Unknown softmax.proposal"):
    softmax.proposal_log_probs("zipf", 4)


# --- sampled softmax -------------------------------------------------------------------------------------

def test_sampled_gradient_tends_to_the_full_softmax_gradient_as_k_grows():
  """The mean over 64 draws of the sampled loss's gradient, against the exact gradient, for K = 10 … 1000:
  the error falls with K (the estimate of Σ_{w≠y} exp s_w is unbiased; the log makes the loss's bias O(1/K))
  and is ~1% at K = 1000 on this 40-word vocabulary."""
  z, w, b, y = _head()
  edges, log_q = softmax.quantise(softmax.proposal_log_probs("log_uniform", V))
  edges, log_q = jnp.asarray(edges), jnp.asarray(log_q, jnp.float32)
  exact = jax.grad(lambda *a: jnp.sum(_full_nll(*a, y)), argnums=(0, 1, 2))(z, w, b)

  def sampled(z, w, b, key, k):
    return jnp.sum(softmax.sampled_softmax_nll(z, w, b, y, softmax.draw(key, edges, k), log_q))

  errors = []
  for k in (10, 100, 1000):
    grads = jax.jit(jax.vmap(lambda key: jax.grad(sampled, argnums=(0, 1, 2))(z, w, b, key, k)))(
        jax.random.split(jax.random.key(7), 64))
    errors.append(max(float(jnp.linalg.norm(g.mean(0) - e) / jnp.linalg.norm(e)) for g, e in zip(grads, exact)))
  assert errors[0] > 2 * errors[1] > 4 * errors[2], errors
  assert errors[2] < 0.03, errors


def test_sampled_softmax_drops_accidental_hits():
  z, w, b, y = _head(1)
  log_q = jnp.zeros((V,)) - np.log(V)
  ids = jnp.full((7,), y[0])  # every candidate is row 0's target
  nll = softmax.sampled_softmax_nll(z, w, b, y, ids, log_q)
  assert float(nll[0]) == 0.0  # only the target is left: −s_y + log exp s_y
  kept = softmax.sampled_softmax_nll(z, w, b, y, ids, log_q, remove_accidental_hits=False)
  assert float(kept[0]) > 0.0
  # the other rows: the same as scoring the candidates by hand
  s = z @ w.T + b
  by_hand = jnp.log(jnp.exp(s[jnp.arange(N), y]) + 7 * jnp.exp(s[:, y[0]] - np.log(7 / V))) - s[jnp.arange(N), y]
  rows = np.asarray(y != y[0])
  np.testing.assert_allclose(np.asarray(nll)[rows], np.asarray(by_hand)[rows], rtol=1e-5)


def test_nce_loss_is_mnih_and_teh():
  z, w, b, y = _head(2)
  log_q = jnp.asarray(softmax.proposal_log_probs("log_uniform", V), jnp.float32)
  ids = jnp.array([0, 3, 3, 17])
  loss, nll = softmax.nce_loss(z, w, b, y, ids, log_q)
  s = np.asarray(z @ w.T + b, np.float64)
  q, k = np.exp(np.asarray(log_q, np.float64)), 4
  sig = lambda a: 1 / (1 + np.exp(-a))
  rows = np.arange(N)
  p_data = sig(s[rows, np.asarray(y)] - np.log(k * q[np.asarray(y)]))
  p_noise = sig(s[:, np.asarray(ids)] - np.log(k * q[np.asarray(ids)]))
  np.testing.assert_allclose(loss, -np.log(p_data) - np.log(1 - p_noise).sum(1), rtol=1e-5)
  np.testing.assert_allclose(nll, -s[rows, np.asarray(y)], rtol=1e-5)


# --- the class-factored softmax ----------------------------------------------------------------------------

def test_class_bounds_follow_the_rnnlm_toolkit():
  # power 1, 2 classes: cumulative mass .5, .75, .875, .9375, 1 → the word that passes 1/2 closes class 0
  assert softmax.class_bounds(np.array([8, 4, 2, 1, 1]), 2, power=1.0) == (0, 2, 5)
  # power ½ evens the sizes; every id in exactly one class, the classes contiguous and non-empty
  counts = np.sort(np.random.default_rng(0).zipf(1.3, 2000))[::-1]
  for power, num in ((1.0, 30), (0.5, 30), (0.5, 1), (1.0, 2000)):
    b = softmax.class_bounds(counts, num, power)
    assert b[0] == 0 and b[-1] == 2000 and all(x < y for x, y in zip(b, b[1:])) and len(b) - 1 <= num
  sizes = lambda p: np.diff(softmax.class_bounds(counts, 30, p))
  assert sizes(0.5).max() < sizes(1.0).max()
  with pytest.raises(ValueError, match="decreasing"):
    softmax.class_bounds(np.array([1, 5, 2]), 2)


def test_class_model_is_normalised_and_its_cost_is_its_exact_nll():
  z, w, b, y = _head(3)
  bounds = (0, 1, 4, 11, 25, 40)
  c = jax.random.normal(jax.random.key(9), (5, D))
  cb = jnp.arange(5.0) / 10
  logp = softmax.class_log_probs(z, w, b, c, cb, bounds)
  # float32 sums of 40 probabilities: a few ulp of 1
  np.testing.assert_allclose(jax.nn.logsumexp(logp, axis=1), 0.0, atol=1e-5)
  nll = softmax.class_nll(z, w, b, c, cb, y, bounds)
  np.testing.assert_allclose(nll, -logp[jnp.arange(N), y], rtol=1e-5, atol=1e-6)
  # by hand for one word: p(class) · p(word | class)
  cls = softmax.class_index(bounds)
  word, k = int(y[0]), int(cls[int(y[0])])
  s = np.asarray(z[0] @ w.T + b, np.float64)
  pc = np.exp(np.asarray(z[0] @ c.T + cb, np.float64))
  lo, hi = bounds[k], bounds[k + 1]
  p = pc[k] / pc.sum() * np.exp(s[word]) / np.exp(s[lo:hi]).sum()
  assert float(nll[0]) == pytest.approx(-np.log(p), rel=1e-5)


def test_class_cost_clamps_the_window_of_a_class_near_the_end():
  """The word part reads a window of M = the largest class's size rows from the class's first id; a class
  starting later than V − M has its window moved back to end at V. Bins (0, 30, 35, 40) of 40 words: M = 30,
  and the classes at 30 and 35 would read rows up to 64. Loss and gradient must be the exact model's, finite."""
  z, w, b, _ = _head(4)
  bounds = (0, 30, 35, 40)
  c = jax.random.normal(jax.random.key(10), (3, D))
  cb = jnp.zeros((3,))
  y = jnp.array([3, 29, 31, 36, 39])  # every class, and both ends of the last

  def cost(z, w, b):
    return jnp.sum(softmax.class_nll(z, w, b, c, cb, y, bounds))

  def exact(z, w, b):
    return -jnp.sum(softmax.class_log_probs(z, w, b, c, cb, bounds)[jnp.arange(N), y])

  np.testing.assert_allclose(jax.jit(cost)(z, w, b), jax.jit(exact)(z, w, b), rtol=1e-5)
  grads = [jax.jit(jax.grad(f, argnums=(0, 1, 2)))(z, w, b) for f in (cost, exact)]
  for g, e in zip(*grads):
    assert np.all(np.isfinite(np.asarray(g)))
    np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-6)


# --- in the model and the train step ------------------------------------------------------------------------

def _tiny(kind, mode, **softmax_kw):
  config = tiny_config(vocab_size=V, batch_size=2, bptt=3, words=dict(mode=mode),
                       softmax=dict(dict(kind=kind, num_samples=6), **softmax_kw))
  train_ids = np.repeat(np.arange(V), np.arange(V, 0, -1))  # counts V, V−1, …, 1: sorted by frequency
  return softmax.resolve(config, train_ids)


def _rows(grad):
  return set(np.flatnonzero(np.any(np.asarray(grad) != 0, axis=1)).tolist())


@pytest.mark.parametrize("kind", ["sampled", pytest.param("nce", marks=pytest.mark.slow), "class"])  # (NCE: as sampled)
@pytest.mark.parametrize("mode", ["tied", pytest.param("untied", marks=pytest.mark.slow)])
def test_the_gradient_reaches_only_the_scored_rows(kind, mode):
  """Of the output matrix only the sampled and target rows (class: the rows of the targets' classes) get a
  gradient; a tied matrix also gets the batch's input rows. A tied model keeps one word matrix leaf."""
  config = _tiny(kind, mode, num_classes=8)
  model = models.build(config)
  params = models.init_params(model, config, jax.random.key(0))
  assert len(tying.embedding_leaves(params)) == (1 if mode == "tied" else 2)
  cost = losses.make_lm_cost(config, softmax.counts(np.arange(V), V))
  assert cost.takes_features
  x = jax.random.randint(jax.random.key(1), (2, 3), 0, V)
  y = jax.random.randint(jax.random.key(2), (2, 3), 0, V)
  key = jax.random.key(3)

  def total(p):
    z, _ = model.apply({"params": p}, x, model.initial_carry(2), features=True)
    return cost(p, z, y, {}, key)[0]

  grads = jax.jit(jax.grad(total))(params)
  targets = set(np.asarray(y).ravel().tolist())
  if kind == "class":
    cls, bounds = softmax.class_index(config.softmax.class_bounds), config.softmax.class_bounds
    scored = {w for t in targets for w in range(bounds[cls[t]], bounds[cls[t] + 1])}
  else:
    edges, _ = softmax.quantise(softmax.proposal_log_probs("log_uniform", V))
    scored = targets | set(np.asarray(softmax.draw(key, jnp.asarray(edges), 6)).tolist())
  inputs = set(np.asarray(x).ravel().tolist())
  if mode == "tied":
    assert _rows(grads["words"]["embedding"]) == scored | inputs
  else:
    assert _rows(grads["words"]["out_embedding"]) == scored
    assert _rows(grads["words"]["embedding"]) == inputs


def test_train_step_counts_the_rows_it_reaches_and_a_full_softmax_reaches_all():
  for kind, expect_all in (("full", True), ("sampled", False)):
    config = _tiny(kind, "untied")
    model = models.build(config)
    tx = optim.make_optimizer(config, steps_per_epoch=10)
    state = lm.initial_state(config, model, tx, jax.random.key(0))
    step = lm.make_train_step(model, tx, losses.make_lm_cost(config), jax.random.key(1))
    x = jnp.arange(6).reshape(2, 3)
    _, sums = step(state, x, x + 1)
    assert float(sums["rows/grad/words/embedding"]) == 6  # the six input words
    out_rows = float(sums["rows/grad/words/out_embedding"])
    assert out_rows == V if expect_all else 6 <= out_rows <= 6 + 6  # targets 1…6, and ≤ 6 candidates


def test_class_model_evaluates_with_its_exact_probabilities():
  config = _tiny("class", "tied", num_classes=6)
  model = models.build(config)
  params = models.init_params(model, config, jax.random.key(0))
  assert params["words"]["class_embedding"].shape == (len(config.softmax.class_bounds) - 1, config.hidden_size)
  x = jnp.arange(6).reshape(2, 3)
  logits, _ = model.apply({"params": params}, x, model.initial_carry(2))
  np.testing.assert_allclose(jax.nn.logsumexp(logits, axis=-1), 0.0, atol=1e-5)


def test_nce_starts_normalised():
  """With NCE the output bias starts at −log V (so Σ_w exp s_w ≈ 1); off, or for other costs, it does not."""
  for kind, normalised, shift in (("nce", True, -np.log(V)), ("nce", False, 0.0), ("sampled", True, 0.0)):
    config = _tiny(kind, "untied", nce_start_normalised=normalised)
    params = models.init_params(models.build(config), config, jax.random.key(0))
    assert abs(float(params["words"]["out_bias"].mean()) - shift) < 0.1  # U(−0.1, 0.1) around the shift


def test_bad_softmax_configs_get_one_line():
  """Checked where the config is resolved (`lm.check`); a class model built from an unresolved config also stops."""
  with pytest.raises(ValueError, match="Unknown softmax.kind"):
    lm.check(tiny_config(softmax=dict(kind="hierarchical")))
  with pytest.raises(ValueError, match="class_bounds"):
    models.build(tiny_config(softmax=dict(kind="class")))  # not resolved from the counts
  with pytest.raises(ValueError, match="augmented loss"):
    lm.check(tiny_config(softmax=dict(kind="sampled"), al=dict(alpha=1.0)))
  with pytest.raises(ValueError, match="direct connections"):
    lm.check(tiny_config(model="nnlm", softmax=dict(kind="nce")))
  with pytest.raises(ValueError, match="num_samples"):
    lm.check(tiny_config(softmax=dict(kind="nce", num_samples=0)))


def test_settings_name_what_changes_the_cost():
  assert softmax.settings(tiny_config()) == {}
  assert softmax.settings(tiny_config(softmax=dict(kind="nce", num_samples=50))) == {
      "num_samples": 50, "proposal": "log_uniform"}
  assert softmax.settings(tiny_config(softmax=dict(kind="sampled", proposal="unigram", unigram_power=1.0))) == {
      "num_samples": 1000, "proposal": "unigram", "unigram_power": 1.0}
  resolved = tiny_config(softmax=dict(kind="class", num_classes=3, class_bounds=(0, 2, 5, 9)))
  assert softmax.settings(resolved) == {"num_classes": 3, "class_power": 0.5, "largest_class": 4}


def test_the_cost_passes_remove_accidental_hits_through():
  """softmax.remove_accidental_hits reaches the sampled cost: with 30 draws of a 40-word vocabulary some
  candidates equal their row's target, and the cost is `sampled_softmax_nll`'s with that setting, not the
  other's."""
  key = jax.random.key(5)
  z_BxTxD = jax.random.normal(jax.random.key(6), (2, 3, 8))
  y = jnp.arange(6).reshape(2, 3)
  costs = {}
  for remove in (True, False):
    config = _tiny("sampled", "untied", num_samples=30, remove_accidental_hits=remove)
    config.hidden_size = 8
    params = models.init_params(models.build(config), config, jax.random.key(0))
    cost = losses.make_lm_cost(config, softmax.counts(np.arange(V), V))
    edges, log_q = softmax.quantise(softmax.proposal_log_probs("log_uniform", V))
    ids = softmax.draw(key, jnp.asarray(edges), 30)
    assert np.isin(np.asarray(y), np.asarray(ids)).any()  # at least one accidental hit to remove
    w, b = params["words"]["out_embedding"], params["words"]["out_bias"]
    by_hand = softmax.sampled_softmax_nll(z_BxTxD.reshape(6, 8), w, b, y.reshape(6), ids,
                                          jnp.asarray(log_q, jnp.float32), remove)
    costs[remove] = cost(params, z_BxTxD, y, {}, key)[1]
    np.testing.assert_allclose(costs[remove], by_hand.reshape(2, 3), rtol=1e-6)
  assert not np.allclose(costs[True], costs[False])


def test_the_train_step_draws_new_candidates_each_step():
  """The candidates come from the step's key (fold_in of the run's key and the step number): two steps from
  the same parameters on the same window, differing only in the step number, move different output rows —
  the targets' and each step's own draw."""
  config = _tiny("sampled", "untied")
  model = models.build(config)
  tx = optim.make_optimizer(config, steps_per_epoch=10)
  state = lm.initial_state(config, model, tx, jax.random.key(0))
  step = lm.make_train_step(model, tx, losses.make_lm_cost(config), jax.random.key(1))
  x = jnp.arange(6).reshape(2, 3)
  before = np.asarray(state["params"]["words"]["out_embedding"])
  moved = []
  for n in (0, 1, 2):
    start = jax.tree_util.tree_map(jnp.array, {**state, "step": jnp.asarray(n, jnp.int32)})
    after = np.asarray(step(start, x, x + 1)[0]["params"]["words"]["out_embedding"])
    moved.append(frozenset(np.flatnonzero(np.any(after != before, axis=1)).tolist()))
  targets = set(range(1, 7))
  assert all(targets <= m for m in moved)
  candidates = [m - targets for m in moved]
  assert all(candidates) and len(set(candidates)) == 3, candidates


def test_nce_start_normalised_without_an_output_bias_is_one_line():
  """Starting NCE normalised moves the output bias; with no bias (Inan's RE setting) that would silently do
  nothing, so building the model stops with one line naming both settings; turning the start off builds."""
  config = _tiny("nce", "tied")
  config.words.output_bias = False
  with pytest.raises(ValueError, match="words.output_bias.*nce_start_normalised=False"):
    lm.check(config)
  model = models.build(_tiny("nce", "tied")).clone(output_bias=False)
  with pytest.raises(ValueError, match="words.output_bias"):  # the same line if a model without a bias gets there
    models.init_params(model, config, jax.random.key(0))
  config.softmax.nce_start_normalised = False
  params = models.init_params(models.build(config), config, jax.random.key(0))
  assert "out_bias" not in params["words"]
