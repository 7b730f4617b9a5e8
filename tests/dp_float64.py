"""tests/dp_worker.py's runs with every NMT parameter and computation in float64 (not a test): what
tests/test_parallel.py runs to tell float32 reassociation from a real difference between device counts.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m tests.dp_float64 --data=D --workdir=W --out=F --runs=nmt:1,nmt:4

jax_enable_x64, and the NMT model's initialisers, its output-bias start and the decoders' scores and ids in 64 bits:
the parameters, the optimiser state and every product are then float64.
"""
import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import types  # noqa: E402

from tests import dp_worker  # noqa: E402
from wt_jax import decode, tying  # noqa: E402
from wt_jax.models import nmt as nmt_model  # noqa: E402
from wt_jax.train import nmt as nmt_train  # noqa: E402


def uniform64(scale):
  return lambda key, shape, dtype=None: jax.random.uniform(key, shape, jnp.float64, -scale, scale)


def orthogonal64(blocks):
  def init(key, shape, dtype=None):
    keys = jax.random.split(key, blocks)
    return jnp.concatenate([nmt_model.nn.initializers.orthogonal()(k, (shape[0], shape[0]), jnp.float64)
                            for k in keys], axis=1)
  return init


bias32 = nmt_train.log_unigram_bias
tying.uniform_init = uniform64
nmt_model._orthogonal_blocks = orthogonal64
nmt_train.log_unigram_bias = lambda targets, vocab_size: bias32(targets, vocab_size).astype(np.float64)
# the decoders name float32 scores and int32 ids: the same names, 64 bits (as x64 makes the rest)
decode.jnp = types.SimpleNamespace(**{**{n: getattr(jnp, n) for n in dir(jnp) if not n.startswith("__")},
                                      "float32": jnp.float64, "int32": jnp.int64})

if __name__ == "__main__":
  dp_worker.main()
