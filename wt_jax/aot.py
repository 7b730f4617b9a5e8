"""Ahead-of-time compilation for a TPU topology, on a machine without a TPU.

    dp = aot.data_parallel("v5e:2x2")                  # 4 compile-only TPU v5e chips in the 'data' mesh
    programs = aot.compile_lm(config, dp)              # {'train_step': Program, 'eval_step': Program}
    programs["train_step"].memory.total                # bytes per chip
    batch_search.find_max_batch(lambda b: aot.compile_lm_train(config, dp, b).memory.total, dp.num_devices,
                                aot.hbm_bytes("v5e:2x2"))
    aot.compile_lm_members(config, aot.topology_devices("v5e:1x1"), 8)   # 8 seeds in one program, one chip

How: with libtpu installed (`pip install "jax[tpu]==<your jax version>"`),
`jax.experimental.topologies.get_topology_desc(platform="tpu", topology_name=...)` describes the chips of a
TPU slice as devices that can be compiled for but not run on. A `jax.sharding.Mesh` of them in
`parallel.DataParallel` gives the same 1-D data-parallel mesh the trainers build on a TPU VM, and
`jit(...).lower(abstract arguments).compile()` runs the real TPU compiler (XLA's TPU backend in libtpu) on
the project's own step functions — the approach of MaxText's `train_compile.py`
(AI-Hypercomputer/maxtext). `compiled.memory_analysis()` then gives the bytes each chip needs for the
arguments, outputs and temporaries of that program.

The trap: a function lowered with no shardings on the TPU mesh (a bare `jax.jit` called on plain
`ShapeDtypeStruct`s, as the evaluation window is) is compiled for the default backend — the CPU — without any
error, and its memory figures are the CPU's (under `jax.set_mesh(tpu_mesh)` the same call does compile for the
TPU; without it, it does not). Every argument built here therefore carries a `NamedSharding` on
the TPU mesh, and `check_tpu` refuses an executable whose input and output shardings are not all on TPU
devices (`platforms`).

Which programs: for a language model, the train step `lm.make_train_step` (global batch
`config.batch_size`, window `config.bptt`, the recurrent state sharded along the batch) and the evaluation
window `lm_eval.make_eval_window` (`config.eval_batch_size` streams); for NMT, `nmt.make_train_step` on the
longest training bucket and `decode.beam_search` on an evaluation batch of that length. Only the public step
builders are used; the optimiser's schedule needs a number of steps per epoch, which changes no shape.

Memory: the total per chip is arguments + outputs − aliased (donated state reused for the output) +
temporaries, as MaxText's `print_compiled_memory_stats` (maxtext `max_utils.py`) sums it; the compiled
code itself is reported separately. Small buffers may report 0 bytes of HBM temporaries.

JAX's persistent compilation cache cannot read these executables back on a machine without a TPU client (it
warns and compiles again); `experiments/compile.py` turns the cache off. It is compared with the chip's HBM (`HBM_GIB`); the runtime keeps a
little of the HBM for itself, so a total just under the capacity may still not fit on the hardware.
"""
from __future__ import annotations

import dataclasses
import os
import re
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

import wt_jax.decode as decode
import wt_jax.losses as losses
import wt_jax.models as models
import wt_jax.parallel as parallel
import wt_jax.members as members_lib
import wt_jax.lm_eval as eval_lib
from wt_jax.batch_search import DoesNotFit  # raised by compile_program
from wt_jax.data import translation as tr
from wt_jax.models import nmt as nmt_model
from wt_jax.train import lm, members_run, optim, trainer
from wt_jax.train import nmt as nmt_train

GIB = 1024 ** 3

# HBM per chip, from the Google Cloud TPU documentation's system-architecture pages ("TPU v4", "TPU v5e",
# "TPU v5p", "TPU v6e (Trillium)" — https://cloud.google.com/tpu/docs/system-architecture-tpu-vm and the
# per-version pages it links): v4 32 GiB, v5e 16 GiB, v5p 95 GiB, v6e 32 GiB.
HBM_GIB = {"v4": 32, "v5e": 16, "v5p": 95, "v6e": 32}

# One JAX device per chip: a v4 chip's two TensorCores are one device only in 'megacore' mode (as on a v4
# TPU VM, and as MaxText compiles for v4); v5e and v6e have one TensorCore per chip, v5p is megacore by default.
_CHIP_CONFIG = {"v4": "megacore", "v5e": "default", "v5p": "default", "v6e": "default"}
# Chips attached to one host (Cloud TPU docs: v4 and v5p VMs have 4 chips; v5e and v6e single-host slices up
# to 8, multi-host slices 4 per host).
_CHIPS_PER_HOST = {"v4": 4, "v5e": 8, "v5p": 4, "v6e": 8}

