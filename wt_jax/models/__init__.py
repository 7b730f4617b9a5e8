"""Model registry: `config.model` (a name) → a linen module built from the config.

A language model plugs into the trainer (`wt_jax.train.lm`) through one interface:
  module.init(rngs, ids[B, T], carry, train=False)       → variables ({'params': ...})
  module.apply(variables, ids[B, T], carry, train=...)   → (logits[B, T, V], carry)
  module.apply(..., features=True)                       → (z[B, T, D], carry): the output layer's input, for
                                                            the costs of `wt_jax.softmax` (not nnlm)
  module.initial_carry(batch_size)                        → carry (a pytree whose leaves are [L, B, ...]:
                                                            the batch on axis CARRY_BATCH_AXIS = 1)
Regularisers are sown into the `penalties` collection (see wt_jax.tying). The loop never looks at the name.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

import wt_jax.softmax as softmax
import wt_jax.tying as tying
from wt_jax.models import bd_lstm_lm, ffnn_lm, lstm_lm, rhn_lm, transformer_lm

CARRY_BATCH_AXIS = 1  # where the batch sits in every leaf of a carry (data parallelism shards it there)

REGISTRY: dict[str, Callable] = {
    "lstm_lm": lstm_lm.from_config,        # Zaremba et al. (2014)
    "bd_lstm_lm": bd_lstm_lm.from_config,  # Gal (2015) variational dropout, as in Press & Wolf Table 5
    "rhn_lm": rhn_lm.from_config,          # Zilly et al. (2017)
    "nnlm": ffnn_lm.nnlm_from_config,      # Bengio et al. (2003), feed-forward
    "lbl": ffnn_lm.lbl_from_config,        # Mnih & Hinton (2007), log-bilinear
    "transformer_lm": transformer_lm.from_config,  # Vaswani et al. (2017), pre-LN decoder-only
}


def build(config):
  """The model named by `config.model` (`REGISTRY`), for a config `wt_jax.train.lm.check` has passed."""
  return REGISTRY[config.model](config)


def init_params(model, config, rng: jax.Array):
  """The model's initial parameter pytree (the 'params' collection), as training starts from it: built on a
  [batch_size, bptt] window; with `config.words.row_norm` > 0 the input embedding's rows start at that norm
  (the constraint `wt_jax.train.optim.embedding_rows_at_norm` then keeps them there)."""
  x_BxT = jnp.zeros((config.batch_size, config.bptt), jnp.int32)
  variables = model.init(rng, x_BxT, model.initial_carry(config.batch_size), train=False)
  params = variables["params"]
  if config.words.row_norm:
    params = tying.constrain_embedding_rows(params, config.words.row_norm)
  return softmax.start_normalised(params, config) if config.softmax.kind == "nce" else params
