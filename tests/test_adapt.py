"""Test-time adaptation (wt_jax.adapt): the continuous cache is its formula, and dynamic evaluation steps as its
rule says; neither changes the protocol's perplexity when switched off; each lowers perplexity where it should.

The models are the tiny configs at their initial parameters: the mechanisms, not a trained model, are tested
(the CLI on a trained run: tests/test_trained_lm.py). Tolerances: the plain score and an adapted pass with its
adaptation off sum the same per-token float32 NLLs in other groupings; over a few hundred targets that is a
relative difference of order 1e-7 in the perplexity, well inside 1e-6.
"""
import dataclasses
import math

import jax
import numpy as np
import pytest

from tests.conftest import tiny_config
from wt_jax import adapt, models, trained_lm
from wt_jax.data import text
from wt_jax.data.vocab import Vocab
from wt_jax.errors import InputError

V = 31
FAMILIES = {
    "lstm": dict(model="lstm_lm", words=dict(mode="tied")),
    "untied_lstm": dict(model="lstm_lm", words=dict(mode="untied")),
    "rhn": dict(model="rhn_lm", words=dict(mode="tied"), num_layers=1, depth=2),
    "transformer": dict(model="transformer_lm", words=dict(mode="tied"), num_heads=2, mlp_size=32, memory=3,
                        test_window=5),
    "lbl": dict(model="lbl", words=dict(mode="tied"), emb_size=16, context=3),
    "vd_lstm": dict(model="bd_lstm_lm", words=dict(mode="tied"), mask_per_gate=False, tie_state_masks=True),
    "nnlm": dict(model="nnlm", words=dict(mode="untied"), emb_size=16, context=3),
}


def _lm(family, seed=7):
  config = tiny_config(vocab_size=V, **FAMILIES[family])
  model = models.build(config)
  params = jax.jit(lambda key: models.init_params(model, config, key))(jax.random.key(seed))
  return trained_lm.TrainedLM(folder=None, checkpoint="none", step=0, config=config, model=model, params=params,
                              vocab=Vocab([f"w{i}" for i in range(V)]), meta={}, results={}, commit=None, member=None,
                              tokenizer=text.tokenizer_of(config))


def _stream(n=300, seed=0):
  return np.random.default_rng(seed).integers(0, V, n).astype(np.int32)


def _slow_but(fast, cases):
  return [c if c == fast else pytest.param(c, marks=pytest.mark.slow) for c in cases]


@pytest.mark.parametrize("size", [20, pytest.param(80, marks=pytest.mark.slow)])  # (80 > test_window = 50: the
# ring carries states across windows)
def test_the_cache_is_its_formula_computed_by_a_plain_loop(size):
  lm, ids = _lm("lstm"), _stream()
  theta, lam = 0.7, 0.3
  x = ids[None, :-1]
  z = np.asarray(lm.model.apply({"params": lm.params}, x, lm.model.initial_carry(1), features=True)[0][0], np.float64)
  logits = np.asarray(lm.model.apply({"params": lm.params}, x, lm.model.initial_carry(1))[0][0], np.float64)
  p_model = np.exp(logits - logits.max(-1, keepdims=True))
  p_model /= p_model.sum(-1, keepdims=True)
  want, ranks, near_ties = [], [], 0
  for t in range(len(ids) - 1):
    y, lo = ids[t + 1], max(0, t - size)
    p_all = p_model[t].copy()  # the mixture over every word, for the target's rank
    if t > 0:  # entries i = lo..t-1 hold (h_i, x_{i+1})
      s = theta * z[lo:t] @ z[t]
      w = np.exp(s - s.max())
      p_all = (1 - lam) * p_all + lam * np.bincount(ids[lo + 1:t + 1], w / w.sum(), minlength=V)
    want.append(math.log(p_all[y]))
    ranks.append(1 + int(np.sum(p_all > p_all[y])))
    near_ties += int(np.any((np.abs(p_all - p_all[y]) < 1e-6 * p_all[y]) & (np.arange(V) != y)))
  got = adapt.score_cache(lm, ids, size, theta, lam, per_token=True)
  np.testing.assert_allclose([r["logp"] for r in got["per_token"]], want, atol=1e-5)
  # ranks from the mixture that scores the target (the target never counts itself): equal to numpy's float64
  # ranking, except where another word is within float32 rounding of the target (none in this stream)
  assert near_ties == 0 and [r["rank"] for r in got["per_token"]] == ranks
  assert got["ppl"] == pytest.approx(math.exp(-np.mean(want)), rel=1e-5)
  assert got["tokens"] == len(ids) - 1


