"""Sampling continuations of a prompt from a trained language model (`wt_jax.trained_lm.TrainedLM`: a run folder's,
or one trained in this process).

    sample(lm, prompt, num_samples, max_len, temperature, top_k, top_p, seed)  → {'samples': [...], ...}
    decode(params, prompt[P], key, temperature, model=..., ...)                → ids[B, max_len], logp[B, max_len]

**Sampling** reads `<eos>` and the prompt, then draws `max_len` words per sample: all samples one batch, the
prompt and the draws one compiled `lax.scan` (a prompt token is forced where the prompt has one, as flax's lm1b
`temperature_sample` forces its prefix). The recurrent and feed-forward models step one token at a time with
their carry, which is exact: their prediction depends on the stream only through it. The Transformer's
prediction also depends on where its window starts, so it is stepped through the scoring protocol's windows: a
buffer of `test_window` token slots after `memory` tokens of context, each step writing its token at slot j and
reading the logits there (causal attention: the later, stale slots are not seen), the memory moved on when the
window fills. Every family thus draws token i + 1 from exactly the distribution `score` gives target i + 1 of the
same text. The prompt is read after `<eos>`: it starts a sentence, and an empty prompt samples one from its
first word. A prompt with words but none in the vocabulary is refused (there would be nothing to continue).

Choosing a word from the next-word logits z[B, V]: temperature 0 takes the argmax; otherwise the draw is from
softmax(z / temperature) restricted to the `top_k` likeliest words (0: all; Fan et al. 2018) and then to the
nucleus (Holtzman et al. 2020): the fewest likeliest of those words whose probability, renormalised over them,
reaches `top_p` (1: all).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

import wt_jax.precision as precision
from wt_jax.data import ptb
from wt_jax.data import text as text_lib
from wt_jax.errors import InputError
from wt_jax.models import transformer_lm
from wt_jax.trained_lm import TrainedLM


# --- choosing the next word --------------------------------------------------------------------------------

def choose(logits_BxV, key, temperature, top_k: int, top_p: float):
  """The next ids[B] from the logits z[B, V] (module docstring): argmax at temperature 0, else a draw from
  softmax(z / temperature) within the `top_k` likeliest (0: all) and their `top_p` nucleus (≥ 1: all).
  `temperature` may be traced; `top_k` and `top_p` are Python numbers (they fix the program)."""
  V = logits_BxV.shape[-1]
  greedy = jnp.argmax(logits_BxV, axis=-1)
  scaled = logits_BxV / jnp.where(temperature > 0, temperature, 1.0)
  k = top_k if 0 < top_k < V else V
  if k == V and top_p >= 1.0:
    drawn = jax.random.categorical(key, scaled, axis=-1)
  else:
    vals_BxK, idx_BxK = jax.lax.top_k(scaled, k)  # likeliest first
    if top_p < 1.0:
      p = jax.nn.softmax(vals_BxK, axis=-1)
      before = jnp.cumsum(p, axis=-1) - p  # mass of the likelier words: a word is in while it is below top_p
      vals_BxK = jnp.where(before < top_p, vals_BxK, -jnp.inf)
    pick = jax.random.categorical(key, vals_BxK, axis=-1)
    drawn = jnp.take_along_axis(idx_BxK, pick[:, None], axis=-1)[:, 0]
  return jnp.where(temperature > 0, drawn, greedy).astype(jnp.int32)


# --- stepping a model one token at a time ----------------------------------------------------------------------

def window_of(model, config) -> int:
  """0 for a model stepped by its carry alone (recurrent, feed-forward), `config.test_window` for the Transformer,
  stepped through the scoring protocol's windows (module docstring)."""
  return config.test_window if isinstance(model, transformer_lm.TransformerLM) else 0


def initial_state(model, window: int, batch_size: int):
  """The stepping state before the first token: the model's carry, with a window: (carry, ids[B, W], slot 0)."""
  carry = model.initial_carry(batch_size)
  if not window:
    return carry
  return carry, jnp.zeros((batch_size, window), jnp.int32), jnp.zeros((), jnp.int32)


def next_logits(model, window: int, params, state, ids_B):
  """Feed ids[B] (the current tokens) → (the next word's logits[B, V], the state after them)."""
  if not window:
    logits_Bx1xV, carry = model.apply({"params": params}, ids_B[:, None], state, train=False)
    return logits_Bx1xV[:, 0], carry
  carry, win_BxW, j = state
  win_BxW = win_BxW.at[:, j].set(ids_B)
  logits_BxWxV, filled = model.apply({"params": params}, win_BxW, carry, train=False)
  logits_BxV = jax.lax.dynamic_index_in_dim(logits_BxWxV, j, axis=1, keepdims=False)
  full = j == window - 1  # the window is complete: the next token starts a new one after its memory
  carry = jax.tree_util.tree_map(lambda a, b: jnp.where(full, a, b), filled, carry)
  return logits_BxV, (carry, win_BxW, jnp.where(full, 0, j + 1))


