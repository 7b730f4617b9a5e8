"""The skip-gram training loop on a tiny generated corpus: it learns, ties, resumes."""
import json

import numpy as np
import pytest

from tests.conftest import REPO
from wt_jax.train import skipgram


def _config(**kw):
  from configs import w2v_untied
  c = w2v_untied.get_config()
  c.dim, c.num_epochs, c.batch_size, c.log_every, c.min_count = 16, 3, 64, 50, 2
  c.learning_rate = 0.2  # (a tiny corpus: ~100 steps per epoch; the tied model diverges at 0.5)
  for k, v in kw.items():
    setattr(c, k, v)
  return c


def _sentences(n=400, vocab=40, seed=0):
  """Counting sentences (w_k, w_k+1, …): neighbours co-occur, so the model has something to learn."""
  rng = np.random.default_rng(seed)
  return [[f"w{(s + i) % vocab}" for i in range(rng.integers(4, 9))]
          for s in rng.integers(0, vocab, size=n)]


@pytest.mark.parametrize("tying,drop", [("untied", 0.8), ("tied", 0.98)])  # measured: 0.68 and 0.96
def test_skipgram_learns_and_resumes(tmp_path, tying, drop):
  sentences = _sentences()
  r = skipgram.fit_skipgram(_config(tying=tying), sentences, tmp_path)
  losses = [h["loss_per_pair"] for h in r["history"]]
  assert len(losses) == 3 and losses[0] > losses[1] > losses[2] and losses[-1] < drop * losses[0], losses
  assert r["num_params"] == r["vocab_size"] * 16 * (1 if tying == "tied" else 2)
  assert (tmp_path / "vocab.txt").read_text().count("\n") == r["vocab_size"]
  # one more epoch resumes from the checkpoint instead of starting again
  r4 = skipgram.fit_skipgram(_config(tying=tying, num_epochs=4), sentences, tmp_path)
  assert [h["epoch"] for h in r4["history"]] == [1, 2, 3, 4]
  assert r4["history"][:3] == r["history"]
  assert json.loads((tmp_path / "results.json").read_text())["epochs"] == 4


def test_learning_rate_schedule():
  assert skipgram.learning_rate(0.025, 0.0) == 0.025
  assert skipgram.learning_rate(0.025, 0.5) == pytest.approx(0.0125)
  assert skipgram.learning_rate(0.025, 1.0) == pytest.approx(0.025e-4)


def test_ptb_sentences(tmp_path):
  from tests.conftest import write_corpus
  from wt_jax.data import ptb
  write_corpus(tmp_path / "ptb", gz=True)
  sents = ptb.sentences("train", str(tmp_path), download=False)
  assert all(3 <= len(s) <= 8 for s in sents) and "<eos>" not in sents[0]


@pytest.mark.slow
def test_entry_point(tmp_path):
  import subprocess
  import sys
  from tests.conftest import write_corpus
  write_corpus(tmp_path / "ptb", gz=True)
  run = lambda *a: subprocess.run([sys.executable, "-m", "experiments.word2vec", "--config=configs/w2v_tied.py",
                                   f"--workdir={tmp_path / 'run'}", f"--config.data_dir={tmp_path}", *a],
                                  cwd=REPO, capture_output=True, text=True, timeout=300)
  r = run("--config.dataset=text9")
  assert r.returncode != 0 and "Unknown dataset 'text9'" in r.stderr
  r = run("--config.num_epochs=1", "--config.batch_size=64", "--config.min_count=1", "--config.dim=8")
  assert r.returncode == 0, r.stderr[-2000:]
  assert json.loads((tmp_path / "run" / "results.json").read_text())["tying"] == "tied"