@pytest.mark.slow
def test_a_grid_of_settings_is_each_setting_alone():
  lm, ids = _lm("lstm"), _stream()
  grid = adapt.cache_nll(lm, ids, 30, thetas=[0.0, 0.5], lambdas=[0.1, 0.6])
  for i, lam in enumerate([0.1, 0.6]):
    for j, theta in enumerate([0.0, 0.5]):
      assert grid[i, j] == pytest.approx(adapt.score_cache(lm, ids, 30, theta, lam)["nll"], rel=1e-6)


@pytest.mark.parametrize("family", _slow_but("lstm", [f for f in FAMILIES if f != "untied_lstm"]))
def test_switched_off_each_adaptation_is_todays_score(family):
  """λ = 0 (the cache) and η = 0 (dynamic evaluation, either rule, with or without decay) give `score_ids`."""
  lm, ids = _lm(family), _stream()
  plain = trained_lm.score_ids(lm, ids)["ppl"]
  if family != "nnlm":  # (the NNLM has no cache: see test_bad_input_is_refused)
    assert adapt.score_cache(lm, ids, 25, 0.4, 0.0)["ppl"] == pytest.approx(plain, rel=1e-6)
  segment = lm.config.test_window if family == "transformer" else None  # (its context is its window's)
  assert adapt.score_dynamic(lm, ids, "sgd", 0.0, 0.5, segment=segment)["ppl"] == pytest.approx(plain, rel=1e-6)


@pytest.mark.slow
def test_switched_off_the_rms_rule_is_todays_score():
  lm, ids = _lm("lstm"), _stream()
  ms = adapt.gradient_rms(lm, ids, batch_size=4, segment=5)
  plain = trained_lm.score_ids(lm, ids)["ppl"]
  assert adapt.score_dynamic(lm, ids, "rms", 0.0, 0.02, ms)["ppl"] == pytest.approx(plain, rel=1e-6)


def _repeated_rare_word():
  """A stream of common words (ids 1..10) in which word 0, otherwise unseen, returns every 12 tokens."""
  ids = _stream(600) % 10 + 1
  ids[::12] = 0
  return ids


@pytest.mark.parametrize("family", _slow_but("lstm", ["lstm", "untied_lstm", "transformer", "lbl"]))
def test_the_cache_raises_a_word_it_has_seen_recently(family):
  lm, ids = _lm(family), _repeated_rare_word()
  plain = trained_lm.score_ids(lm, ids, per_token=True)
  cached = adapt.score_cache(lm, ids, 50, 0.0, 0.3, per_token=True)  # (θ = 0: the ring's word frequencies)
  rare = [t for t in range(len(ids) - 1) if ids[t + 1] == 0 and t > 12]  # (after its first return)
  gain = [cached["per_token"][t]["logp"] - plain["per_token"][t]["logp"] for t in rare]
  assert min(gain) > 0 and cached["ppl"] < plain["ppl"]
  # with a ring too short to hold the word's last return, the rare word gets the cache's share of nothing
  short = adapt.score_cache(lm, ids, 5, 0.0, 0.3, per_token=True)
  assert all(short["per_token"][t]["logp"] < plain["per_token"][t]["logp"] for t in rare)