@functools.partial(jax.jit, static_argnames=("model", "window", "num_samples", "max_len", "top_k", "top_p"))
def decode(params, prompt_P, key, temperature, *, model, window: int, num_samples: int, max_len: int, top_k: int,
           top_p: float):
  """prompt ids[P] (P ≥ 1) → (ids[B, max_len], logp[B, max_len]): B = num_samples continuations, each token's
  log-probability under the model (before temperature and truncation). One `lax.scan` over P − 1 + max_len steps:
  step i feeds token i and takes token i + 1 from the prompt while it has one, else from `choose` with key
  fold_in(key, i)."""
  P = prompt_P.shape[0]
  forced = jnp.concatenate([prompt_P[1:], jnp.full((max_len,), -1, jnp.int32)])

  def body(acc, xs):
    state, ids_B = acc
    i, force = xs
    logits_BxV, state = next_logits(model, window, params, state, ids_B)
    logits_BxV = logits_BxV.astype(jnp.float32)
    drawn = choose(logits_BxV, jax.random.fold_in(key, i), temperature, top_k, top_p)
    nxt = jnp.where(force >= 0, force, drawn)
    logp = jnp.take_along_axis(jax.nn.log_softmax(logits_BxV), nxt[:, None], axis=-1)[:, 0]
    return (state, nxt), (nxt, logp)

  start = (initial_state(model, window, num_samples), jnp.full((num_samples,), prompt_P[0], jnp.int32))
  _, (ids_SxB, logp_SxB) = jax.lax.scan(body, start, (jnp.arange(P - 1 + max_len), forced))
  return ids_SxB[P - 1:].T, logp_SxB[P - 1:].T


# --- sampling -------------------------------------------------------------------------------------------------

def check_sampling(num_samples: int, max_len: int, temperature: float, top_k: int, top_p: float) -> None:
  """`InputError` for settings no draw can use: counts below 1, a temperature below 0 (or NaN), a negative
  top_k, top_p outside (0, 1]."""
  for name, value in (("num_samples", num_samples), ("max_len", max_len)):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise InputError(f"{name} must be an integer ≥ 1, not {value!r}.")
  if not temperature >= 0:
    raise InputError(f"temperature must be ≥ 0 (0: the likeliest word at each step), not {temperature!r}.")
  if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
    raise InputError(f"top_k must be an integer ≥ 0 (0: no limit), not {top_k!r}.")
  if not 0 < top_p <= 1:
    raise InputError(f"top_p must be in (0, 1] (1: no nucleus), not {top_p!r}.")


def prompt_tokens(lm: TrainedLM, prompt: str) -> tuple[np.ndarray, list[str], text_lib.Encoded]:
  """(ids[P]: `<eos>` then the prompt's tokens; those tokens; their encoding). The prompt is tokenised as the run's
  corpus (its last line has no `<eos>` unless the prompt ends with a line end). Refuses a prompt with text but no
  word, and one whose words are all outside the vocabulary."""
  if ptb.EOS not in lm.vocab:
    raise InputError(f"The run's vocabulary has no {ptb.EOS}, which sampling starts from.")
  tokens = lm.tokenizer.words(text_lib.lines(prompt))
  if tokens and tokens[-1] == ptb.EOS and not prompt.endswith(("\n", "\r")):
    tokens = tokens[:-1]
  enc = text_lib.encode(tokens, lm.vocab)
  words = [t for t in tokens if t != ptb.EOS]
  if prompt.strip() and not words:
    raise InputError(f"The prompt {prompt!r} has no word once tokenised as {lm.config.dataset} is.")
  if words and enc.oov == len(words):
    raise InputError(f"No word of the prompt {prompt!r} is in the run's vocabulary ({len(lm.vocab)} words; e.g. "
                     f"{', '.join(lm.vocab.words[:5])}); give a prompt with at least one known word, or none.")
  return np.concatenate([[lm.vocab.index[ptb.EOS]], enc.ids]).astype(np.int32), tokens, enc


def sample(lm: TrainedLM, prompt: str = "", num_samples: int = 1, max_len: int = 20, temperature: float = 1.0,
           top_k: int = 0, top_p: float = 1.0, seed: int = 0) -> dict:
  """`num_samples` continuations of `prompt`, `max_len` tokens each (module docstring). Returns {'samples': [{
  'tokens', 'text', 'logp' (each token's log-probability under the model), 'log_prob' (their sum)}], 'prompt',
  'prompt_tokens', 'oov', 'oov_words', 'settings', 'run'}."""
  check_sampling(num_samples, max_len, temperature, top_k, top_p)
  ids, tokens, enc = prompt_tokens(lm, prompt)
  with jax.default_matmul_precision(precision.MATMUL_PRECISIONS[lm.config.get("matmul_precision", "default")]):
    out_ids, logp = decode(lm.params, jnp.asarray(ids), jax.random.key(seed), jnp.float32(temperature),
                           model=lm.model, window=window_of(lm.model, lm.config), num_samples=num_samples,
                           max_len=max_len, top_k=top_k, top_p=float(top_p))
  out_ids, logp = np.asarray(out_ids), np.asarray(logp, np.float64)
  samples = []
  for row, lp in zip(out_ids, logp):
    words = lm.vocab.decode(row)
    samples.append({"tokens": words, "text": lm.tokenizer.render(words), "logp": lp.tolist(), "log_prob": float(lp.sum())})
  settings = {"num_samples": num_samples, "max_len": max_len, "temperature": float(temperature), "top_k": top_k,
              "top_p": float(top_p), "seed": seed}
  return {"samples": samples, "prompt": prompt, "prompt_tokens": tokens, "oov": enc.oov, "oov_words": enc.oov_words,
          "settings": settings, "run": lm.describe()}
