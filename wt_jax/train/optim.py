"""Optimiser and learning-rate schedule (optax).

The Zaremba / Press & Wolf schedule, as the authors' TensorFlow code sets it before epoch i (0-based):
`lr · decay ** max(i − max_epoch, 0)`. In 1-based epochs e = i + 1 that is

    lr(e) = lr₀ · decay^max(e − max_epoch − 1, 0),

so epochs 1 … max_epoch + 1 run at lr₀ and the decay applies from epoch max_epoch + 2 on (small: epochs 1–5 at
1.0, epoch 6 at 0.5, ...). `decay_after_epoch` below is the reference's `max_epoch`.
"""
from __future__ import annotations

import jax.numpy as jnp
import optax


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


def make_optimizer(config, steps_per_epoch: int) -> optax.GradientTransformation:
  """Global-norm clipping then the optimiser named by `config.optimizer` ('sgd', as the papers, or 'adam')."""
  lr = zaremba_schedule(config.learning_rate, config.lr_decay, config.decay_after_epoch, steps_per_epoch)
  if config.optimizer == "sgd":
    opt = optax.sgd(lr)
  elif config.optimizer == "adam":
    opt = optax.adam(lr)
  else:
    raise ValueError(f"Unknown optimizer {config.optimizer!r}; expected 'sgd' or 'adam'.")
  return optax.chain(optax.clip_by_global_norm(config.clip_norm), opt)
