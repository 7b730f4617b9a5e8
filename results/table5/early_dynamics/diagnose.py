"""The state of a variational-LSTM LM checkpoint, in evaluation mode (no dropout), over the first validation
windows: cell saturation per layer, how much the top output varies across positions, and the scale of the
context part of the logits (z · Wᵀ, W the tied or output matrix) against the output bias.

    python results/table5/early_dynamics/diagnose.py runs/cpu_bd_tied_1500 runs/cpu_bd_tied_1500_seed1

A record of how BUILD_NOTES §25's numbers were made, not part of the library.
"""
import sys

import jax
import ml_collections
import numpy as np

from wt_jax import export, models
from wt_jax.data import batching, lm_corpora


def diagnose(workdir: str, n_windows: int = 10) -> None:
  run = export.load_run(workdir)
  cfg = ml_collections.ConfigDict(run.config)
  model, p = models.build(cfg), run.params
  corpus = lm_corpora.load_corpus(cfg)
  w = batching.lm_windows(corpus.valid, cfg.batch_size, cfg.bptt)
  carry = model.initial_carry(cfg.batch_size)
  zs, cs, nll = [], [], []
  for i in range(n_windows):
    z, _ = model.apply({"params": p}, w.x[i], carry, features=True)
    logits, carry = model.apply({"params": p}, w.x[i], carry)
    lp = np.asarray(jax.nn.log_softmax(logits, -1))
    nll.append(-np.take_along_axis(lp, np.asarray(w.y[i])[..., None], -1).mean())
    zs.append(np.asarray(z).reshape(-1, cfg.hidden_size))
    cs.append(np.asarray(carry[0]))
  z, c = np.concatenate(zs), np.stack(cs)  # [N, H], [windows, layers, B, H]
  mats = export.embedding_matrices(p)
  W = mats.get("tied", mats.get("output"))
  words = export.words_params(p)
  b = np.asarray(words["out_bias"]) if "out_bias" in words else np.zeros(W.shape[0])
  uni = np.bincount(corpus.train, minlength=W.shape[0]) / len(corpus.train)
  pb = np.exp(b - b.max()) / np.exp(b - b.max()).sum()
  ctx = z @ W.T  # [N, V]
  print(f"{workdir}, step {run.step}: valid ppl over {n_windows} windows {np.exp(np.mean(nll)):.0f}; the bias "
        f"alone {np.exp(-(uni * np.log(pb)).sum()):.0f} (unigram {np.exp(-(uni * np.log(uni + 1e-12)).sum()):.0f})")
  print(f"  cells: mean |c| per layer {[round(float(np.abs(c[:, l]).mean()), 2) for l in range(c.shape[1])]}, "
        f"share beyond ±3 {[round(float(np.mean(np.abs(c[:, l]) > 3)), 3) for l in range(c.shape[1])]}")
  print(f"  top output z: mean |z| {np.abs(z).mean():.4f}; context logits z·Wᵀ: std over the vocabulary "
        f"{ctx.std(1).mean():.2f}, over positions {ctx.std(0).mean():.3f}; bias std {b.std():.2f}")


if __name__ == "__main__":
  for workdir in sys.argv[1:]:
    diagnose(workdir)
