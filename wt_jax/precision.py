"""Matmul precision: `config.compute_dtype` = "float32" (default) or "bfloat16", and `config.matmul_precision`.

With bfloat16 the *inputs* of the big matmuls are rounded to bfloat16 and the products accumulated and
returned in float32 (`preferred_element_type`), in the forward and in the backward pass; parameters,
optimizer state, activations between matmuls, the softmax and the loss stay float32. This is the TPU's
default matmul precision; on CPUs with AVX-512 BF16 / AMX, XLA's bfloat16 matmul is several times faster.

    model.matmuls = COMPUTE[config.compute_dtype]   # chosen once, in the model's factory
    y = model.matmuls.dot(x, w)                     # x[..., K] @ w[K, N] → float32[..., N]
    y = dot(x, w, dtype)                            # the same, for a dtype at hand (None: float32)

A float32 model's `dot` is `jnp.matmul` itself: nothing of this module runs on that path. The bfloat16 `dot`
has its own VJP so that the backward matmuls (∂x = g·wᵀ, ∂w = xᵀ·g) also take bfloat16 inputs; plain autodiff
would pair a float32 cotangent with a bfloat16 operand and run them in float32.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

# `config.matmul_precision` → jax's default matmul precision, i.e. how a float32 × float32 product is computed
# (`jax.default_matmul_precision(MATMUL_PRECISIONS[name])` around the run). "default" leaves it to the backend:
# exact on a CPU, TF32 inputs (10-bit mantissa) on an A100/H100 through cuBLAS and cuDNN, one bfloat16 pass on a
# TPU. "float32" asks for the exact product everywhere (on a GPU, no tensor-core TF32: the arithmetic of the
# papers' pre-Ampere GPUs). The names are checked with the rest of the config (`wt_jax.train.lm.check`).
MATMUL_PRECISIONS = {"default": None, "float32": "float32", "tensorfloat32": "tensorfloat32"}


def is_low(dtype) -> bool:
  return dtype is not None and jnp.dtype(dtype) != jnp.float32


def matmul(a: jax.Array, b: jax.Array, dtype) -> jax.Array:
  """a @ b with inputs cast to `dtype`, float32 result (no custom gradient: for hand-written backward
  passes, e.g. inside `lstm_lm.lstm_recurrence`)."""
  if not is_low(dtype):
    return a @ b
  return jnp.matmul(a.astype(dtype), b.astype(dtype), preferred_element_type=jnp.float32)


def dot(x: jax.Array, w: jax.Array, dtype=None) -> jax.Array:
  """x[..., K] @ w[K, N] → float32[..., N], computed from `dtype` inputs (None or float32: plain x @ w)."""
  if not is_low(dtype):
    return x @ w
  return _low_dot(x, w, jnp.dtype(dtype))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _low_dot(x, w, dtype):
  return matmul(x, w, dtype)


def _low_dot_fwd(x, w, dtype):
  xl, wl = x.astype(dtype), w.astype(dtype)
  # (residuals must be arrays: empty ones carry the primal dtypes the cotangents must have)
  return matmul(xl, wl, dtype), (xl, wl, jnp.empty((0,), x.dtype), jnp.empty((0,), w.dtype))


def _low_dot_bwd(dtype, res, g):
  xl, wl, x_like, w_like = res
  x_dtype, w_dtype = x_like.dtype, w_like.dtype
  gl = g.astype(dtype)
  dx = matmul(gl, wl.T, dtype)
  K, N = wl.shape
  dw = matmul(xl.reshape(-1, K).T, gl.reshape(-1, N), dtype)
  return dx.astype(x_dtype), dw.astype(w_dtype)


_low_dot.defvjp(_low_dot_fwd, _low_dot_bwd)


class Matmuls(NamedTuple):
  """How a model multiplies, chosen once from `config.compute_dtype` (`COMPUTE`): `dot(x[..., K], w[K, N]) →
  float32[..., N]` (differentiable; also what the hand-written backward passes call), and `dtype`, the input dtype
  the recurrent weights are cast to once, outside the time loops (None: float32, nothing cast)."""

  dot: Callable
  dtype: Any = None


FLOAT32 = Matmuls(jnp.matmul)
BFLOAT16 = Matmuls(functools.partial(_low_dot, dtype=jnp.dtype(jnp.bfloat16)), jnp.bfloat16)
COMPUTE = {"float32": FLOAT32, "bfloat16": BFLOAT16}  # config.compute_dtype → the models' matmuls
