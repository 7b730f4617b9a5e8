"""wt_jax: weight tying (Press & Wolf 2017; Inan, Khosravi & Socher 2017) in JAX/Flax.

The names a notebook needs, for a language model from a config (`configs/*.py`):

    build_model(config)                              the linen module (`wt_jax.models`)
    init_params(model, config, key)                  its initial parameters
    make_optimizer(config, steps_per_epoch)          optax chain: clipping, SGD/Adam + schedule, constraints
    make_lm_cost(config)                             NLL + penalties + augmented loss + loss-side decay
                                                     (or a sampled / NCE / class softmax: config.softmax)
    initial_state(config, model, tx, key)            {'params', 'opt_state', 'step', 'carry'}
    make_train_step(model, tx, cost, key)            jitted step(state, x[B, T], y[B, T]) → (state, sums)
    lm_windows(stream, B, T)                         a token stream as [B, T] input/target windows
    evaluate(model, make_eval_window(model), params, stream, B, T, drop_remainder)   → {'ppl', ...}
    fit(config, corpus, workdir)                     the whole run: checkpoints, metrics, results.json
    load_trained_lm(workdir, checkpoint, member)     a trained LM from its run folder (`wt_jax.trained_lm`)
    sample(lm, prompt, num_samples, max_len, ...)    its continuations of a prompt (temperature, top_k, top_p)
    score(lm, text, per_token)                       a text's perplexity under the run's test protocol

Imported on first use, so `wt_jax.data` stays importable without JAX.
"""

__version__ = "0.1.0"

_API = {
    "build_model": ("wt_jax.models", "build"),
    "init_params": ("wt_jax.models", "init_params"),
    "make_optimizer": ("wt_jax.train.optim", "make_optimizer"),
    "make_lm_cost": ("wt_jax.losses", "make_lm_cost"),
    "initial_state": ("wt_jax.train.lm", "initial_state"),
    "make_train_step": ("wt_jax.train.lm", "make_train_step"),
    "fit": ("wt_jax.train.lm", "fit"),
    "lm_windows": ("wt_jax.data.batching", "lm_windows"),
    "evaluate": ("wt_jax.lm_eval", "evaluate"),
    "make_eval_window": ("wt_jax.lm_eval", "make_eval_window"),
    "perplexity": ("wt_jax.lm_eval", "perplexity"),
    "load_trained_lm": ("wt_jax.trained_lm", "load"),
    "sample": ("wt_jax.sampling", "sample"),
    "score": ("wt_jax.trained_lm", "score"),
}
__all__ = sorted(_API)


def __getattr__(name):
  if name not in _API:
    raise AttributeError(f"module 'wt_jax' has no attribute {name!r}")
  import importlib
  module, attr = _API[name]
  return getattr(importlib.import_module(module), attr)


def __dir__():
  return sorted([*globals(), *_API])
