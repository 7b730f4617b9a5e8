"""Greedy and beam-search decoding for `wt_jax.models.nmt.NMT`, batched and written for `jax.jit`.

    tokens[B, L], scores[B] = beam_search(model, params, src[B, S], beam=5, max_len=L, length_alpha=1.0)
    tokens[B, L], scores[B] = greedy(model, params, src[B, S], max_len=L)

`tokens` are target ids ending with </s> (then <pad>); a hypothesis that reaches `max_len` without </s>
ends there. Beam search keeps, per sentence, `beam` live hypotheses (ranked by log-probability) and the
`beam` best finished ones (ranked by log-probability / length^length_alpha, the length counting </s>;
length_alpha = 1 is Nematus' normalisation, 0 none). It stops early once no live hypothesis can still beat
the worst finished one: with length_alpha ≥ 0 a live hypothesis's normalised score can be at most its
log-probability (≤ 0, and falling) divided by max_len^length_alpha.
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
  """Beam search → (best tokens[B, max_len], its normalised score[B])."""
  B, K = src_BxS.shape[0], beam
  enc = model.apply({"params": params}, src_BxS, method=model.encode)
  enc = jax.tree_util.tree_map(lambda x: jnp.repeat(x, K, axis=0), enc)  # [B·K, ...], beams of a row adjacent
  H = enc["state"].shape[-1]
  neg = jnp.float32(-jnp.inf)

  def body(carry):
    t, state, alive_seq, alive_logp, fin_seq, fin_score = carry
    prev = jnp.where(t == 0, BOS, alive_seq[:, :, jnp.maximum(t - 1, 0)]).reshape(B * K)
    state, logp, _ = model.apply({"params": params}, enc, state, prev, method=model.decode_step)
    V = logp.shape[-1]
    cand = (alive_logp[:, :, None] + _forbid(logp).reshape(B, K, V)).reshape(B, K * V)
    vals, flat = jax.lax.top_k(cand, 2 * K)                       # [B, 2K]
    src_beam, tok = flat // V, (flat % V).astype(jnp.int32)
    seqs = _gather(alive_seq, src_beam).at[:, :, t].set(tok)      # [B, 2K, L]
    ends = (tok == EOS) | (t == max_len - 1)
    # Finished: merge the new ones into the K best so far, by normalised score.
    norm = vals / jnp.power(jnp.float32(t + 1), length_alpha)
    all_scores = jnp.concatenate([fin_score, jnp.where(ends, norm, neg)], axis=1)
    all_seqs = jnp.concatenate([fin_seq, seqs], axis=1)
    fin_score, keep = jax.lax.top_k(all_scores, K)
    fin_seq = _gather(all_seqs, keep)
    # Live: the K best that did not end.
    alive_logp, keep = jax.lax.top_k(jnp.where(ends, neg, vals), K)
    alive_seq = _gather(seqs, keep)
    state = _gather(state.reshape(B, K, H), _gather(src_beam, keep)).reshape(B * K, H)
    return t + 1, state, alive_seq, alive_logp, fin_seq, fin_score

  def cond(carry):
    t, _, _, alive_logp, _, fin_score = carry
    best_possible = jnp.max(alive_logp, axis=1) / jnp.power(jnp.float32(max_len), length_alpha)
    return (t < max_len) & ~jnp.all(jnp.min(fin_score, axis=1) >= best_possible)

  alive_logp = jnp.tile(jnp.concatenate([jnp.zeros((1,)), jnp.full((K - 1,), -jnp.inf)]), (B, 1))
  init = (0, enc["state"], jnp.full((B, K, max_len), PAD, jnp.int32), alive_logp.astype(jnp.float32),
          jnp.full((B, K, max_len), PAD, jnp.int32), jnp.full((B, K), neg))
  *_, fin_seq, fin_score = jax.lax.while_loop(cond, body, init)
  return fin_seq[:, 0], fin_score[:, 0]