@pytest.mark.parametrize("rule", ["sgd", pytest.param("rms", marks=pytest.mark.slow)])
def test_dynamic_evaluation_learns_a_segment_that_repeats(rule):
  """The 40-token segment read 8 times: the adapted model gains more on its last reading than on its first."""
  lm = _lm("lstm")
  ids = np.tile(_stream(40), 8)
  plain = trained_lm.score_ids(lm, ids, per_token=True)
  ms = adapt.gradient_rms(lm, _stream(400, seed=1), batch_size=4, segment=5) if rule == "rms" else None
  lr = 0.5 if rule == "sgd" else 3e-4  # (for this untrained model; 1e-3 diverges under the rms rule)
  out = adapt.score_dynamic(lm, ids, rule, lr, 0.0, ms, per_token=True, keep_params=True)
  gain = lambda lo, hi: np.mean([a["logp"] - b["logp"] for a, b in zip(out["per_token"][lo:hi],
                                                                      plain["per_token"][lo:hi])])
  assert out["ppl"] < plain["ppl"]
  if rule == "sgd":  # (the rms rule's steps on this untrained model gain, then overshoot: its mean is what holds)
    assert gain(279, 319) > gain(0, 39) + 0.1
  # the run's own parameters are not touched; the adapted ones moved
  again = trained_lm.score_ids(lm, ids)["ppl"]
  assert again == plain["ppl"]
  moved = jax.tree_util.tree_map(lambda a, b: float(np.max(np.abs(np.asarray(a) - np.asarray(b)))), out["params"],
                                 lm.params)
  assert max(jax.tree_util.tree_leaves(moved)) > 0


def test_decay_pulls_the_parameters_back_to_the_trained_ones():
  """With a decay of 1 (sgd) every step ends at θ₀ − η·g: the adapted parameters stay one step from θ₀."""
  lm, ids = _lm("lstm"), np.tile(_stream(40), 8)
  free = adapt.score_dynamic(lm, ids, "sgd", 0.5, 0.0, keep_params=True)
  held = adapt.score_dynamic(lm, ids, "sgd", 0.5, 1.0, keep_params=True)
  dist = lambda p: math.sqrt(sum(float(np.sum((np.asarray(a) - np.asarray(b)) ** 2))
                                 for a, b in zip(jax.tree_util.tree_leaves(p), jax.tree_util.tree_leaves(lm.params))))
  assert dist(held["params"]) < 0.5 * dist(free["params"])
  assert held["ppl"] > free["ppl"]


def test_bad_input_is_refused():
  lm, ids = _lm("lstm"), _stream(50)
  cases = {
      "λ must lie in [0, 1]": lambda: adapt.score_cache(lm, ids, 10, 0.3, 1.5),
      "n must be an integer ≥ 1": lambda: adapt.score_cache(lm, ids, 0, 0.3, 0.1),
      "θ must be a finite number ≥ 0": lambda: adapt.score_cache(lm, ids, 10, -1.0, 0.1),
      "The cache needs the output layer's input": lambda: adapt.score_cache(_lm("nnlm"), ids, 10, 0.3, 0.1),
      "must be finite numbers ≥ 0": lambda: adapt.score_dynamic(lm, ids, "sgd", -0.1),
      "Unknown dynamic evaluation rule": lambda: adapt.score_dynamic(lm, ids, "adam", 0.1),
      "needs the RMS of the training gradients": lambda: adapt.score_dynamic(lm, ids, "rms", 0.1),
      "segment length must be an integer ≥ 1": lambda: adapt.score_dynamic(lm, ids, "sgd", 0.1, segment=-2),
      "at least 2 tokens": lambda: adapt.score_cache(lm, ids[:1], 10, 0.3, 0.1),
  }
  for expected, call in cases.items():
    with pytest.raises(InputError, match=None) as e:
      call()
    assert expected in str(e.value) and "\n" not in str(e.value), (expected, str(e.value))


def _two_identical_lines(family):
  """A tiny untrained model whose id 0 is `<eos>`, and a text of one line twice: ids [line, <eos>, line, <eos>]."""
  lm = _lm(family)
  lm = dataclasses.replace(lm, vocab=Vocab(["<eos>", *(f"w{i}" for i in range(1, V))]))
  line = np.random.default_rng(3).integers(1, V, 12).astype(np.int32)
  return lm, np.concatenate([line, [0], line, [0]]).astype(np.int32), len(line) + 1


