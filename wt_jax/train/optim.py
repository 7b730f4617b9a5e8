"""Optimiser and learning-rate schedule (optax).

The Zaremba / Press & Wolf schedule, as the authors' TensorFlow code sets it before epoch i (0-based):
`lr · decay ** max(i − max_epoch, 0)`. In 1-based epochs e = i + 1 that is

    lr(e) = lr₀ · decay^max(e − max_epoch − 1, 0),

so epochs 1 … max_epoch + 1 run at lr₀ and the decay applies from epoch max_epoch + 2 on (small: epochs 1–5 at
1.0, epoch 6 at 0.5, ...). `decay_after_epoch` below is the reference's `max_epoch`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

import wt_jax.tying as tying


def epoch_lr(epoch: int, base_lr: float, decay: float, decay_after_epoch: int) -> float:
  """Learning rate of 1-based `epoch`."""
  return base_lr * decay ** max(epoch - decay_after_epoch - 1, 0)


def zaremba_schedule(base_lr: float, decay: float, decay_after_epoch: int,
                     steps_per_epoch: int) -> optax.Schedule:
  """Step → learning rate, constant within an epoch (see module docstring)."""

  def schedule(step):
    epoch = step // steps_per_epoch + 1
    return base_lr * decay ** jnp.maximum(epoch - decay_after_epoch - 1, 0).astype(jnp.float32)

  return schedule


def with_warmup(schedule: optax.Schedule, warmup_steps: int) -> optax.Schedule:
  """`schedule` scaled by min(1, (step + 1) / warmup_steps): a linear warm-up over `warmup_steps` ≥ 1 steps."""
  return lambda step: schedule(step) * jnp.minimum(1.0, (step + 1) / warmup_steps)


def decay_after_update(rate: float) -> optax.GradientTransformation:
  """Decoupled weight decay applied after the step, as Gal's / Press & Wolf's Torch code does:
  p ← (p + u)·(1 − rate) for the update u computed so far — once per leaf, so a tied matrix once."""

  def update_fn(updates, state, params):
    if params is None:
      raise ValueError("decay_after_update needs the parameters")
    return jax.tree_util.tree_map(lambda u, p: u - rate * (p + u), updates, params), state

  return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


def embedding_rows_at_norm(norm: float) -> optax.GradientTransformation:
  """A constraint as the last link of the chain: the update is changed so that the updated input embedding
  has every row at L2 norm `norm` (`tying.constrain_embedding_rows`; Inan et al.'s Section 6.2 holds the rows
  of L at 1). A projection after the step, so every user of the optimiser trains the same constrained L."""

  def update_fn(updates, state, params):
    if params is None:
      raise ValueError("embedding_rows_at_norm needs the parameters")
    projected = tying.constrain_embedding_rows(optax.apply_updates(params, updates), norm)
    return jax.tree_util.tree_map(lambda new, p: new - p, projected, params), state

  return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


def scale_word_matrices(factor: float) -> optax.GradientTransformation:
  """Multiply the updates of the word matrices (params['words']['embedding'] and, when untied,
  ['out_embedding']) by `factor`, every other update unchanged. After Adam, whose step per entry is about the
  learning rate whatever the matrix's size, a factor equal to the word matrix's init scale over the other
  matrices' gives it the same step relative to its size, as Adafactor's parameter scaling does (Shazeer &
  Stern 2018, relative step size: steps ∝ the parameter's RMS)."""
  if not factor > 0:
    raise ValueError(f"words.lr_scale must be > 0 (1: off), not {factor}.")

  def update_fn(updates, state, params=None):
    words = updates.get("words") if isinstance(updates, dict) else None
    if words is None or "embedding" not in words:
      raise ValueError("words.lr_scale needs a model whose word matrices are params['words']['embedding'].")
    scaled = {k: v * factor if k in ("embedding", "out_embedding") else v for k, v in words.items()}
    return {**updates, "words": scaled}, state

  return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


OPTIMIZERS = {"sgd": optax.sgd, "adam": optax.adam}  # config.optimizer (checked in `wt_jax.train.lm.check`)


def make_optimizer(config, steps_per_epoch: int) -> optax.GradientTransformation:
  """Global-norm clipping, then the optimiser named by `config.optimizer` ('sgd', as the papers, or 'adam') on
  the per-epoch schedule (after `config.warmup_steps` of linear warm-up), then the word matrices' steps ×
  `config.words.lr_scale` when it is not 1 (`scale_word_matrices`), then decoupled weight decay when
  `config.weight_decay_mode == 'decoupled'` and `weight_decay` > 0, then the row-norm constraint on the input
  embedding when `config.words.row_norm` > 0 (`embedding_rows_at_norm`).
  The other weight-decay mode, 'loss', is a cost term (`wt_jax.losses.make_lm_cost`)."""
  lr = zaremba_schedule(config.learning_rate, config.lr_decay, config.decay_after_epoch, steps_per_epoch)
  if config.warmup_steps:
    lr = with_warmup(lr, config.warmup_steps)
  chain = [optax.clip_by_global_norm(config.clip_norm), OPTIMIZERS[config.optimizer](lr)]
  if config.words.lr_scale != 1.0:
    chain.append(scale_word_matrices(config.words.lr_scale))
  wd = config.weight_decay  # (a traced per-member scalar in a members program: decayed, by its value)
  if (isinstance(wd, jax.Array) or wd > 0) and config.weight_decay_mode == "decoupled":
    chain.append(decay_after_update(config.weight_decay))
  if config.words.row_norm:
    chain.append(embedding_rows_at_norm(config.words.row_norm))
  return optax.chain(*chain)
