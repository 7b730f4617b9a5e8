"""Greedy and beam-search decoding for `wt_jax.models.nmt.NMT`, batched and written for `jax.jit`.

    tokens[B, L], scores[B] = beam_search(model, params, src[B, S], beam=5, max_len=L, length_alpha=1.0)
    tokens[B, L], scores[B] = greedy(model, params, src[B, S], max_len=L)

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
