"""wt_jax.analysis.embeddings: word-similarity ρ, the Table-4 measure, the subspace distance, CKA, anisotropy and
the norm–count ρ."""
import math

import numpy as np
import pytest
from scipy import stats
from scipy.spatial import distance

from wt_jax.analysis import embeddings as emb
from wt_jax.data import paths


def _circle(angles_deg):
  a = np.radians(angles_deg)
  return np.stack([np.cos(a), np.sin(a)], axis=1) * np.arange(1, len(a) + 1)[:, None]  # norms must not matter


def test_similarity_rho_known_answer_and_coverage():
  words = ["a", "b", "c", "d", "e"]
  E = _circle([0, 10, 30, 60, 100])
  vocab = {w: i for i, w in enumerate(words)}
  # Human scores that rank the pairs exactly as their cosines do (smaller angle = more similar).
  pairs = [("a", "b", 9.0), ("a", "c", 7.0), ("a", "d", 4.0), ("a", "e", 1.0), ("b", "e", 2.0),
           ("a", "zzz", 5.0), ("qq", "b", 3.0)]
  r = emb.similarity_rho(E, vocab, pairs)
  assert r == {"rho": pytest.approx(1.0), "covered": 5, "pairs": 7}
  reversed_pairs = [(w1, w2, -s) for w1, w2, s in pairs]
  assert emb.similarity_rho(E, vocab, reversed_pairs)["rho"] == pytest.approx(-1.0)
  assert math.isnan(emb.similarity_rho(E, vocab, [("a", "zzz", 1.0)])["rho"])


def test_pairwise_distances_blockwise_equal_direct():
  rng = np.random.default_rng(0)
  E1, E2 = rng.normal(size=(30, 5)), rng.normal(size=(30, 5))
  E2[:, :2] = E1[:, :2]  # partly alike, so ρ is neither 0 nor 1
  np.testing.assert_allclose(emb.pairwise_cosine_distances(E1, block=7), distance.pdist(E1, "cosine"),
                             rtol=1e-5, atol=1e-6)
  direct = stats.spearmanr(distance.pdist(E1, "cosine"), distance.pdist(E2, "cosine")).statistic
  assert emb.pairwise_distance_rho(E1, E2, block=7) == pytest.approx(direct, abs=1e-6)
  assert 0.1 < direct < 0.9
  assert emb.pairwise_distance_rho(E1, 3 * E1, block=4) == pytest.approx(1.0)
  with pytest.raises(ValueError, match="different vocabularies"):
    emb.pairwise_distance_rho(E1, E2[:-1])


def test_subspace_distance():
  rng = np.random.default_rng(1)
  A = rng.normal(size=(20, 4))
  assert emb.subspace_distance(A, A @ rng.normal(size=(4, 4))) == pytest.approx(0.0, abs=1e-9)  # same span
  I = np.eye(6)
  assert emb.subspace_distance(I[:, :2], I[:, 2:4]) == pytest.approx(1.0)           # orthogonal
  assert emb.subspace_distance(I[:, [0, 1]], I[:, [0, 2]]) == pytest.approx(math.sqrt(0.5))  # one shared axis
  assert emb.subspace_distance(I[:, :2], I[:, :5]) == pytest.approx(0.0, abs=1e-12)   # contained


def test_linear_cka_anisotropy_and_norm_count_rho_against_their_definitions():
  rng = np.random.default_rng(2)
  A, B = rng.normal(size=(40, 3)), rng.normal(size=(40, 5))
  Q, _ = np.linalg.qr(rng.normal(size=(5, 5)))
  wide = np.pad(A, ((0, 0), (0, 2))) @ Q * 7.0  # A rotated into 5 dimensions and scaled: the same representation
  assert emb.linear_cka(A, wide) == pytest.approx(1.0)
  Ac, Bc = A - A.mean(0), B - B.mean(0)  # Kornblith et al.'s Eq. 4 through the centred Gram matrices
  K, L = Ac @ Ac.T, Bc @ Bc.T
  assert emb.linear_cka(A, B) == pytest.approx(np.sum(K * L) / (np.linalg.norm(K) * np.linalg.norm(L)))
  with pytest.raises(ValueError, match="same number of rows"):
    emb.linear_cka(A, B[:-1])
  cosines = 1 - distance.pdist(B, "cosine")  # every distinct pair once
  assert emb.anisotropy(B) == pytest.approx(cosines.mean())
  assert emb.anisotropy(np.tile([[1.0, 2.0]], (4, 1)) * [[1], [2], [3], [4]]) == pytest.approx(1.0)
  assert emb.anisotropy(np.array([[1.0, 0], [-1.0, 0]])) == pytest.approx(-1.0)
  counts = np.array([5, 50, 500, 1, 20])
  E = np.outer(np.log(counts), [0.6, 0.8])  # norms grow with the counts
  assert emb.norm_count_rho(E, counts) == pytest.approx(1.0)
  assert emb.norm_count_rho(E[::-1], counts) == pytest.approx(0.0, abs=1e-12)  # ranks 3,1,5,4,2 vs 2,4,5,1,3: Σd² = 20


def test_real_wordsim_files(shared_data_root):
  sizes = {name: len(emb.load_wordsim(name, str(shared_data_root))) for name in emb.WORDSIM}
  assert sizes == {"simlex999": 999, "verb143": 144, "men": 3000, "rw": 2034, "mturk771": 771}


def test_wordsim_bad_input(tmp_path):
  with pytest.raises(paths.DataUnavailableError, match=paths.ENV_VAR):
    emb.load_wordsim("men", str(tmp_path))
  with pytest.raises(ValueError, match="Unknown word-similarity set"):
    emb.load_wordsim("wordsim353", str(tmp_path))
  (tmp_path / "wordsim").mkdir()
  (tmp_path / "wordsim" / "men.tsv").write_text("sun\tsunlight\t50.0\nbroken line\n")
  with pytest.raises(ValueError, match=r"men.tsv:2"):
    emb.load_wordsim("men", str(tmp_path))
