"""Which of `rhn_lm.rhn_recurrence`'s two changes makes one RHN layer's forward + backward faster: the custom VJP
(gate gradients in the loop, each ∂R_ℓ one matmul after it) or R split into d loop invariants outside the loop
(`rhn_lm._split_once`) — each with and without the other. rhn_tied's shapes (Zilly et al.'s `ptb_sota`:
H 830, depth 10; batch 20, bptt 35), the variational state mask on, float32.

    python -m experiments.bench_helpers.rhn_vjp_ablation --rounds=8 --repeats=3

The four variants:
- custom_vjp+split: `rhn_recurrence` as the models run it;
- custom_vjp+slice_in_loop: the same, traced with `_split_once` handing back the stacked R and Rᵀ, so that each
  step of its forward and backward loops slices R[ℓ];
- autodiff+split / autodiff+slice_in_loop: JAX's gradient of the plain step (tanh and σ, `lax.scan`), R split
  before the loop or sliced in it.
First their gradients are checked against the first's; then the variants alternate within each round (median ms
of `repeats` calls). Prints one JSON line per variant with every round's ms and the step's temporaries (XLA).
"""
import argparse
import contextlib
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from wt_jax.models import rhn_lm
from wt_jax.train import run_record

H, DEPTH, B, T = 830, 10, 20, 35


def autodiff_recurrence(split: bool):
  """rhn_lm's step written plainly (z_ℓ = (s·m)·R_ℓ + b_ℓ (+ xw at ℓ = 0); s ← (tanh(z_h) − s)·σ(z_t) + s),
  differentiated by JAX; R split before the loop or sliced in it."""
  def recurrence(xw, r, b, s0, mask):
    split_r = [r[l] for l in range(DEPTH)] if split else None

    def step(s, x):
      for l in range(DEPTH):
        z = (s * mask) @ (split_r[l] if split else r[l]) + b[l]
        if l == 0:
          z = z + x
        s = (jnp.tanh(z[:, :H]) - s) * jax.nn.sigmoid(z[:, H:]) + s
      return s, s

    s_T, y = jax.lax.scan(step, s0, xw)
    return y, s_T
  return recurrence


@contextlib.contextmanager
def weights_sliced_in_loop():
  """While `rhn_lm.rhn_recurrence` is traced (its backward too, which JAX traces after the forward returns),
  `_split_once` hands back the stacked R (forward) and Rᵀ (backward), which its loops then index at every
  step."""
  split_once = rhn_lm._split_once
  rhn_lm._split_once = lambda r_stacked, dtype: r_stacked
  try:
    yield
  finally:
    rhn_lm._split_once = split_once


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--rounds", type=int, default=8)
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()
  rng = np.random.default_rng(0)
  inputs = [jnp.asarray(rng.normal(0, scale, shape).astype(np.float32)) for shape, scale in
            (((T, B, 2 * H), 1.0), ((DEPTH, H, 2 * H), 0.04), ((DEPTH, 2 * H), 0.1), ((B, H), 0.5))]
  mask = jnp.asarray((rng.random((B, H)) > 0.25).astype(np.float32) / 0.75)
  cotangent = jnp.asarray(rng.normal(0, 1, (T, B, H)).astype(np.float32))

  def grad_fn(recurrence):
    def loss(xw, r, b, s0):
      y, s_T = recurrence(xw, r, b, s0, mask)
      return jnp.sum(y * cotangent) + jnp.sum(s_T)
    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3))).lower(*inputs).compile()

  variants = {"custom_vjp+split": grad_fn(rhn_lm.rhn_recurrence)}
  with weights_sliced_in_loop():
    variants["custom_vjp+slice_in_loop"] = grad_fn(rhn_lm.rhn_recurrence)
  variants["autodiff+split"] = grad_fn(autodiff_recurrence(split=True))
  variants["autodiff+slice_in_loop"] = grad_fn(autodiff_recurrence(split=False))
  _, reference = variants["custom_vjp+split"](*inputs)
  grad_error = {name: max(float(jnp.max(jnp.abs(g - r)) / jnp.max(jnp.abs(r)))
                          for g, r in zip(f(*inputs)[1], reference)) for name, f in variants.items()}
  rounds = {name: [] for name in variants}
  for _ in range(args.rounds):
    for name, f in variants.items():
      times = []
      for _ in range(args.repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*inputs))
        times.append(time.perf_counter() - t0)
      rounds[name].append(round(1000 * statistics.median(times), 1))
  for name, f in variants.items():
    print(json.dumps({
        "bench": "rhn_vjp_ablation", "variant": name, "shape": {"hidden": H, "depth": DEPTH, "batch": B, "bptt": T},
        "ms_median": statistics.median(rounds[name]), "ms_rounds": rounds[name], "repeats": args.repeats,
        "temp_mib": round(f.memory_analysis().temp_size_in_bytes / 2**20, 1),
        "max_grad_error_vs_custom_vjp_split": grad_error[name], "device_kind": jax.devices()[0].device_kind,
        "jax": jax.__version__, "host": run_record.host(), "wt_jax_commit": run_record.code_revision()}))


if __name__ == "__main__":
  main()