def test_steps_per_call_changes_nothing_but_speed(tmp_path):
  """K SGD steps in one scanned call are the K single steps: the same epoch losses and final parameters;
  progress records come at the end of the call that reaches each multiple of log_every."""
  import jax
  from wt_jax.train.checkpoint import Checkpoints
  sentences = _sentences(n=150)
  runs = {}
  for k in (1, 6):  # 6 does not divide the steps per epoch: the last call of an epoch is shorter
    wd = tmp_path / f"k{k}"
    r = skipgram.fit_skipgram(_config(num_epochs=2, steps_per_call=k, log_every=10, batch_size=8),
                                   sentences, wd)
    state, _ = Checkpoints(wd / "checkpoints").restore_saved("last")
    logs = [json.loads(l) for l in (wd / "metrics.jsonl").read_text().splitlines()]
    runs[k] = (r, state["params"], [(m["step"], m["loss_per_pair"], m["lr"]) for m in logs if m["kind"] == "train"])
  (r1, p1, l1), (r6, p6, l6) = runs[1], runs[6]
  spe = r1["steps_per_epoch"]

  def records(k):  # the ends of the calls that pass a multiple of 10 or end an epoch
    ends = [e * spe + min(i + k, spe) for e in range(2) for i in range(0, spe, k)]
    return [c for p, c in zip([0, *ends], ends) if p // 10 != c // 10 or c % spe == 0]

  assert [s for s, _, _ in l1] == records(1) and len(l1) > 4
  assert [s for s, _, _ in l6] == records(6)
  assert r1["steps"] == r6["steps"] > 2 * 6 and (r1["steps"] // 2) % 6 != 0
  np.testing.assert_allclose([h["loss_per_pair"] for h in r6["history"]],
                             [h["loss_per_pair"] for h in r1["history"]], rtol=1e-5)
  jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), p6, p1)


@pytest.mark.parametrize("tying", ["untied", "tied"])
def test_sparse_updates_equal_optax_dense_sgd(tmp_path, tying):
  """The row-wise (word2vec.c) SGD step gives the parameters and losses of optax.sgd on the dense
  gradient; tied, every role's rows land in the one leaf."""
  import jax
  from wt_jax.train.checkpoint import Checkpoints
  out = {}
  for sparse in (False, True):
    wd = tmp_path / f"{tying}_{sparse}"
    r = skipgram.fit_skipgram(_config(tying=tying, num_epochs=2, sparse_updates=sparse, batch_size=16),
                                   _sentences(n=150), wd)
    out[sparse] = (r, Checkpoints(wd / "checkpoints").restore_saved("last")[0]["params"])
  (rd, pd), (rs, ps) = out[False], out[True]
  assert jax.tree_util.tree_structure(pd) == jax.tree_util.tree_structure(ps)
  np.testing.assert_allclose([h["loss_per_pair"] for h in rs["history"]],
                             [h["loss_per_pair"] for h in rd["history"]], rtol=1e-5)
  jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), ps, pd)


def _word2vec_c_pairs(sentences, b_prime, window):
  """word2vec.c's skip-gram loop over kept sentences: for the word at `pos` with its random b′ ∈ {0..W−1}, the
  context at pos − W + a for a from b′ to 2W − b′ (a ≠ W) inside the sentence → (context, centre) pairs."""
  pairs, t = [], 0
  for sen in sentences:
    for pos, word in enumerate(sen):
      for a in range(b_prime[t], 2 * window + 1 - b_prime[t]):
        c = pos - window + a
        if a != window and 0 <= c < len(sen):
          pairs.append((sen[c], word))
      t += 1
  return sorted(pairs)


def test_noise_draws_from_the_alias_table_follow_the_noise_distribution():
  """`noise_draw` (a uniform word, kept or swapped for its alias): 200,000 draws' frequencies within 5 standard
  errors of unigram^0.75 for every word."""
  import jax
  import jax.numpy as jnp
  counts = np.array([900, 300, 300, 50, 7, 1, 120])
  p = skipgram.sg.noise_distribution(counts)
  n = 200_000
  draws = skipgram.noise_draw(jax.random.key(0), *map(jnp.asarray, skipgram.sg.alias_table(p)), (n,))
  freq = np.bincount(np.asarray(draws), minlength=len(p)) / n
  assert np.all(np.abs(freq - p) < 5 * np.sqrt(p * (1 - p) / n)), (freq, p)


