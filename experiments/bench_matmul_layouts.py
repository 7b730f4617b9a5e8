"""Micro-benchmark: the output layer's three matmuls in each operand layout, float32 vs bfloat16 inputs
(float32 results). `python experiments/bench_matmul_layouts.py` prints one JSON line of median ms."""
import json, statistics, time
import jax, jax.numpy as jnp

def t(f, *a, n=20):
  jax.block_until_ready(f(*a)); ts = []
  for _ in range(n):
    t0 = time.perf_counter(); jax.block_until_ready(f(*a)); ts.append(time.perf_counter() - t0)
  return round(1000 * statistics.median(ts), 2)

k = jax.random.key(0)
out = {}
for dt in (jnp.float32, jnp.bfloat16):
  h = jax.random.normal(k, (400, 200)).astype(dt)
  S = jax.random.normal(k, (10000, 200)).astype(dt)
  St = jnp.asarray(S.T)
  g = jax.random.normal(k, (400, 10000)).astype(dt)
  gT = jnp.asarray(g.T)
  mm = lambda a, b: jnp.matmul(a, b, preferred_element_type=jnp.float32)
  out[jnp.dtype(dt).name] = {
      "fwd h@S.T (S [V,D])": t(jax.jit(lambda h, S: mm(h, S.T)), h, S),
      "fwd h@St (St [D,V] contiguous)": t(jax.jit(mm), h, St),
      "dh g@S": t(jax.jit(mm), g, S),
      "dh g@St.T": t(jax.jit(lambda g, St: mm(g, St.T)), g, St),
      "dS g.T@h": t(jax.jit(lambda g, h: mm(g.T, h)), g, h),
      "dS gT@h (gT contiguous)": t(jax.jit(mm), gT, h),
      "dSt h.T@g": t(jax.jit(lambda h, g: mm(h.T, g)), h, g),
  }
print(json.dumps(out))
