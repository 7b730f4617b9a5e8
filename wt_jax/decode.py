"""Greedy and beam-search decoding for `wt_jax.models.nmt.NMT`, batched and written for `jax.jit`.

    tokens[B, L], scores[B] = beam_search(model, params, src[B, S], beam=5, max_len=L, length_alpha=1.0)
    tokens[B, L], scores[B] = greedy(model, params, src[B, S], max_len=L)
    Translator(model, subwords, dp, batch_size).text(params, src_ids, beam)   id lists in, detokenised text out
    bleu(hypotheses, references) → (sacrebleu corpus BLEU, its signature)

`tokens` are target ids ending with </s> (then <pad>); a hypothesis that reaches `max_len` without </s>
ends there. Beam search is DL4MT's (`gen_sample`): at each step the best `beam − finished` extensions of
the live hypotheses (by log-probability) are kept; those that end (</s> or `max_len`) join the finished
ones, so the beam shrinks as hypotheses finish, and the search stops when `beam` have finished. The result
is the finished hypothesis with the best log-probability / length^length_alpha (the length counting </s>;
length_alpha = 1 is Nematus' normalisation, 0 none). With beam 1 this is greedy decoding.
`scores` are those normalised scores (greedy: the summed log-probability). <pad> and <s> are never emitted.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import wt_jax.parallel as parallel
from wt_jax.data import subwords as sw_lib
from wt_jax.data import translation as tr
from wt_jax.data.subwords import BOS, EOS, PAD


def _forbid(logp_NxV):
  return logp_NxV.at[:, PAD].set(-jnp.inf).at[:, BOS].set(-jnp.inf)


def greedy(model, params, src_BxS, max_len: int):
  """Arg-max decoding → (tokens[B, max_len], summed log-probabilities[B])."""
  enc = model.apply({"params": params}, src_BxS, method=model.encode)
  B = src_BxS.shape[0]

  def body(carry):
    t, state, prev, toks, score, done = carry
    state, logp, _ = model.apply({"params": params}, enc, state, prev, method=model.decode_step)
    logp = _forbid(logp)
    tok = jnp.argmax(logp, axis=-1).astype(jnp.int32)
    if_live = lambda new, old: jnp.where(done, old, new)
    score = if_live(score + jnp.take_along_axis(logp, tok[:, None], axis=1)[:, 0], score)
    tok = if_live(tok, jnp.full_like(tok, PAD))
    toks = toks.at[:, t].set(tok)
    return t + 1, state, tok, toks, score, done | (tok == EOS)

  def cond(carry):
    t, *_, done = carry
    return (t < max_len) & ~jnp.all(done)

  init = (0, enc["state"], jnp.full((B,), BOS, jnp.int32), jnp.full((B, max_len), PAD, jnp.int32),
          jnp.zeros((B,), jnp.float32), jnp.zeros((B,), bool))
  _, _, _, toks, score, _ = jax.lax.while_loop(cond, body, init)
  return toks, score


def _gather(x_BxNx, idx_BxK):
  """x[b, idx[b, k], ...] → [B, K, ...]."""
  return jax.vmap(lambda x, i: x[i])(x_BxNx, idx_BxK)


def beam_search(model, params, src_BxS, beam: int, max_len: int, length_alpha: float = 1.0):
  """Beam search (DL4MT's shrinking beam) → (best tokens[B, max_len], its normalised score[B])."""
  B, K = src_BxS.shape[0], beam
  enc = model.apply({"params": params}, src_BxS, method=model.encode)
  enc = jax.tree_util.tree_map(lambda x: jnp.repeat(x, K, axis=0), enc)  # [B·K, ...], beams of a row adjacent
  H = enc["state"].shape[-1]
  neg = jnp.float32(-jnp.inf)
  rank = jnp.arange(K)[None, :]

  def body(carry):
    t, state, alive_seq, alive_logp, fin_seq, fin_score, n_fin = carry
    prev = jnp.where(t == 0, BOS, alive_seq[:, :, jnp.maximum(t - 1, 0)]).reshape(B * K)
    state, logp, _ = model.apply({"params": params}, enc, state, prev, method=model.decode_step)
    V = logp.shape[-1]
    cand = (alive_logp[:, :, None] + _forbid(logp).reshape(B, K, V)).reshape(B, K * V)
    vals, flat = jax.lax.top_k(cand, K)                           # [B, K], best first
    src_beam, tok = flat // V, (flat % V).astype(jnp.int32)
    seqs = _gather(alive_seq, src_beam).at[:, :, t].set(tok)      # [B, K, L]
    # The beam is K minus the hypotheses finished so far: only the best K − n_fin candidates go on.
    chosen = (rank < (K - n_fin)[:, None]) & (vals > neg)
    ends = chosen & ((tok == EOS) | (t == max_len - 1))
    # Finished: at most K per sentence in all, so the K best of old and new keep every one of them.
    norm = vals / jnp.power(jnp.float32(t + 1), length_alpha)
    all_scores = jnp.concatenate([fin_score, jnp.where(ends, norm, neg)], axis=1)
    fin_score, keep = jax.lax.top_k(all_scores, K)
    fin_seq = _gather(jnp.concatenate([fin_seq, seqs], axis=1), keep)
    # Live: the chosen candidates that did not end (ranked by log-probability).
    alive_logp, keep = jax.lax.top_k(jnp.where(chosen & ~ends, vals, neg), K)
    alive_seq = _gather(seqs, keep)
    state = _gather(state.reshape(B, K, H), _gather(src_beam, keep)).reshape(B * K, H)
    return t + 1, state, alive_seq, alive_logp, fin_seq, fin_score, n_fin + jnp.sum(ends, axis=1)

  def cond(carry):
    t, _, _, alive_logp, _, _, n_fin = carry
    return (t < max_len) & jnp.any((n_fin < K) & jnp.any(alive_logp > neg, axis=1))

  alive_logp = jnp.tile(jnp.concatenate([jnp.zeros((1,)), jnp.full((K - 1,), -jnp.inf)]), (B, 1))
  init = (0, enc["state"], jnp.full((B, K, max_len), PAD, jnp.int32), alive_logp.astype(jnp.float32),
          jnp.full((B, K, max_len), PAD, jnp.int32), jnp.full((B, K), neg), jnp.zeros((B,), jnp.int32))
  *_, fin_seq, fin_score, _ = jax.lax.while_loop(cond, body, init)
  return fin_seq[:, 0], fin_score[:, 0]


def decode_max_len(src_len: int, cap: int) -> int:
  """Longest output for a padded source of `src_len` positions: 2·src_len + 10, at most `cap`."""
  return min(2 * src_len + 10, cap)


class Translator:
  """Jit-compiled greedy / beam decoding of id sequences, batched and sharded over `dp`'s devices."""

  def __init__(self, model, subwords: sw_lib.Subwords, dp: parallel.DataParallel, batch_size: int,
               max_len_cap: int = 128, buckets=tr.DEFAULT_BUCKETS):
    self.sw, self.dp, self.B, self.buckets = subwords, dp, batch_size, buckets
    rows = dp.batch_sharding(0)

    def run(params, src, beam, alpha):
      L = decode_max_len(src.shape[1], max_len_cap)
      if beam <= 1:
        return greedy(model, params, src, L)[0]
      return beam_search(model, params, src, beam, L, alpha)[0]

    self._run = jax.jit(run, static_argnums=(2, 3), in_shardings=(dp.replicated, rows), out_shardings=rows)

  def ids(self, params, src_ids: list[np.ndarray], beam: int = 1, length_alpha: float = 1.0) -> list[np.ndarray]:
    out: list = [None] * len(src_ids)
    for b in tr.eval_batches(src_ids, src_ids, self.B, self.buckets):
      toks = np.asarray(jax.device_get(self._run(params, self.dp.shard_batch(b.src), beam, length_alpha)))
      for r, i in enumerate(b.index):
        if i >= 0:
          out[i] = toks[r]
    return out

  def text(self, params, src_ids, beam: int = 1, length_alpha: float = 1.0) -> list[str]:
    return [self.sw.decode(t, "target") for t in self.ids(params, src_ids, beam, length_alpha)]


def bleu(hypotheses: list[str], references: list[str]) -> tuple[float, str]:
  """sacrebleu corpus BLEU (default: 13a tokenisation, mixed case, exp smoothing) and its signature."""
  from sacrebleu.metrics import BLEU
  metric = BLEU()
  return float(metric.corpus_score(hypotheses, [references]).score), str(metric.get_signature())
