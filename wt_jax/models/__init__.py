"""Model registry: `config.model` (a name) → a linen module built from the config.

A language model plugs into `wt_jax.train.loop` through one interface:
  module.init(rngs, ids[B, T], carry, train=False)       → variables ({'params': ...})
  module.apply(variables, ids[B, T], carry, train=...)   → (logits[B, T, V], carry)
  module.initial_carry(batch_size)                        → carry (a pytree whose leaves are [L, B, ...]:
                                                            the batch on axis CARRY_BATCH_AXIS = 1)
Regularisers are sown into the `penalties` collection (see wt_jax.tying). The loop never looks at the name.
"""
from __future__ import annotations

from typing import Callable

from wt_jax.models import bd_lstm_lm, ffnn_lm, lstm_lm, rhn_lm

CARRY_BATCH_AXIS = 1  # where the batch sits in every leaf of a carry (data parallelism shards it there)

_REGISTRY: dict[str, Callable] = {
    "lstm_lm": lstm_lm.from_config,        # Zaremba et al. (2014)
    "bd_lstm_lm": bd_lstm_lm.from_config,  # Gal (2015) variational dropout, as in Press & Wolf Table 5
    "rhn_lm": rhn_lm.from_config,          # Zilly et al. (2017)
    "nnlm": ffnn_lm.nnlm_from_config,      # Bengio et al. (2003), feed-forward
    "lbl": ffnn_lm.lbl_from_config,        # Mnih & Hinton (2007), log-bilinear
}


def build(config):
  """Build the model named by `config.model`."""
  name = config.model
  if name not in _REGISTRY:
    raise ValueError(f"Unknown model {name!r}; known models: {', '.join(sorted(_REGISTRY))}.")
  if config.get("embedding_init_scale", 0.0) and name != "lstm_lm":
    raise ValueError(f"embedding_init_scale is only implemented for lstm_lm, not {name!r}; leave it at 0.")
  return _REGISTRY[name](config)