_TOPOLOGY = re.compile(r"^(v4|v5e|v5p|v6e):(\d+)x(\d+)(?:x(\d+))?$")


class TopologyError(ValueError):
  """The topology name is not one this module knows (generation:AxB or generation:AxBxC)."""


class LibTPUMissing(RuntimeError):
  """libtpu, which holds the TPU compiler, is not installed."""


class NotCompiledForTPU(RuntimeError):
  """The executable was compiled for another platform (the silent CPU-compile trap)."""


def install_command() -> str:
  return f'pip install "jax[tpu]=={jax.__version__}"'


def require_libtpu() -> None:
  """Raise LibTPUMissing, with the install command, unless libtpu can be imported."""
  try:
    import libtpu  # noqa: F401
  except ImportError as e:
    raise LibTPUMissing(f"libtpu is not installed; it holds the TPU compiler. Install it with: "
                        f"{install_command()}") from e


def versions() -> dict[str, str]:
  """jax and libtpu versions: a compile's memory figures belong to that compiler."""
  import importlib.metadata
  out = {"jax": jax.__version__}
  try:
    out["libtpu"] = importlib.metadata.version("libtpu")
  except importlib.metadata.PackageNotFoundError:
    out["libtpu"] = None
  return out


def parse_topology(name: str) -> tuple[str, tuple[int, int, int]]:
  """'v5e:2x2' → ('v5e', (2, 2, 1)); TopologyError for anything else."""
  m = _TOPOLOGY.match(name)
  if not m:
    raise TopologyError(f"Unknown TPU topology {name!r}; expected <generation>:<AxB[xC]> with generation one "
                        f"of {', '.join(HBM_GIB)}, e.g. v5e:2x2 or v4:2x2x1.")
  gen, a, b, c = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4) or 1)
  if min(a, b, c) < 1:
    raise TopologyError(f"Unknown TPU topology {name!r}: every dimension must be at least 1.")
  return gen, (a, b, c)


def hbm_bytes(topology: str) -> int:
  """HBM of one chip of `topology`'s generation, in bytes."""
  return HBM_GIB[parse_topology(topology)[0]] * GIB


def topology_devices(topology: str) -> list:
  """The compile-only TPU devices (one per chip) of a single-slice `topology` such as 'v5e:2x2'."""
  gen, dims = parse_topology(topology)
  require_libtpu()
  # libtpu takes a lock (/tmp/libtpu_lockfile) so that one process owns the local TPU; compiling for a
  # described topology touches no chip, so let several compiling processes (a test and the CLI it starts,
  # two engineers) load it. Read when libtpu is loaded, i.e. at the first topology request.
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  from jax.experimental import topologies
  chips = int(np.prod(dims))
  host = dims if chips <= _CHIPS_PER_HOST[gen] else (2, 2, 1)
  try:
    devices = topologies.get_topology_desc(platform="tpu", topology_name=topology,
                                           chip_config_name=_CHIP_CONFIG[gen], chips_per_host_bounds=host,
                                           num_slices=1).devices
  except Exception as e:
    if "INVALID_ARGUMENT" not in str(e):  # e.g. libtpu could not start; not the name's fault
      raise
    # libtpu rejects shapes a generation does not come in
    raise TopologyError(f"Unknown TPU topology {topology!r}: libtpu says {str(e).splitlines()[0]}") from e
  if len(devices) != chips:
    raise TopologyError(f"Topology {topology!r} gave {len(devices)} devices for {chips} chips.")
  return list(devices)


def data_parallel(topology: str) -> parallel.DataParallel:
  """The project's data-parallel mesh (axis `parallel.DATA_AXIS`) over the chips of `topology`."""
  return parallel.DataParallel(Mesh(np.asarray(topology_devices(topology)), (parallel.DATA_AXIS,)))


# --- the compiled program ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Memory:
  """Bytes per chip from `compiled.memory_analysis()`."""
  arguments: int
  outputs: int
  aliased: int
  temporaries: int
  code: int

  @property
  def total(self) -> int:
    """Arguments + outputs − aliased + temporaries (what must be in HBM while the program runs)."""
    return self.arguments + self.outputs - self.aliased + self.temporaries


def memory(compiled) -> Memory:
  s = compiled.memory_analysis()
  return Memory(arguments=int(s.argument_size_in_bytes), outputs=int(s.output_size_in_bytes),
                aliased=int(s.alias_size_in_bytes), temporaries=int(s.temp_size_in_bytes),
                code=int(s.generated_code_size_in_bytes))