@pytest.mark.parametrize("block", [1, 8])
def test_window_blocks_form_word2vec_c_pairs_from_the_kept_text(block):
  """`window_blocks` on the kept text (padded with −1), given word2vec.c's random b′ as b = W − b′, gives exactly the
  pairs of word2vec.c's loop: each context within b of its centre, never across a sentence's end — a centre alone
  (block 1) or blocks of 8 centres sharing their text rows."""
  import jax.numpy as jnp
  rng, W = np.random.default_rng(4), 3
  sentences = [rng.integers(0, 50, size=n).tolist() for n in (1, 7, 2, 12, 5, 5)]
  b_prime = rng.integers(0, W, size=sum(map(len, sentences)))
  ids = np.concatenate([np.full(W, -1), *sentences, np.full(W, -1)]).astype(np.int32)
  sent = np.concatenate([np.full(W, -1), *[[k] * len(s) for k, s in enumerate(sentences)], np.full(W, -1)])
  centres, rows, inside = map(np.asarray, skipgram.window_blocks(jnp.asarray(ids), jnp.asarray(sent, jnp.int32),
                                                                  jnp.asarray(W - b_prime, jnp.int32), W, block))
  got = sorted((int(rows[n, t]), int(centres[n, g])) for n, t, g in zip(*np.nonzero(inside)))
  assert got == _word2vec_c_pairs(sentences, b_prime, W) and len(got) > 40


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("tying", ["untied", "tied"])
def test_a_windows_step_is_sgd_on_the_window_loss_and_the_run_learns(tmp_path, tying, shared):
  """batching='windows': one step's sparse update is −lr·∇ of `window_loss` over its windows with respect to the
  whole matrices (optax's dense SGD of the same loss; tied, both roles' rows in the one leaf); a run learns, and one
  more epoch resumes it."""
  import jax
  import jax.numpy as jnp
  import optax
  from wt_jax.train import trainer
  B, config = 16, _config(tying=tying, batching="windows", shared_negatives=shared, batch_size=16)
  W, K = config.window, config.negatives
  task = skipgram.SkipGramTask(config, _sentences())
  state = task.init_state()
  (ids, sent, b, lrs, first), _ = next(task.batches(1, 0))
  ids, sent, b, lr = ids[:B + 2 * W], sent[:B + 2 * W], b[:1], lrs[:1]  # the first step alone
  new, _ = task.train_step(jax.tree_util.tree_map(jnp.copy, state), ids, sent, b, lr, first)
  G = skipgram.BLOCK if shared else 1  # its windows and noise words, by hand
  centres, rows, inside = skipgram.window_blocks(ids, sent, b[0], W, G)
  alias = tuple(map(jnp.asarray, skipgram.sg.alias_table(skipgram.sg.noise_distribution(task.counts, 0.75))))
  key = jax.random.fold_in(trainer.run_keys(config.seed)[1], first)
  neg = skipgram.noise_draw(key, *alias, (B, K) if shared else (B, 2 * W + 1, K)).reshape(B // G, -1, K)
  centre = jnp.broadcast_to(centres[..., None], (*neg.shape[:-1], 1))
  outs = jnp.concatenate([centre, neg], -1)
  counted = (outs != centre).at[..., 0].set(True)
  mask = inside[..., None] & counted[:, None] if shared else inside & counted

  def loss(params):
    words = params["words"]
    out = words["embedding"] if tying == "tied" else words["out_embedding"]
    return skipgram.window_loss(words["embedding"][rows], out[outs], mask)

  grads = jax.grad(loss)(state["params"])
  want = optax.apply_updates(state["params"], jax.tree_util.tree_map(lambda g: -lr[0] * g, grads))
  jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), new["params"], want)
  r = skipgram.fit_skipgram(config, _sentences(), tmp_path)
  losses = [h["loss_per_pair"] for h in r["history"]]
  assert losses[0] > losses[1] > losses[2], losses
  r4 = skipgram.fit_skipgram(_config(tying=tying, batching="windows", shared_negatives=shared, batch_size=16,
                                     num_epochs=4), _sentences(), tmp_path)
  assert r4["history"][:3] == r["history"] and len(r4["history"]) == 4


@pytest.mark.parametrize("key", ["dim", "window", "negatives", "min_count", "batch_size", "num_epochs"])
def test_a_count_of_zero_is_refused_before_anything_is_built(tmp_path, key):
  """A 0 window draws from an empty range, a 0 dimension divides by zero, 0 negatives trains with no noise
  words: each count is refused by name (`InputError`) before the vocabulary or the workdir is made."""
  from wt_jax.errors import InputError
  with pytest.raises(InputError, match=f"^{key} must be an integer ≥ 1, not 0"):
    skipgram.fit_skipgram(_config(**{key: 0}), [["a", "b", "c"]] * 3, tmp_path / "run")
  assert not (tmp_path / "run").exists()
