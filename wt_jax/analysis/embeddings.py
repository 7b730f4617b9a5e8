"""How good, and how alike, embedding matrices are (Press & Wolf 2017, Tables 2–4; Inan et al. 2017, App. B).

    pairs = load_wordsim("simlex999")                       # [(w1, w2, human score)], from $WT_JAX_DATA/wordsim
    similarity_rho(E, vocab, pairs)                          # Spearman ρ of cosine vs. humans, with coverage
    pairwise_distance_rho(E1, E2)                            # Table 4: ρ between all pairwise cosine distances
    subspace_distance(A, B)                                  # Inan et al.'s distance between column spaces
    linear_cka(A, B)                                         # linear CKA of two representations of the same rows
    anisotropy(E)                                            # mean cosine of two distinct rows
    norm_count_rho(E, counts)                                # Spearman ρ of row norms against word counts

E, E1, E2, A, B: [V, D] matrices over one vocabulary (row i = word i; A and B may differ in width). Every function is
pure NumPy/SciPy on host arrays (pass `np.asarray(params[...])`).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from scipy import stats

from wt_jax.data import paths

# The five word-similarity sets of Press & Wolf's Tables 2–3 (files: word1 TAB word2 TAB score).
WORDSIM = {"simlex999": "simlex999.tsv", "verb143": "verb143.tsv", "men": "men.tsv", "rw": "rw.tsv",
           "mturk771": "mturk771.tsv"}

Pair = tuple[str, str, float]


def load_wordsim(name: str, data_dir: str | None = None) -> list[Pair]:
  """A word-similarity set from `<data root>/wordsim/` (root: data_dir, else $WT_JAX_DATA, else the cache).
  Verb-143's circulating file has 144 pairs; all are kept."""
  if name not in WORDSIM:
    raise ValueError(f"Unknown word-similarity set {name!r}; known: {', '.join(WORDSIM)}.")
  path = paths.data_root(data_dir) / "wordsim" / WORDSIM[name]
  if not path.is_file():
    raise paths.DataUnavailableError(
        f"{path} not found. Put the word-similarity files (word1<TAB>word2<TAB>score) in a folder "
        f"`wordsim/` under the data root and point {paths.ENV_VAR} (or --data_dir) at that root.")
  return read_pairs(path)


def read_pairs(path: Path) -> list[Pair]:
  """Lines `word1<TAB>word2<TAB>score`, lowercased; a malformed line is an error naming it."""
  pairs = []
  for n, line in enumerate((line.rstrip("\r\n") for line in paths.read_lines(path)), 1):
    if not line.strip():
      continue
    parts = line.split("\t")
    try:
      w1, w2, score = parts[0].strip().lower(), parts[1].strip().lower(), float(parts[2])
    except (IndexError, ValueError) as e:
      raise ValueError(f"{path}:{n}: expected word1<TAB>word2<TAB>score, got {line!r}") from e
    pairs.append((w1, w2, score))
  if not pairs:
    raise ValueError(f"{path} holds no pairs.")
  return pairs


def _unit_rows(E: np.ndarray) -> np.ndarray:
  E = np.asarray(E, np.float64)
  norms = np.linalg.norm(E, axis=1, keepdims=True)
  return E / np.where(norms > 0, norms, 1.0)


def similarity_rho(E: np.ndarray, vocab: Mapping[str, int], pairs: Sequence[Pair]) -> dict:
  """Spearman ρ between cosine similarity of covered pairs and the human scores.

  vocab: word → row of E. A pair is covered when both words are in vocab; the rest are excluded and
  counted. Returns {'rho', 'covered', 'pairs'} (rho is nan with fewer than 2 covered pairs).
  """
  U = _unit_rows(E)
  cos, human = [], []
  for w1, w2, score in pairs:
    if w1 in vocab and w2 in vocab:
      cos.append(float(U[vocab[w1]] @ U[vocab[w2]]))
      human.append(score)
  rho = float(stats.spearmanr(cos, human).statistic) if len(cos) >= 2 else float("nan")
  return {"rho": rho, "covered": len(cos), "pairs": len(pairs)}


