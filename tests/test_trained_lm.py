"""Using a trained LM from its run folder (wt_jax.trained_lm, experiments.generate, experiments.score).

Scoring must be the run's own test protocol (results.json's test_ppl again, from the checkpoint its test used);
sampling must draw from the model's distribution as the protocol defines it (greedy = the argmax path of the
model's own apply step by step; top_k / top_p never leave their set; the same seed the same samples; the
frequencies of many draws within a stated bound of the softmax); bad input is one line.
"""
import json
import math
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import generate as generate_tool
from experiments import score as score_tool
from tests.conftest import tiny_config, write_corpus
from tests.in_process import main_ends_with
from wt_jax import adapt, models, sampling, trained_lm
from wt_jax.data import ptb, text
from wt_jax.data.vocab import Vocab
from wt_jax.train import lm

# One tiny config per family. train_max_tokens = 201: 10 steps of 4 × 5 per epoch, so two epochs end (and the RHN,
# tested on its best parameters as Zilly et al., has a best checkpoint from an epoch).
FAMILIES = {
    "lstm": dict(model="lstm_lm", words=dict(mode="tied")),
    "rhn": dict(model="rhn_lm", words=dict(mode="tied"), num_layers=1, depth=2, init_scale=0.1, test_params="best"),
    "transformer": dict(model="transformer_lm", words=dict(mode="tied"), num_heads=2, mlp_size=32, memory=3,
                        test_window=5, learning_rate=0.1),
    "lbl": dict(model="lbl", words=dict(mode="tied"), emb_size=16, context=3),
    "vd_lstm": dict(model="bd_lstm_lm", words=dict(mode="tied"), mask_per_gate=False, tie_state_masks=True,
                    init_scale=0.1),
    "nnlm": dict(model="nnlm", words=dict(mode="untied"), emb_size=16, context=3),
}
RUN = dict(train_max_tokens=201, num_epochs=2)