def platforms(compiled) -> set[str]:
  """The platforms of the devices every input and output of `compiled` is placed on ({'tpu'} for a TPU
  executable; {'cpu'} when the trap compiled it for the CPU)."""
  shardings = jax.tree_util.tree_leaves((compiled.input_shardings, compiled.output_shardings))
  return {d.platform for s in shardings for d in s.device_set}


def check_tpu(compiled, name: str = "program") -> None:
  """Raise NotCompiledForTPU unless every input and output of `compiled` lives on TPU devices."""
  found = platforms(compiled)
  if found != {"tpu"}:
    raise NotCompiledForTPU(
        f"{name} was compiled for {sorted(found)}, not for the TPU topology: some argument was lowered "
        f"without a sharding on the TPU mesh, so jit fell back to the default (CPU) backend.")


@dataclasses.dataclass
class Program:
  """One compiled program: its name, executable, compile seconds and per-chip memory."""
  name: str
  compiled: Any
  seconds: float
  memory: Memory
  batch_size: int

  @property
  def platform(self) -> str:
    return ",".join(sorted(platforms(self.compiled)))


def compile_program(name: str, jitted, *args, batch_size: int = 0, **static) -> Program:
  """Lower `jitted` on abstract `args` (ShapeDtypeStructs carrying TPU shardings), compile it, and check
  the executable is a TPU one."""
  t0 = time.perf_counter()
  lowered = jitted.lower(*args, **static)
  try:
    compiled = lowered.compile()
  except jax.errors.JaxRuntimeError as e:  # XLA's TPU memory assignment: "Ran out of memory on HBM ..."
    if "RESOURCE_EXHAUSTED" in str(e):
      raise DoesNotFit(f"{name} at batch {batch_size}: {str(e).splitlines()[0]}") from e
    raise
  seconds = time.perf_counter() - t0
  check_tpu(compiled, name)
  return Program(name, compiled, seconds, memory(compiled), batch_size)


def _placed(tree, sharding_of: Callable[[Any], NamedSharding]):
  """Abstract values of `tree`'s leaves with the sharding `sharding_of(leaf)`."""
  return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding_of(a)), tree)


# --- language models ------------------------------------------------------------------------------------

def _lm_setup(config):
  model = models.build(config)
  tx = optim.make_optimizer(config, steps_per_epoch=1000)  # the schedule's length changes no shape
  return model, tx


def compile_lm_train(config, dp: parallel.DataParallel, batch_size: int | None = None) -> Program:
  """The LM train step `lm.fit` runs (`lm.make_train_step` of the config's cost) compiled for dp's mesh at global batch `batch_size` (default
  config.batch_size) and window config.bptt."""
  B = batch_size or config.batch_size
  dp.check_batch(B)
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.batch_size = B
  model, tx = _lm_setup(config)
  state = jax.eval_shape(lambda k: lm.initial_state(config, model, tx, k), jax.random.key(0))
  carry_rows = dp.batch_sharding(models.CARRY_BATCH_AXIS)
  state = {k: _placed(v, lambda a, k=k: carry_rows if k == "carry" else dp.replicated) for k, v in state.items()}
  x = jax.ShapeDtypeStruct((B, config.bptt), jnp.int32, sharding=dp.batch_sharding(0))
  step = lm.make_train_step(model, tx, losses.make_lm_cost(config), jax.random.key(1), dp)
  return compile_program("train_step", step, state, x, x, batch_size=B)


def compile_lm_eval(config, dp: parallel.DataParallel) -> Program:
  """`lm_eval.make_eval_window(model)` compiled for dp's mesh on config.eval_batch_size streams of
  config.bptt tokens, placed as `lm_eval.evaluate` places them (split over the chips when the batch
  divides, else replicated)."""
  model, _ = _lm_setup(config)
  B, T = config.eval_batch_size, config.bptt
  params = jax.eval_shape(lambda k: models.init_params(model, config, k), jax.random.key(0))
  params = _placed(params, lambda a: dp.replicated)
  carry = _placed(jax.eval_shape(lambda: model.initial_carry(B)),
                  lambda a: dp.sharding_for(B, models.CARRY_BATCH_AXIS))
  rows = dp.sharding_for(B, 0)
  ids = jax.ShapeDtypeStruct((B, T), jnp.int32, sharding=rows)
  mask = jax.ShapeDtypeStruct((B, T), jnp.float32, sharding=rows)
  return compile_program("eval_step", eval_lib.make_eval_window(model), params, carry, ids, ids, mask,
                         batch_size=B)