def pairwise_cosine_distances(E: np.ndarray, block: int = 1024) -> np.ndarray:
  """1 − cos(e_i, e_j) for all i < j, in row-major order of (i, j): float32[V(V−1)/2], built in blocks of
  rows so that no V×V matrix is held (10k words: 50M pairs, 200 MB)."""
  U = _unit_rows(E)
  V = U.shape[0]
  out = np.empty(V * (V - 1) // 2, np.float32)
  pos = 0
  for start in range(0, V, block):
    rows = U[start:start + block]
    sims = rows @ U.T  # [b, V]
    for k in range(rows.shape[0]):
      i = start + k
      seg = 1.0 - sims[k, i + 1:]
      out[pos:pos + seg.size] = seg
      pos += seg.size
  return out


def pairwise_distance_rho(E1: np.ndarray, E2: np.ndarray, block: int = 1024) -> float:
  """Press & Wolf's Table 4 measure: Spearman ρ between the pairwise cosine distances of all word pairs
  under E1 and under E2 (same vocabulary, same row order)."""
  if E1.shape[0] != E2.shape[0]:
    raise ValueError(f"The matrices cover different vocabularies: {E1.shape[0]} vs {E2.shape[0]} rows.")
  # Pearson of the ranks = Spearman (ties averaged). One distance vector at a time, ranks centred in place
  # (their mean is (n + 1)/2, ties or not) and no stacked copy: 23k words (273M pairs) peak at ≈ 8 GB.
  r1 = stats.rankdata(pairwise_cosine_distances(E1, block))
  r1 -= (r1.size + 1) / 2
  r2 = stats.rankdata(pairwise_cosine_distances(E2, block))
  r2 -= (r2.size + 1) / 2
  return float(np.dot(r1, r2) / math.sqrt(np.dot(r1, r1) * np.dot(r2, r2)))


def subspace_distance(A: np.ndarray, B: np.ndarray) -> float:
  """Distance between the column spaces of A [V, a] and B [V, b] (Inan et al. 2017, Appendix B, as we read
  it): orthonormal bases Q_A, Q_B by QR; the residual of projecting Q_A onto span(Q_B),
  R = Q_A − Q_B Q_Bᵀ Q_A; distance = ‖R‖_F / √a. 0 when span(A) ⊆ span(B), 1 when they are orthogonal.
  For an embedding L [V, D] and an output projection W, pass W's V-indexed side as [V, D]."""
  A, B = np.asarray(A, np.float64), np.asarray(B, np.float64)
  if A.shape[0] != B.shape[0]:
    raise ValueError(f"A and B must have the same number of rows (words): {A.shape} vs {B.shape}.")
  qa, _ = np.linalg.qr(A)
  qb, _ = np.linalg.qr(B)
  residual = qa - qb @ (qb.T @ qa)
  return float(np.linalg.norm(residual) / math.sqrt(qa.shape[1]))


def linear_cka(A: np.ndarray, B: np.ndarray) -> float:
  """Linear centred kernel alignment of A [V, a] and B [V, b] (Kornblith et al. 2019, Eq. 4 with a linear kernel):
  ‖BᵀA‖²_F / (‖AᵀA‖_F ‖BᵀB‖_F) after centring each column over the V rows. 1 when B is A rotated and scaled
  (any widths), about 0 for unrelated matrices; unchanged by an orthogonal map or a scale of either side."""
  A, B = np.asarray(A, np.float64), np.asarray(B, np.float64)
  if A.shape[0] != B.shape[0]:
    raise ValueError(f"A and B must have the same number of rows (words): {A.shape} vs {B.shape}.")
  A, B = A - A.mean(0), B - B.mean(0)
  return float(np.linalg.norm(B.T @ A) ** 2 / (np.linalg.norm(A.T @ A) * np.linalg.norm(B.T @ B)))


def anisotropy(E: np.ndarray) -> float:
  """The mean cosine between two distinct rows of E [V, D], over all V(V − 1) ordered pairs, exactly:
  with unit rows u_i, Σ_{i≠j} u_i·u_j = ‖Σ_i u_i‖² − V. 0 for directions spread evenly, 1 when all rows point one
  way."""
  U = _unit_rows(E)
  V = U.shape[0]
  return float((np.sum(U.sum(0) ** 2) - V) / (V * (V - 1)))


def norm_count_rho(E: np.ndarray, counts: np.ndarray) -> float:
  """Spearman ρ between the row norms of E [V, D] and counts[V] (a rank correlation: the same against log counts)."""
  return float(stats.spearmanr(np.linalg.norm(np.asarray(E, np.float64), axis=1), counts).statistic)
