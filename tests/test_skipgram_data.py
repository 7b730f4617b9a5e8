"""Skip-gram examples: vocabulary, subsampling and noise formulas, dynamic windows."""
import collections

import numpy as np
import pytest

from wt_jax.data import skipgram as sg


def test_vocab_min_count_and_encode():
  sentences = [["a", "b", "a", "c"], ["a", "b", "d"], ["b", "a"]]
  vocab, counts = sg.build_vocab(sentences, min_count=2)
  assert vocab.words == ["a", "b"] and counts.tolist() == [4, 3]
  ids, sent = sg.encode(sentences, vocab)
  assert ids.tolist() == [0, 1, 0, 0, 1, 1, 0] and sent.tolist() == [0, 0, 0, 1, 1, 2, 2]
  with pytest.raises(ValueError, match="min_count"):
    sg.build_vocab(sentences, min_count=10)


def test_keep_probability_and_noise_match_their_formulas():
  counts = np.array([1_000_000, 10_000, 100, 1])
  f = counts / counts.sum()
  keep = sg.keep_probability(counts, sample=1e-3)
  np.testing.assert_allclose(keep[0], (np.sqrt(f[0] / 1e-3) + 1) * 1e-3 / f[0])
  assert keep[0] < 0.1 and keep[-1] == 1.0 and np.all(np.diff(keep) >= 0)
  assert np.all(sg.keep_probability(counts, sample=0) == 1)
  noise = sg.noise_distribution(counts)
  np.testing.assert_allclose(noise, counts**0.75 / np.sum(counts**0.75))


def test_dynamic_window_pairs():
  ids = np.arange(10, dtype=np.int32)
  sent = np.array([0] * 6 + [1] * 4)
  c, x = sg.skipgram_pairs(ids, sent, window=1, rng=np.random.default_rng(0))
  pairs = set(zip(c.tolist(), x.tolist()))
  # window 1: every neighbour inside a sentence, in both directions, none across the boundary 5|6
  want = {(i, i + 1) for i in range(9) if i != 5} | {(i + 1, i) for i in range(9) if i != 5}
  assert pairs == want
  # window 5, many draws: the number of contexts at distance d falls as (window − d + 1) / window
  rng = np.random.default_rng(1)
  ids = np.arange(2000, dtype=np.int32)
  dist = collections.Counter()
  for _ in range(5):
    c, x = sg.skipgram_pairs(ids, np.zeros(2000, np.int32), 5, rng)
    dist.update(np.abs(c - x).tolist())
  assert set(dist) == {1, 2, 3, 4, 5}
  for d in range(1, 6):
    assert dist[d] / dist[1] == pytest.approx((5 - d + 1) / 5, abs=0.03)


def test_subsampling_drops_frequent_words():
  rng = np.random.default_rng(0)
  ids = np.array([0] * 9000 + [1] * 1000, np.int32)
  rng.shuffle(ids)
  keep = np.array([0.1, 1.0])
  c, x = sg.skipgram_pairs(ids, np.zeros(len(ids), np.int32), 2, rng, keep=keep)
  share_0 = np.mean(c == 0)
  assert share_0 == pytest.approx(900 / 1900, abs=0.05)  # about 900 zeros and all 1000 ones survive


def test_subsampling_keeps_what_word2vec_c_keeps_for_the_same_uniforms():
  """word2vec.c drops an occurrence of word w when ran = (√(f/sample) + 1)·sample/f < a uniform draw (f = count /
  total); `subsample` keeps, from the same uniforms in text order, exactly the others, sentence ids with them."""
  counts = np.array([5000, 800, 120, 30, 4])
  rng = np.random.default_rng(2)
  ids = rng.choice(len(counts), size=3000, p=counts / counts.sum()).astype(np.int32)
  sent = np.sort(rng.integers(0, 200, size=3000)).astype(np.int32)
  sample, total = 1e-2, counts.sum()
  uniforms = np.random.default_rng(9).random(len(ids))
  loop = [(w, s) for w, s, x in zip(ids, sent, uniforms)
          if not (np.sqrt(counts[w] / (sample * total)) + 1) * (sample * total) / counts[w] < x]
  got_ids, got_sent = sg.subsample(ids, sent, sg.keep_probability(counts, sample), np.random.default_rng(9))
  assert list(zip(got_ids.tolist(), got_sent.tolist())) == [(int(w), int(s)) for w, s in loop]
  assert 0.1 < len(loop) / len(ids) < 0.9  # (some dropped, some kept: the comparison has something to compare)


def test_the_alias_table_gives_the_noise_distribution_exactly():
  """Walker's alias table: each word's probability, accept[i] plus the rejected mass of the words aliased to it, over
  V, is p[i]."""
  counts = np.array([1000, 400, 400, 37, 9, 1, 1, 250])
  p = sg.noise_distribution(counts)
  accept, alias = sg.alias_table(p)
  V = len(p)
  got = accept.astype(np.float64).copy()
  np.add.at(got, alias, 1.0 - accept)
  np.testing.assert_allclose(got / V, p, rtol=1e-6)
  assert accept.min() > 0 and accept.max() <= 1.0