@pytest.mark.parametrize("method", ["plain", "cache", "dynamic"])
def test_reset_at_line_scores_a_repeated_line_as_the_first_and_never_remembers_it(method):
  """With `reset_at='line'` every line is a document read from a fresh start after `<eos>`: the second of two
  identical lines gets exactly the first's log-probabilities (plain, cache, dynamic evaluation). Without resets the
  cache and dynamic evaluation have read the first line, and score the second better."""
  lm, ids, n = _two_identical_lines("lstm")
  scorer, settings = {"plain": (trained_lm.score_ids, {}),
                      "cache": (adapt.score_cache, dict(size=40, theta=1.0, lam=0.5)),
                      "dynamic": (adapt.score_dynamic, dict(rule="sgd", lr=1.0, segment=4))}[method]
  reset = trained_lm.by_document(scorer, lm, ids, "line", per_token=True, **settings)
  logp = [t["logp"] for t in reset["per_token"]]
  assert reset["documents"] == 2 and reset["tokens"] == len(ids) == 2 * n
  assert logp[:n] == logp[n:]
  assert reset["nll"] == pytest.approx(-sum(logp), rel=1e-6)
  if method != "plain":
    never = [t["logp"] for t in trained_lm.by_document(scorer, lm, ids, "never", per_token=True, **settings)[
        "per_token"]]
    assert sum(never[-(n - 1):]) > sum(never[:n - 1]) + 1.0  # (the second line read after the first)


def test_documents_end_at_each_line_each_empty_line_or_before_each_wikitext_article():
  eos = 0
  ids = np.array([5, 6, 0, 7, 0, 0, 8, 0], np.int32)  # "5 6", "7", "", "8"
  assert [d.tolist() for d in trained_lm.documents(ids, "line", eos)] == [[0, 5, 6, 0], [0, 7, 0], [0, 0], [0, 8, 0]]
  assert [d.tolist() for d in trained_lm.documents(ids, "blank_line", eos)] == [[0, 5, 6, 0, 7, 0, 0], [0, 8, 0]]
  words = ["<eos>", "=", "A", "B", "x", "y"]  # WikiText: an article is an empty line, ` = Title = `, an empty line, …
  text = "\n = A = \n\n x y \n\n = = B = = \n\n y \n\n = B = \n\n x \n"  # (a heading `= = B = =` is not one)
  ids = np.array([words.index(t) for line in text.split("\n")[:-1] for t in [*line.split(), "<eos>"]], np.int32)
  docs = trained_lm.documents(ids, "wikitext_article", eos, lambda line: " ".join(words[i] for i in line))
  assert [" ".join(words[i] for i in d) for d in docs] == [
      "<eos> <eos> = A = <eos> <eos> x y <eos> <eos> = = B = = <eos> <eos> y <eos>",
      "<eos> <eos> = B = <eos> <eos> x <eos>"]
  with pytest.raises(InputError, match="reset_at"):
    trained_lm.documents(ids, "paragraph", eos)


def test_the_cache_and_dynamic_evaluation_together_reduce_to_each_alone():
  """Dynamic evaluation with the cache over the adapted model's states: with λ = 0 it is dynamic evaluation alone,
  with η = 0 the cache alone (the model never moves; the ring crosses the segments as it crosses windows); both on,
  it differs from either."""
  lm, ids = _lm("lstm"), _stream()
  cache, dyn = dict(size=30, theta=0.5, lam=0.2), dict(rule="sgd", lr=0.5, decay=0.0, segment=7)
  alone_cache = adapt.score_cache(lm, ids, **cache, per_token=True)
  alone_dynamic = adapt.score_dynamic(lm, ids, **dyn, per_token=True)
  as_cache = adapt.score_dynamic(lm, ids, **{**dyn, "lr": 0.0}, cache=tuple(cache.values()), per_token=True)
  as_dynamic = adapt.score_dynamic(lm, ids, **dyn, cache=(30, 0.5, 0.0), per_token=True)
  assert as_cache["nll"] == pytest.approx(alone_cache["nll"], rel=1e-6)
  assert [t["rank"] for t in as_cache["per_token"]] == [t["rank"] for t in alone_cache["per_token"]]
  assert as_dynamic["nll"] == pytest.approx(alone_dynamic["nll"], rel=1e-6)
  both = adapt.score_dynamic(lm, ids, **dyn, cache=tuple(cache.values()))
  assert abs(both["nll"] - alone_dynamic["nll"]) > 1e-3 and abs(both["nll"] - alone_cache["nll"]) > 1e-3
  assert both["adaptation"]["method"].endswith("and cache") and both["adaptation"]["cache_size"] == 30