def _write_corpus(root):
  """conftest's tiny PTB-format corpus, with `<unk>` in its training text (as every real corpus has)."""
  folder = write_corpus(root / "ptb")
  with open(folder / "ptb.train.txt", "r+") as f:
    lines = f.readlines()
    lines[1] = lines[1].rstrip("\n") + " <unk> \n"  # (inside the first 201 tokens)
    f.seek(0)
    f.writelines(lines)
  return root


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
  return _write_corpus(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def corpus(data_root):
  return ptb.load(str(data_root), download=False)


@pytest.fixture(scope="module")
def runs(corpus, tmp_path_factory):
  """family → (its run folder, results.json), trained on first use."""
  cache = {}

  def get(family):
    if family not in cache:
      workdir = tmp_path_factory.mktemp(family)
      config = tiny_config(vocab_size=corpus.vocab_size, **RUN, **FAMILIES[family])
      cache[family] = workdir, lm.fit(config, corpus, workdir)
    return cache[family]

  return get


def _untrained(family, corpus_vocab, **overrides):
  """A TrainedLM of `family` at its initial parameters (no run folder): for the sampler's checks, which need a
  model, not a trained one."""
  config = tiny_config(vocab_size=len(corpus_vocab), **{**FAMILIES[family], **overrides})
  model = models.build(config)
  params = jax.jit(lambda key: models.init_params(model, config, key))(jax.random.key(7))  # (eager init is slow)
  return trained_lm.TrainedLM(folder=None, checkpoint="none", step=0, config=config, model=model, params=params,
                              vocab=corpus_vocab, meta={}, results={}, commit=None, member=None,
                              tokenizer=text.tokenizer_of(config))


def _slow_but(fast, cases=tuple(FAMILIES)):
  """`cases` for parametrize, all but `fast` in the slow tier (repeats of a behaviour on other models)."""
  return [c if c == fast else pytest.param(c, marks=pytest.mark.slow) for c in cases]


# --- scoring ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", _slow_but("lstm"))
def test_score_of_the_test_split_is_the_runs_test_ppl(runs, corpus, data_root, family):
  workdir, results = runs(family)
  checkpoint = trained_lm.tested_checkpoint(workdir)
  assert checkpoint == ("best" if family == "rhn" else "last")
  assert results["test_params"].startswith("best (epoch" if family == "rhn" else "final")
  out = trained_lm.score_split(trained_lm.load(workdir, checkpoint), "test", str(data_root))
  assert out["ppl"] == pytest.approx(results["test_ppl"], rel=1e-6)
  assert out["tokens"] == len(corpus.test) - 1  # every target of the stream
  assert "not_the_runs_test" not in out
  other = trained_lm.score_split(trained_lm.load(workdir, "last" if checkpoint == "best" else "best"), "test",
                                 str(data_root))
  assert "test used" in other["not_the_runs_test"]


def test_the_best_parameters_a_run_tested_are_its_best_checkpoint(corpus, data_root, tmp_path):
  """With test_params='best' the run tests the best state it holds on the devices; its `best` checkpoint is written
  whenever `last` is and that state changed since, so the folder holds what was tested even when no epoch end
  writes a checkpoint (checkpoint_every_epochs=0: the final one only)."""
  config = tiny_config(vocab_size=corpus.vocab_size, test_params="best", checkpoint_every_epochs=0, **RUN,
                       **FAMILIES["lstm"])
  results = lm.fit(config, corpus, tmp_path)
  assert results["test_params"] == f"best (epoch {results['best_epoch']})"
  out = trained_lm.score_split(trained_lm.load(tmp_path, trained_lm.tested_checkpoint(tmp_path)), "test",
                               str(data_root))
  assert out["ppl"] == pytest.approx(results["test_ppl"], rel=1e-6) and "not_the_runs_test" not in out


def test_a_text_is_read_as_the_corpus_reads_its_files(runs, corpus, data_root):
  """The corpus's own test file given as a text scores as its split; PTB's case and numbers are folded, and a word
  outside the vocabulary is scored as <unk>, counted and named."""
  workdir, _ = runs("lstm")
  model = trained_lm.load(workdir, "last")
  as_text = trained_lm.score(model, (data_root / "ptb" / "ptb.test.txt").read_text())
  assert as_text["ppl"] == trained_lm.score_split(model, "test", str(data_root))["ppl"]
  assert as_text["oov"] == 0
  out = trained_lm.score(model, "W1 w2 zz w3\nqq 1,000 zz\n", per_token=True)
  assert out["oov"] == 4 and out["oov_words"] == ["zz", "qq", "N"]  # ('1,000' is PTB's N, not in this vocabulary)
  assert [t["token"] for t in out["per_token"]] == ["w2", "<unk>", "w3", "<eos>", "<unk>", "<unk>", "<unk>", "<eos>"]
  assert out["tokens"] == 8
  assert -sum(t["logp"] for t in out["per_token"]) == pytest.approx(out["nll"], rel=1e-5)
  assert all(1 <= t["rank"] <= len(corpus.vocab) for t in out["per_token"])


def test_each_corpus_tokenisation():
  assert text.Tokenizer("ptb").words(["The Company said 3.5 N\n", "\n"]) == ["the", "company", "said", "N", "N",
                                                                        "<eos>", "<eos>"]
  assert text.Tokenizer("wikitext2").words(["The 3.5 = x =\n"]) == ["The", "3.5", "=", "x", "=", "<eos>"]
  assert text.Tokenizer("bbc").words(["The BBC's 3.5%, said!\n", "...\n"]) == ["the", "bbc's", "N", "said", "<eos>"]
  assert text.Tokenizer("imdb").words(["Good.<br />Bad\n"]) == ["good", "bad", "<eos>"]
  with pytest.raises(ValueError, match="no <unk>"):
    text.encode(["a", "b"], Vocab(["a", "<eos>"]))


# --- sampling -----------------------------------------------------------------------------------------------

def _own_apply(model_lm):
  """The model's apply, compiled: (params, ids[B, T], carry) → (logits[B, T, V], carry)."""
  return jax.jit(lambda p, x, c: model_lm.model.apply({"params": p}, x, c, train=False))


def _stepwise_next_logits(model_lm, stream, apply):
  """The logits[V] of the word after stream[-1], by the model's own apply over the stream read as the scoring
  protocol reads it: windows of test_window tokens, the carry passed from one to the next (a recurrent or
  feed-forward model's windows only change where the carry is handed over; the Transformer's decide its context).
  The last window is padded with zeros, as `batching.lm_windows` pads the protocol's (one compiled shape)."""
  W, model, n = model_lm.config.test_window, model_lm.model, len(stream)
  carry, ids = model.initial_carry(1), np.zeros((1, -(-n // W) * W), np.int32)
  ids[0, :n] = stream
  for start in range(0, n, W):
    logits, carry = apply(model_lm.params, ids[:, start:start + W], carry)
  return np.asarray(logits[0, (n - 1) % W])


def _stepwise_greedy(model_lm, prompt_ids, max_len):
  """The argmax path, one step at a time: a recurrent or feed-forward model fed one token per apply with its
  carry; the Transformer's next word from its windows over the whole stream so far (`_stepwise_next_logits`)."""
  model, stream, apply = model_lm.model, list(prompt_ids), _own_apply(model_lm)
  if model_lm.config.model != "transformer_lm":
    carry = model.initial_carry(1)
    for token in stream[:-1]:
      _, carry = apply(model_lm.params, np.asarray([[token]], np.int32), carry)
    for _ in range(max_len):
      logits, carry = apply(model_lm.params, np.asarray([[stream[-1]]], np.int32), carry)
      stream.append(int(np.argmax(logits[0, -1])))
  else:
    for _ in range(max_len):
      stream.append(int(np.argmax(_stepwise_next_logits(model_lm, stream, apply))))
  return stream[len(prompt_ids):]


@pytest.mark.parametrize("family", _slow_but("transformer"))
def test_temperature_zero_is_the_argmax_path_of_the_models_own_steps(corpus, family):
  """At initial parameters drawn wide and untied (init_scale 0.5 or more: no near-ties in the argmax, and a path
  that moves: tied at init, a word's likeliest successor is itself); 12 words after a 3-word prompt run across the
  Transformer's windows of 5 (and memory 3) twice, where stepping it token by token with its carry alone would
  take another path."""
  scale = 2.0 if family == "vd_lstm" else 0.5  # (its greedy path at smaller scales repeats one word)
  model_lm = _untrained(family, corpus.vocab, init_scale=scale, words=dict(mode="untied"))
  out = sampling.sample(model_lm, "w3 w4 w5", num_samples=2, max_len=12, temperature=0.0)
  ids, _, _ = sampling.prompt_tokens(model_lm, "w3 w4 w5")
  want = corpus.vocab.decode(_stepwise_greedy(model_lm, ids, 12))
  assert [s["tokens"] for s in out["samples"]] == [want, want]
  assert len(set(want)) >= 3, want


@pytest.mark.parametrize("family", _slow_but("transformer", ("transformer", "lstm")))
def test_a_samples_log_probabilities_are_its_scores(corpus, family):
  """Each drawn word's log-probability is the one `score` gives that word of the text [<eos>, prompt, sample]: the
  sampler draws from the distribution the scoring protocol defines (for the Transformer: its windows)."""
  model_lm = _untrained(family, corpus.vocab, init_scale=0.5)
  out = sampling.sample(model_lm, "w3 w4", num_samples=3, max_len=11, temperature=1.0, seed=1)
  ids, _, _ = sampling.prompt_tokens(model_lm, "w3 w4")
  for s in out["samples"]:
    stream = np.concatenate([ids, corpus.vocab.encode(s["tokens"])])
    scored = trained_lm.score_ids(model_lm, stream, per_token=True)["per_token"][len(ids) - 1:]
    assert [t["token"] for t in scored] == s["tokens"]
    np.testing.assert_allclose(s["logp"], [t["logp"] for t in scored], rtol=1e-5, atol=1e-5)


def test_the_same_seed_gives_the_same_samples(corpus):
  model_lm = _untrained("lstm", corpus.vocab, init_scale=0.5)
  draw = lambda seed: [s["tokens"] for s in sampling.sample(model_lm, "w3", 4, 10, seed=seed)["samples"]]
  first = draw(3)
  assert draw(3) == first
  assert draw(4) != first
  assert len({tuple(t) for t in first}) > 1  # the batch's rows are drawn apart


def _next_word_probs(model_lm, tokens_BxS, temperature=1.0):
  """p[B, S, V]: the model's next-word distribution after each position of tokens[B, S], from one apply over the
  whole batch (exact for a recurrent model: the carry is the stream's)."""
  logits, _ = model_lm.model.apply({"params": model_lm.params}, jnp.asarray(tokens_BxS),
                                   model_lm.model.initial_carry(tokens_BxS.shape[0]), train=False)
  return np.asarray(jax.nn.softmax(logits / temperature, axis=-1), np.float64)


@pytest.mark.parametrize("top_k,top_p", [(4, 0.6), pytest.param(3, 1.0, marks=pytest.mark.slow),
                                         pytest.param(0, 0.5, marks=pytest.mark.slow)])
def test_top_k_and_top_p_draw_only_from_their_set(runs, top_k, top_p):
  """Every drawn word is among the top_k likeliest at its step and inside the nucleus: the fewest likeliest words
  (of those top_k allows) whose probability, renormalised over them, reaches top_p. The model's probabilities come
  from one apply over the drawn streams; a word is in the set if its probability is at least the set's smallest
  (within 1e-5 relative: the stepping and the whole-stream apply round differently)."""
  model_lm = trained_lm.load(runs("lstm")[0])
  out = sampling.sample(model_lm, "w3", num_samples=300, max_len=6, temperature=1.0, top_k=top_k, top_p=top_p)
  ids, _, _ = sampling.prompt_tokens(model_lm, "w3")
  drawn = np.stack([model_lm.vocab.encode(s["tokens"]) for s in out["samples"]])
  streams = np.concatenate([np.broadcast_to(ids, (len(drawn), len(ids))), drawn], axis=1)
  p = _next_word_probs(model_lm, streams[:, :-1])[:, len(ids) - 1:]  # [B, max_len, V]: before each drawn word
  ordered = -np.sort(-p, axis=-1)
  k = top_k or p.shape[-1]
  kept = ordered[..., :k] / ordered[..., :k].sum(-1, keepdims=True)
  inside = (np.cumsum(kept, -1) - kept) < top_p  # the nucleus, likeliest first
  smallest = np.where(inside, ordered[..., :k], np.inf).min(-1)  # [B, max_len]
  p_drawn = np.take_along_axis(p, drawn[..., None], -1)[..., 0]
  assert np.all(p_drawn >= smallest * (1 - 1e-5))
  # the sets bite: without them, words outside would be drawn at these steps
  assert np.mean(np.where(ordered >= smallest[..., None] * (1 - 1e-5), 0.0, ordered).sum(-1)) > 0.05


def _bernstein_radius(n, p, words, false_failure):
  """t with P(|X − n·p| ≥ t) ≤ false_failure / words for X ~ Binomial(n, p), by Bernstein's inequality
  P(|X − np| ≥ t) ≤ 2·exp(−t² / (2(np(1 − p) + t/3))): solving t² = 2L(np(1 − p) + t/3), L = ln(2·words /
  false_failure). Over all words (a union bound) every count is within its t with probability
  ≥ 1 − false_failure."""
  L = math.log(2 * words / false_failure)
  return L / 3 + np.sqrt(L * L / 9 + 2 * L * n * p * (1 - p))


def test_next_word_frequencies_match_the_softmax(runs):
  """20,000 one-word continuations of "w3": each word's count within the Bernstein radius of n·p, p = the model's
  softmax at that temperature (1 and 2), with a false-failure rate of 1e-6 for the whole test (union bound over
  the words). The same radii reject the uniform distribution and, for the draws at temperature 2, the softmax at
  temperature 1: the bound can tell."""
  model_lm = trained_lm.load(runs("lstm")[0])
  ids, _, _ = sampling.prompt_tokens(model_lm, "w3")
  n, V = 20_000, len(model_lm.vocab)
  for temperature in (1.0, 2.0):
    out = sampling.sample(model_lm, "w3", num_samples=n, max_len=1, temperature=temperature, seed=5)
    counts = np.bincount(model_lm.vocab.encode([s["tokens"][0] for s in out["samples"]]), minlength=V)
    p = _next_word_probs(model_lm, ids[None], temperature)[0, -1]
    within = lambda q: np.all(np.abs(counts - n * q) <= _bernstein_radius(n, q, V, 1e-6))
    assert within(p), np.abs(counts - n * p) / _bernstein_radius(n, p, V, 1e-6)
    assert not within(np.full(V, 1 / V))
    if temperature == 2.0:
      assert not within(_next_word_probs(model_lm, ids[None], 1.0)[0, -1])


# --- the entry points -----------------------------------------------------------------------------------------

def test_score_prints_the_runs_test_ppl_last_and_writes_per_token_scores(runs, corpus, data_root, monkeypatch, capsys,
                                                                          tmp_path):
  workdir, results = runs("lstm")
  monkeypatch.setenv("WT_JAX_DATA", str(data_root))
  per_token = tmp_path / "tokens.jsonl"
  assert main_ends_with(score_tool.main, ["score"], workdir=str(workdir), split="test",
                        per_token=str(per_token)) is None
  last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert last["ppl"] == pytest.approx(results["test_ppl"], rel=1e-6)
  assert (last["tokens"], last["oov"], last["checkpoint"]) == (len(corpus.test) - 1, 0, "last")
  rows = [json.loads(line) for line in per_token.read_text().splitlines()]
  assert [r["token"] for r in rows] == corpus.vocab.decode(corpus.test[1:])
  assert math.exp(-np.mean([r["logp"] for r in rows])) == pytest.approx(last["ppl"], rel=1e-5)


@pytest.mark.slow  # (the CLI over the mechanisms tests/test_adapt.py tests in the fast tier)
def test_score_adapts_with_the_cache_or_dynamic_evaluation_and_switched_off_is_the_runs_test(runs, data_root,
                                                                                            monkeypatch, capsys):
  """`--cache_size … --cache_lambda=0` and `--dynamic_eval … --dynamic_lr=0` print results.json's test_ppl again,
  with the adaptation's settings and the plain perplexity in the JSON line (the mechanisms: tests/test_adapt.py)."""
  workdir, results = runs("lstm")
  monkeypatch.setenv("WT_JAX_DATA", str(data_root))
  for flag_values in (dict(cache_size=10, cache_lambda=0.0), dict(dynamic_eval="sgd", dynamic_lr=0.0),
                      dict(dynamic_eval="rms", dynamic_lr=0.0, dynamic_decay=0.01, dynamic_stats_batches=2,
                           dynamic_stats_batch_size=4),
                      dict(cache_size=10, cache_lambda=0.0, dynamic_eval="sgd", dynamic_lr=0.0)):  # (both together)
    assert main_ends_with(score_tool.main, ["score"], workdir=str(workdir), split="test", **flag_values) is None
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["ppl"] == pytest.approx(results["test_ppl"], rel=1e-6), flag_values
    assert last["plain_ppl"] == pytest.approx(results["test_ppl"], rel=1e-6)
    assert last["adaptation"]["method"].startswith("dynamic" if "dynamic_eval" in flag_values else "cache")
  score = lambda **f: main_ends_with(score_tool.main, ["score"], **{"workdir": str(workdir), "split": "test", **f})
  cases = {"--cache_size must be ≥ 1": score(cache_size=-3),
           "λ must lie in [0, 1]": score(cache_size=5, cache_lambda=1.5),
           "must be finite numbers ≥ 0": score(dynamic_eval="sgd", dynamic_lr=-1.0),
           # a setting of an adaptation that is off, or a segment of 0 steps, would silently do nothing
           "--cache_lambda sets the cache, which is off": score(cache_size=0, cache_lambda=0.1),
           "--dynamic_lr sets dynamic evaluation, which is off": score(dynamic_lr=0.5),
           "segment length must be an integer ≥ 1": score(dynamic_eval="sgd", dynamic_lr=0.1, dynamic_segment=0),
           # an adaptation that overflows: the JSON line says null, then one line and exit status 1
           "the adaptation diverged": score(cache_size=5, cache_lambda=1.0)}
  for expected, line in cases.items():
    assert line is not None and "\n" not in line and expected in line, (expected, line)
  capsys.readouterr()
  assert score(reset_at="line", cache_size=10, cache_lambda=0.2) is None  # every line a document: every token a target
  last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert last["documents"] > 1 and last["tokens"] == len(trained_lm.split_stream(trained_lm.load(workdir), "test"))


@pytest.mark.slow  # (dynamic evaluation's grid: a dozen passes)
def test_the_test_time_study_tunes_on_valid_and_reports_test(runs, data_root, monkeypatch, tmp_path):
  """experiments.studies.test_time: each method's chosen setting is its grid's best on validation, and the test
  perplexity recorded for it is that setting's score; the plain row is the run's own test."""
  from experiments.studies import test_time
  workdir, results = runs("lstm")
  monkeypatch.setenv("WT_JAX_DATA", str(data_root))
  grids = dict(cache_sizes=["5", "20"], cache_thetas=["0.1", "0.5"], cache_lambdas=["0.1", "0.3"], sgd_lrs=["0.1"],
               sgd_decays=["0", "0.01"], rms_lrs=["1e-4"], rms_decays=["0.001"], stats_batch_size=4,
               dynamic_valid_tokens=30, dynamic_segments=["5", "20"])
  assert main_ends_with(test_time.main, ["test_time", str(workdir)], records=str(tmp_path), **grids) is None
  record = json.loads((tmp_path / f"{workdir.name}.json").read_text())
  assert record["plain"]["test_ppl"] == pytest.approx(results["test_ppl"], rel=1e-6)
  assert len(record["cache"]["grid"]) == 8 and len(record["dynamic_sgd"]["grid"]) == 4  # (η × λ × segment)
  both = record["dynamic_sgd+cache"]  # sgd's best with the cache's best n and θ, over λ
  assert [g["lambda"] for g in both["grid"]] == [0.1, 0.3] and both["best"]["n"] == record["cache"]["best"]["n"]
  assert both["best"]["valid_ppl"] == min(g["valid_ppl"] for g in both["grid"])
  lm_ = trained_lm.load(workdir, trained_lm.tested_checkpoint(workdir))
  test = trained_lm.split_stream(lm_, "test")
  point = record["dynamic_sgd"]["grid"][1]  # (tuned on validation's first 30 targets)
  assert record["dynamic_sgd"]["tuned_tokens"] == 30 and point["valid_ppl"] == pytest.approx(adapt.score_dynamic(
      lm_, trained_lm.split_stream(lm_, "valid")[:31], "sgd", point["lr"], point["decay"],
      segment=point["segment"])["ppl"], rel=1e-6)
  for method in ("cache", "dynamic_sgd", "dynamic_rms"):
    best = record[method]["best"]
    assert best["valid_ppl"] == min(g["valid_ppl"] for g in record[method]["grid"])
  best = record["cache"]["best"]
  assert record["cache"]["test_ppl"] == pytest.approx(
      adapt.score_cache(lm_, test, best["n"], best["theta"], best["lambda"])["ppl"], rel=1e-6)
  best = record["dynamic_sgd"]["best"]
  assert record["dynamic_sgd"]["test_ppl"] == pytest.approx(
      adapt.score_dynamic(lm_, test, "sgd", best["lr"], best["decay"], segment=best["segment"])["ppl"], rel=1e-6)


def test_a_killed_test_time_study_redoes_only_the_methods_it_had_not_finished(runs, data_root, monkeypatch, tmp_path):
  """experiments.studies.test_time keeps each finished method in <run>.partial.json: after a kill inside dynamic
  evaluation the same command scores neither the plain model nor the cache again, and the record is whole; other
  grids are refused with one line naming the file."""
  from experiments.studies import test_time
  workdir, _ = runs("lstm")
  monkeypatch.setenv("WT_JAX_DATA", str(data_root))
  grids = dict(cache_sizes=["5"], cache_thetas=["0.5"], cache_lambdas=["0.1"], sgd_lrs=["0.1"], sgd_decays=["0"],
               rms_lrs=["1e-4"], rms_decays=["0.001"], stats_batch_size=4, stats_batches=2, dynamic_valid_tokens=30)
  study = lambda **f: main_ends_with(test_time.main, ["test_time", str(workdir)], records=str(tmp_path),
                                     **{**grids, **f})
  partial, record = tmp_path / f"{workdir.name}.partial.json", tmp_path / f"{workdir.name}.json"

  class Killed(Exception):
    pass

  def killed(*args, **kwargs):
    raise Killed

  with monkeypatch.context() as m:
    m.setattr(adapt, "score_dynamic", killed)
    with pytest.raises(Killed):
      study()
  done = json.loads(partial.read_text())["methods"]
  assert set(done) == {"plain", "cache"} and not record.exists()
  line = study(sgd_lrs=["0.2"])
  assert line is not None and "\n" not in line and str(partial) in line and not record.exists()
  with monkeypatch.context() as m:
    for name in ("cache_nll", "score_cache"):
      m.setattr(adapt, name, killed)
    m.setattr(trained_lm, "score_ids", killed)
    assert study() is None
  finished = json.loads(record.read_text())
  assert {k: finished[k] for k in done} == done and finished["reused"] == ["cache", "plain"]
  assert finished["dynamic_sgd"]["best"]["lr"] == 0.1 and "dynamic_rms" in finished and not partial.exists()


def test_generate_prints_samples_and_writes_them_as_jsonl(runs, capsys, tmp_path):
  workdir, results = runs("lstm")
  out = tmp_path / "samples.jsonl"
  assert main_ends_with(generate_tool.main, ["generate"], workdir=str(workdir), prompt="W3 zz w4", num_samples=3,
                        max_len=7, temperature=0.8, top_k=5, top_p=0.9, seed=2, output=str(out)) is None
  printed = capsys.readouterr().out
  assert "(read as <unk>): zz" in printed and printed.count("--- sample") == 3
  rows = [json.loads(line) for line in out.read_text().splitlines()]
  assert [r["sample"] for r in rows] == [0, 1, 2]
  for r in rows:
    assert len(r["tokens"]) == len(r["logp"]) == 7 and r["text"] == text.Tokenizer("ptb").render(r["tokens"])
    assert r["log_prob"] == pytest.approx(sum(r["logp"])) and max(r["logp"]) <= 0
    assert r["prompt_tokens"] == ["w3", "zz", "w4"] and r["checkpoint"] == "best"
    assert (r["temperature"], r["top_k"], r["top_p"], r["seed"], r["max_len"]) == (0.8, 5, 0.9, 2, 7)
    assert r["commit"] == results["versions"]["wt_jax_commit"] and r["workdir"] == str(workdir)


def test_bad_input_is_one_line(runs, tmp_path):
  workdir, _ = runs("lstm")
  no_checkpoint = tmp_path / "no_checkpoint"
  no_checkpoint.mkdir()
  shutil.copy(workdir / "vocab.txt", no_checkpoint / "vocab.txt")
  no_vocab = tmp_path / "no_vocab"
  shutil.copytree(workdir, no_vocab)
  (no_vocab / "vocab.txt").unlink()
  members_run = tmp_path / "members_run"
  (members_run / "members" / "0").mkdir(parents=True)  # (a members run still training: no member checkpoints yet)
  shutil.copy(workdir / "vocab.txt", members_run / "members" / "0" / "vocab.txt")
  latin1, empty, blank = tmp_path / "latin1.txt", tmp_path / "empty.txt", tmp_path / "blank.txt"
  latin1.write_bytes("caf\xe9 w1 w2\n".encode("latin-1"))
  empty.write_text("")
  blank.write_text("\n  \n")
  generate = lambda **f: main_ends_with(generate_tool.main, ["generate"], **{"workdir": str(workdir), **f})
  score = lambda **f: main_ends_with(score_tool.main, ["score"], **{"workdir": str(workdir), **f})
  cases = {
      "No 'last' checkpoint": generate(workdir=str(no_checkpoint)),
      "has no vocab.txt": score(workdir=str(no_vocab), text=str(empty)),
      "No run folder": generate(workdir=str(tmp_path / "nowhere")),
      "No word of the prompt": generate(prompt="zz qq"),
      "temperature must be ≥ 0": generate(temperature=-0.5),
      "top_p must be in (0, 1]": generate(top_p=0.0),
      "top_p must be in (0, 1] ": generate(top_p=1.5),
      "is not UTF-8": score(text=str(latin1)),
      "The text is empty": score(text=str(empty)),
      "The text is empty ": score(text=str(blank)),
      "No text file": score(text=str(tmp_path / "missing.txt")),
      "Give one of --text": score(),
      "is a members run (1 members): choose one with --member": score(workdir=str(members_run), split="test"),
      "is not a members run": generate(member=0),
      "has no member 3": generate(workdir=str(members_run), member=3),
      f"No 'last' checkpoint in {members_run}": generate(workdir=str(members_run), member=0),
  }
  for expected, line in cases.items():
    assert line is not None and "\n" not in line and expected.strip() in line, (expected, line)


@pytest.mark.slow
def test_a_members_runs_member_is_scored_with_its_own_parameters(corpus, data_root, tmp_path):
  """Each member's test split scored from the run folder reproduces that member's test_ppl (to 1e-5: the run scored
  its members in one vmapped program, whose batched matmuls round differently, tests/test_members.py), and the two
  members (learning rates 1 and 0.5) score apart."""
  lm.fit(tiny_config(vocab_size=corpus.vocab_size, member_values="learning_rate=1.0,0.5", **RUN, **FAMILIES["lstm"]),
         corpus, tmp_path)
  scores = []
  for k in range(2):
    results = json.loads((tmp_path / "members" / str(k) / "results.json").read_text())
    member = trained_lm.load(tmp_path, trained_lm.tested_checkpoint(tmp_path, k), member=k)
    assert member.member == k and member.config.seed == results["seed"]
    scores.append(trained_lm.score_split(member, "test", str(data_root))["ppl"])
    assert scores[-1] == pytest.approx(results["test_ppl"], rel=1e-5)
  assert scores[0] != pytest.approx(scores[1], rel=1e-3)  # (each member's own parameters, not one model's twice)
  # A run still training has no member checkpoints yet: member k is then slice k of the run's own checkpoint, with
  # its config from the run's. Both are member 1's own, as its folder has them once the run has ended.
  own = trained_lm.load(tmp_path, "last", member=1)
  shutil.rmtree(tmp_path / "members" / "1" / "checkpoints")
  stacked = trained_lm.load(tmp_path, "last", member=1)
  assert stacked.config.to_dict() == own.config.to_dict() and stacked.step == own.step
  jax.tree_util.tree_map(np.testing.assert_array_equal, stacked.params, own.params)
  assert trained_lm.tested_checkpoint(tmp_path, 1) == "last"


def test_the_test_time_study_never_chooses_a_setting_that_diverged():
  """A grid point whose validation perplexity is NaN or inf is passed over; a grid of nothing else is one line."""
  from absl import app
  from experiments.studies import test_time
  grid = [{"lr": 0.1, "valid_ppl": float("nan")}, {"lr": 0.2, "valid_ppl": 90.0}, {"lr": 1.0, "valid_ppl": math.inf}]
  assert test_time.best_point(grid)["lr"] == 0.2
  with pytest.raises(app.UsageError, match="every one of the grid's 2 points diverged"):
    test_time.best_point([grid[0], grid[2]])
