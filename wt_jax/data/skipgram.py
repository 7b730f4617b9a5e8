"""Training examples for word2vec skip-gram (Mikolov et al. 2013), as the reference C tool makes them.

    vocab, counts = build_vocab(sentences, min_count=5)
    keep = keep_probability(counts, sample=1e-3)           # frequent-word subsampling
    noise = noise_distribution(counts, power=0.75)          # negatives ~ unigram^0.75
    accept, alias = alias_table(noise)                      # the same distribution in O(1) a draw (Walker)
    centers, contexts = skipgram_pairs(ids, sentence_ids, window=5, rng=rng)
    kept_ids, kept_sentences = subsample(ids, sentence_ids, keep, rng)   # the text a windows step reads

Sentences: a list of token lists (a PTB line, or text8 cut into 1,000-word pieces, as word2vec.c does).
Words under `min_count` are dropped from the text before anything else (word2vec.c, gensim). Each epoch
draws, per token, whether it is kept (subsampling) and, per kept token, its window b ~ U{1, …, window}
("dynamic window"); a centre's contexts are the kept tokens at distance ≤ b inside its sentence.
"""
from __future__ import annotations

import collections
from typing import Sequence

import numpy as np

from wt_jax.data.vocab import Vocab
from wt_jax.errors import InputError


def build_vocab(sentences: Sequence[Sequence[str]], min_count: int = 5) -> tuple[Vocab, np.ndarray]:
  """Words seen at least `min_count` times, by decreasing count (ties alphabetical); their counts int64[V]."""
  counts = collections.Counter(w for s in sentences for w in s)
  words = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
  if not words:
    raise InputError(f"No word occurs {min_count} times or more; lower min_count or use a larger corpus.")
  return Vocab(words), np.asarray([counts[w] for w in words], np.int64)


def encode(sentences: Sequence[Sequence[str]], vocab: Vocab) -> tuple[np.ndarray, np.ndarray]:
  """Token ids int32[N] of the in-vocabulary words, and the sentence index of each, int32[N]."""
  ids, sent = [], []
  for k, s in enumerate(sentences):
    row = [vocab.index[w] for w in s if w in vocab.index]
    ids.extend(row)
    sent.extend([k] * len(row))
  return np.asarray(ids, np.int32), np.asarray(sent, np.int32)


def keep_probability(counts: np.ndarray, sample: float = 1e-3) -> np.ndarray:
  """Probability of keeping each occurrence of a word, word2vec.c's formula: with f = count / total,
  keep = (√(f / sample) + 1) · sample / f, capped at 1 (sample = 0: keep everything)."""
  counts = np.asarray(counts, np.float64)
  if sample <= 0:
    return np.ones_like(counts)
  f = counts / counts.sum()
  return np.minimum((np.sqrt(f / sample) + 1.0) * sample / f, 1.0)


def noise_distribution(counts: np.ndarray, power: float = 0.75) -> np.ndarray:
  """P(w) ∝ count(w)^power (word2vec.c's negative-sampling table, exactly rather than tabulated)."""
  p = np.asarray(counts, np.float64) ** power
  return p / p.sum()


def subsample(ids: np.ndarray, sentence_ids: np.ndarray, keep: np.ndarray, rng: np.random.Generator
              ) -> tuple[np.ndarray, np.ndarray]:
  """The tokens an epoch keeps: each occurrence of word w with probability keep[w], by one uniform draw a token in
  text order (word2vec.c drops a word when its `ran` < a uniform); ids and sentence ids of the kept, in order."""
  kept = rng.random(len(ids)) < keep[ids]
  return ids[kept], sentence_ids[kept]


def alias_table(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Walker's alias method (Vose's construction) for a distribution p[V]: accept float32[V], alias int32[V] such that
  drawing i uniformly from V, then keeping i with probability accept[i], else taking alias[i], gives i with
  probability exactly p[i] (up to float rounding): p[i] = (accept[i] + Σ_{j: alias[j]=i} (1 − accept[j])) / V."""
  p = np.asarray(p, np.float64)
  V = len(p)
  scaled = p * V / p.sum()
  accept, alias = np.ones(V), np.arange(V)
  small, large = [i for i in range(V) if scaled[i] < 1.0], [i for i in range(V) if scaled[i] >= 1.0]
  while small and large:
    s, l = small.pop(), large.pop()
    accept[s], alias[s] = scaled[s], l
    scaled[l] -= 1.0 - scaled[s]
    (small if scaled[l] < 1.0 else large).append(l)
  return accept.astype(np.float32), alias.astype(np.int32)


def skipgram_pairs(ids: np.ndarray, sentence_ids: np.ndarray, window: int, rng: np.random.Generator,
                   keep: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
  """One epoch of (centre, context) pairs, int32[P] each.

  keep: per-word keep probabilities (`keep_probability`), applied first; then each kept token gets a
  window b ~ U{1..window} and pairs with the kept tokens within distance b in the same sentence.
  """
  ids, sentence_ids = np.asarray(ids), np.asarray(sentence_ids)
  if keep is not None:
    ids, sentence_ids = subsample(ids, sentence_ids, keep, rng)
  b = rng.integers(1, window + 1, size=len(ids))
  centers, contexts = [], []
  for d in range(1, window + 1):
    i = np.arange(len(ids) - d)  # pairs (i, i + d) and (i + d, i)
    same = sentence_ids[i] == sentence_ids[i + d]
    fwd = i[same & (b[i] >= d)]  # centre i, context i + d
    bwd = i[same & (b[i + d] >= d)]  # centre i + d, context i
    centers += [ids[fwd], ids[bwd + d]]
    contexts += [ids[fwd + d], ids[bwd]]
  if not centers:
    return np.zeros(0, np.int32), np.zeros(0, np.int32)
  return np.concatenate(centers).astype(np.int32), np.concatenate(contexts).astype(np.int32)
