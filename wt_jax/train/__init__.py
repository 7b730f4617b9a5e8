"""Training: the one loop every language model shares, its optimiser and schedule, checkpoints, metrics."""
