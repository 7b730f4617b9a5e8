"""One matmul against the same matmul batched over 2 members (`jax.vmap`, what a members run's step does) and
against two matmuls in one program, at the shapes of the small and medium LSTMs' recurrent and output products;
median µs of 5 blocks of 200 calls each. Prints one JSON line per shape.

    python experiments/bench_helpers/batched_matmul.py
"""
import json
import statistics
import time

import jax
import jax.numpy as jnp


def median_us(f, *args, n: int = 200) -> float:
  f(*args).block_until_ready()
  times = []
  for _ in range(5):
    t0 = time.perf_counter()
    for _ in range(n):
      out = f(*args)
    out.block_until_ready()
    times.append((time.perf_counter() - t0) / n * 1e6)
  return statistics.median(times)


def main():
  key = jax.random.key(0)
  one = jax.jit(lambda h, w: h @ w)
  batched = jax.jit(jax.vmap(lambda h, w: h @ w))
  two = jax.jit(lambda h, w: jnp.stack([h[0] @ w[0], h[1] @ w[1]]))
  for B, H, G in [(20, 200, 800), (20, 650, 2600), (400, 200, 10000)]:  # h·W_hh (small, medium); z·Eᵀ (small)
    h, w = jax.random.normal(key, (B, H)), jax.random.normal(key, (H, G))
    h2, w2 = jax.random.normal(key, (2, B, H)), jax.random.normal(key, (2, H, G))
    print(json.dumps({"shape": [B, H, G], "one_us": round(median_us(one, h, w), 1),
                      "vmap2_us": round(median_us(batched, h2, w2), 1), "two_in_one_jit_us": round(median_us(two, h2, w2), 1),
                      "device_kind": jax.devices()[0].device_kind, "jax": jax.__version__}))


if __name__ == "__main__":
  main()
