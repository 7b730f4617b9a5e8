"""config.compute_dtype: bfloat16 matmul inputs with float32 results, parameters and optimizer state."""
import jax
import jax.numpy as jnp
from jax.extend import core as jax_core
import numpy as np
import pytest

from tests.conftest import init_lm_params, tiny_config
from wt_jax import losses, models, precision


def _dot_input_dtypes(fn, *args):
  """The operand dtypes of every dot_general in fn's jaxpr (custom-VJP bodies included)."""
  found = []

  def walk(jaxpr):
    for eqn in jaxpr.eqns:
      if eqn.primitive.name == "dot_general":
        found.append(tuple(str(v.aval.dtype) for v in eqn.invars))
      for sub in jax_core.jaxprs_in_params(eqn.params):
        walk(sub)

  walk(jax.make_jaxpr(fn)(*args).jaxpr)
  return found


def test_low_precision_dot_forward_and_backward_use_bf16_inputs():
  x = jax.random.normal(jax.random.key(0), (3, 5, 16))
  w = jax.random.normal(jax.random.key(1), (16, 8))
  loss = lambda dtype: (lambda x, w: 0.5 * jnp.sum(jnp.square(precision.dot(x, w, dtype))))
  grads32 = jax.grad(loss(None), argnums=(0, 1))(x, w)
  grads16 = jax.grad(loss(jnp.bfloat16), argnums=(0, 1))(x, w)
  for g32, g16 in zip(grads32, grads16):
    assert g16.dtype == jnp.float32 and g16.shape == g32.shape
    assert np.linalg.norm(g16 - g32) / np.linalg.norm(g32) < 2e-2  # bfloat16 keeps ~3 significant digits
    assert not np.array_equal(g16, g32)  # (and it did round)
  assert precision.dot(x, w, jnp.bfloat16).dtype == jnp.float32
  dots = _dot_input_dtypes(jax.grad(loss(jnp.bfloat16), argnums=(0, 1)), x, w)
  assert len(dots) == 3 and all(d == ("bfloat16", "bfloat16") for d in dots), dots  # fwd, ∂x, ∂w
  assert all(d == ("float32", "float32") for d in _dot_input_dtypes(jax.grad(loss(None)), x, w))


@pytest.mark.slow  # (whole models; the fast tier proves the bfloat16 dots in the test above)
@pytest.mark.parametrize("model_name,extra", [
    ("lstm_lm", dict(words=dict(mode="tied_projection"))),
    ("rhn_lm", dict(words=dict(mode="tied"), num_layers=1, depth=2, dropout_x=0.0, dropout_i=0.0, dropout_h=0.0,
                    dropout_o=0.0, transform_bias=-2.0, remat=False)),
])
def test_bf16_model_keeps_float32_params_and_matches_float32(model_name, extra):
  B, T = 4, 6
  cfg = lambda dtype: tiny_config(model=model_name, compute_dtype=dtype, hidden_size=32, **extra)
  m32, m16 = models.build(cfg("float32")), models.build(cfg("bfloat16"))
  params = init_lm_params(m32, jax.random.key(0), B, T)
  x = jax.random.randint(jax.random.key(1), (B, T), 0, 31)
  y = jax.random.randint(jax.random.key(2), (B, T), 0, 31)

  def cost(model):
    return lambda p: losses.zaremba_cost(losses.token_nll(model.apply({"params": p}, x, model.initial_carry(B))[0], y))

  (c32, g32), (c16, g16) = jax.value_and_grad(cost(m32))(params), jax.value_and_grad(cost(m16))(params)
  assert c16 == pytest.approx(float(c32), rel=1e-2)
  assert all(l.dtype == jnp.float32 for l in jax.tree_util.tree_leaves(g16))
  flat = lambda t: np.concatenate([np.ravel(l) for l in jax.tree_util.tree_leaves(t)])
  a, b = flat(g32), flat(g16)
  assert np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b) > 0.99
  logits = m16.apply({"params": params}, x, m16.initial_carry(B))[0]
  assert logits.dtype == jnp.float32
  dots = _dot_input_dtypes(jax.grad(cost(m16)), params)
  assert dots and all(d == ("bfloat16", "bfloat16") for d in dots), dots


def test_unknown_compute_dtype_or_matmul_precision_is_one_line_before_anything_is_built():
  from wt_jax.errors import InputError
  from wt_jax.train import lm
  with pytest.raises(InputError, match="Unknown compute_dtype 'fp16'; expected one of float32, bfloat16"):
    lm.check(tiny_config(compute_dtype="fp16"))
  with pytest.raises(InputError, match="Unknown matmul_precision 'tf32'; expected one of default, float32, "):
    lm.check(tiny_config(matmul_precision="tf32"))


def test_a_float32_model_multiplies_with_jnp_matmul_itself():
  """The default path calls nothing of `wt_jax.precision`: a float32 model's matmuls are `jnp.matmul`."""
  assert models.build(tiny_config(compute_dtype="float32")).matmuls.dot is jnp.matmul
  assert models.build(tiny_config(compute_dtype="bfloat16")).matmuls is precision.BFLOAT16