def compile_lm_members(config, devices, members: int, member_devices: int = 0) -> Program:
  """The train step of `members` seeds of `config` in one program (`lm.make_member_train_step`, what a run
  with --config.members trains), compiled for a [members, data] mesh over `devices` (`member_devices` along
  the member axis; 0: gcd(members, devices)) at batch config.batch_size: its memory is how many members fit."""
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.members, config.member_values = members, ""
  group = members_lib.parse(config)
  dp = parallel.DataParallel.from_devices(devices, members, member_devices)
  dp.check_batch(config.batch_size)
  template = group.template()
  model, tx = _lm_setup(template)
  one = jax.eval_shape(lambda k: lm.initial_state(template, model, tx, k), jax.random.key(0))
  stacked = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct((members, *a.shape), a.dtype), one)
  stacked[members_lib.DIVERGED] = jax.ShapeDtypeStruct((members,), jnp.int32)
  shardings = members_run.state_sharding(dp)
  state = {k: _placed(v, lambda a, k=k: shardings[k]) for k, v in stacked.items()}
  x = jax.ShapeDtypeStruct((config.batch_size, config.bptt), jnp.int32, sharding=dp.batch_sharding(0))
  step_keys = jnp.stack([trainer.run_keys(seed)[1] for seed in group.seeds])
  step = lm.make_member_train_step(group, 1000, step_keys, dp)
  return compile_program("members_train_step", step, state, x, x, batch_size=members)


def compile_lm(config, dp: parallel.DataParallel) -> dict[str, Program]:
  lm.check(config)
  return {"train_step": compile_lm_train(config, dp), "eval_step": compile_lm_eval(config, dp)}


# --- translation ----------------------------------------------------------------------------------------

def nmt_shapes(config) -> tuple[int, int, int]:
  """(vocabulary size, longest training length, longest decode) of an NMT config: the BPE size bounds
  both side vocabularies; training pairs have at most max_len subwords + </s>, padded to their bucket; a
  decode is at most `decode.decode_max_len` of that length."""
  S = tr.bucket_length(config.max_len + 1, tuple(config.buckets))
  return config.bpe_vocab_size, S, decode.decode_max_len(S, config.decode_max_len)


def _nmt_setup(config):
  V, _, _ = nmt_shapes(config)
  model = nmt_model.from_config(config, V, V)
  tx = nmt_train.make_optimizer(config)
  dummy = jnp.ones((1, 4), jnp.int32)
  params = jax.eval_shape(lambda k: model.init(k, dummy, dummy)["params"], jax.random.key(0))
  return model, tx, params


def compile_nmt_train(config, dp: parallel.DataParallel, batch_size: int | None = None) -> Program:
  """`nmt.make_train_step` compiled for dp's mesh: `batch_size` (default config.batch_size) sentence pairs
  of the longest training bucket."""
  B = batch_size or config.batch_size
  dp.check_batch(B)
  model, tx, params = _nmt_setup(config)
  state = {"params": params, "opt_state": jax.eval_shape(tx.init, params),
           "step": jax.ShapeDtypeStruct((), jnp.int32)}
  state = _placed(state, lambda a: dp.replicated)
  _, S, _ = nmt_shapes(config)
  ids = jax.ShapeDtypeStruct((B, S), jnp.int32, sharding=dp.batch_sharding(0))
  return compile_program("train_step", nmt_train.make_train_step(model, tx, jax.random.key(1), dp), state, ids, ids,
                         ids, batch_size=B)


def compile_nmt_beam(config, dp: parallel.DataParallel) -> Program:
  """`decode.beam_search` (beam config.beam_size) on config.eval_batch_size sources of the longest training
  length, compiled for dp's mesh as `decode.Translator` jits it (rows split over the chips)."""
  model, _, params = _nmt_setup(config)
  B = config.eval_batch_size
  _, S, L = nmt_shapes(config)
  rows = dp.sharding_for(B, 0)
  beam = jax.jit(lambda p, src: decode.beam_search(model, p, src, config.beam_size, L, config.length_alpha)[0],
                 in_shardings=(dp.replicated, rows), out_shardings=rows)
  src = jax.ShapeDtypeStruct((B, S), jnp.int32, sharding=rows)
  return compile_program("beam_search", beam, _placed(params, lambda a: dp.replicated), src, batch_size=B)


def compile_nmt(config, dp: parallel.DataParallel) -> dict[str, Program]:
  return {"train_step": compile_nmt_train(config, dp), "beam_search": compile_nmt_beam(config, dp)}


def is_nmt(config) -> bool:
  return "tying" in config and "bpe_vocab_size" in config


def compile_config(config, dp: parallel.DataParallel) -> dict[str, Program]:
  """Every program a run of `config` compiles (LM: train and eval step; NMT: train step and beam search)."""
  return compile_nmt(config, dp) if is_nmt(config) else compile_lm(config, dp)


def compile_train(config, dp: parallel.DataParallel, batch_size: int) -> Program:
  return (compile_nmt_train if is_nmt(config) else compile_lm_train)(config, dp, batch_size)
