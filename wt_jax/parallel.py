"""Data parallelism for every trainer: one 1-D device mesh, the batch axis sharded, everything else replicated.

    dp = DataParallel.create()                      # all devices of all processes, mesh axis 'data'
    dp.check_batch(config.batch_size)               # clear error if B is not divisible by the devices
    params = dp.replicate(params)                   # identical copy on every device
    x = dp.shard_batch(x_BxT)                       # rows b·B/D … split over the devices (leading axis)
    step = jax.jit(fn, in_shardings=..., out_shardings=...)   # GSPMD inserts the gradient all-reduce

Because the step is written for the *global* batch (the loss is a mean over all B rows), the gradient XLA
computes from the sharded batch is exactly the single-device gradient: no manual averaging, and the
Zaremba cost Σ_t mean_b stays a mean over the global batch. Random numbers (dropout masks) are the same
whatever the sharding (`jax_threefry_partitionable`, on by default), so 1, 2, 4, 8 devices train the same
model up to float rounding.

Multi-host (TPU VM pods, several GPU hosts): `initialize_distributed()` calls `jax.distributed.initialize`
when the environment asks for it; every host holds the same host-side arrays (the token stream of PTB is a
few MB) and transfers only the rows its own devices hold (`jax.make_array_from_callback`). Only process 0
writes files other than checkpoints (`is_writer`); orbax coordinates the checkpoint writes of all processes.

Members (`wt_jax.members`: K models trained in one program) add a second mesh axis, 'members', in front:
`DataParallel.create(members=K)` lays the devices out as [m, d] with m = gcd(K, devices) by default, every
state leaf's leading member axis split over the m rows (`member_sharding`) and the batch over the d columns.
With m equal to the device count (e.g. 8 members on 8 chips) every chip trains its own models on the whole
batch, and no gradient crosses chips.
"""
from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

DATA_AXIS = "data"
MEMBER_AXIS = "members"
# XLA:GPU's run-to-run determinism (jaxlib 0.10–0.12: "Guarantees run-to-run determinism on GPU"): scatter-adds
# (the embedding gradient among them) and reductions take fixed-order implementations instead of atomics. The
# CPU backend is deterministic already and accepts the flag. JAX's backends read XLA_FLAGS once, when they start.
DETERMINISTIC_FLAG = "--xla_gpu_deterministic_ops"


def determinism_in(flags: str) -> bool | None:
  """What an XLA_FLAGS value asks of DETERMINISTIC_FLAG: True, False, or None when it does not name it (XLA:
  the last setting wins; a bare flag is on)."""
  value = None
  for f in flags.split():
    name, _, v = f.partition("=")
    if name == DETERMINISTIC_FLAG:
      value = v.lower() in ("", "true", "1")
  return value


def xla_flags_with_determinism(flags: str, deterministic: bool) -> str:
  """`flags` (an XLA_FLAGS value) with DETERMINISTIC_FLAG set on or off: any earlier setting of it replaced, every
  other flag kept in order."""
  kept = [f for f in flags.split() if f.split("=", 1)[0] != DETERMINISTIC_FLAG]
  return " ".join(kept + [f"{DETERMINISTIC_FLAG}={'true' if deterministic else 'false'}"])


def initialize_distributed() -> bool:
  """Start JAX's multi-process runtime when the environment says so; returns True if it did.

  - WT_JAX_COORDINATOR=host:port with WT_JAX_NUM_PROCESSES and WT_JAX_PROCESS_ID: an explicit cluster
    (e.g. two processes on one machine, or GPU hosts without a scheduler JAX knows).
  - WT_JAX_DISTRIBUTED=1: let JAX detect the cluster itself (Cloud TPU VM pods, Slurm, Open MPI).
  Otherwise nothing happens (one process). Call it before anything touches a device.
  """
  coordinator = os.environ.get("WT_JAX_COORDINATOR")
  if coordinator:
    try:
      num, pid = int(os.environ["WT_JAX_NUM_PROCESSES"]), int(os.environ["WT_JAX_PROCESS_ID"])
    except (KeyError, ValueError) as e:
      raise ValueError("WT_JAX_COORDINATOR is set, so WT_JAX_NUM_PROCESSES and WT_JAX_PROCESS_ID must be "
                       "integers too.") from e
    local = os.environ.get("WT_JAX_LOCAL_DEVICE_IDS")
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=num, process_id=pid,
                               local_device_ids=[int(i) for i in local.split(",")] if local else None)
    return True
  if os.environ.get("WT_JAX_DISTRIBUTED", "").lower() in ("1", "true", "yes"):
    jax.distributed.initialize()
    return True
  return False


def is_writer() -> bool:
  """True in the one process that writes metrics, results and plots (process 0)."""
  return jax.process_index() == 0


def data_parallel(num_devices: int = 0) -> "DataParallel | None":
  """The mesh a one-model run trains on (`DataParallel.create(num_devices)`), or None for one device of one
  process: the run's arrays then stay where `jax.jit` puts them, with no mesh or placement around them."""
  if jax.process_count() == 1 and (num_devices or jax.device_count()) == 1:
    return None
  return DataParallel.create(num_devices)


@dataclasses.dataclass(frozen=True)
class DataParallel:
  """A 1-D mesh over devices with the batch (leading) axis sharded over it."""

  mesh: Mesh

  @classmethod
  def create(cls, num_devices: int = 0, members: int = 0, member_devices: int = 0) -> "DataParallel":
    """The first `num_devices` devices (0: all devices of all processes) in one mesh axis named 'data'; with
    `members` = K > 0, in a [m, d] mesh ('members', 'data'), m = `member_devices` or, when 0, gcd(K, devices)."""
    devices = jax.devices()
    if num_devices:
      if num_devices > len(devices):
        raise ValueError(f"num_devices={num_devices} but only {len(devices)} devices are visible: "
                         f"{devices}.")
      if jax.process_count() > 1 and num_devices != len(devices):
        raise ValueError(f"num_devices={num_devices}: with {jax.process_count()} processes data "
                         f"parallelism uses every device ({len(devices)}); set num_devices=0.")
      devices = devices[:num_devices]
    return cls.from_devices(devices, members, member_devices)

  @classmethod
  def from_devices(cls, devices, members: int = 0, member_devices: int = 0) -> "DataParallel":
    """`create`'s mesh over the given devices (e.g. a TPU topology's, to compile for: `wt_jax.aot`)."""
    if not members:
      return cls(Mesh(np.asarray(devices), (DATA_AXIS,)))
    n = len(devices)
    m = member_devices or math.gcd(members, n)
    if n % m or members % m:
      raise ValueError(f"member_devices={m} must divide both the device count ({n}) and the number of members "
                       f"({members}); leave it at 0 for gcd(members, devices) = {math.gcd(members, n)}.")
    return cls(Mesh(np.asarray(devices).reshape(m, n // m), (MEMBER_AXIS, DATA_AXIS)))

  @property
  def num_devices(self) -> int:
    return self.mesh.size

  @property
  def data_devices(self) -> int:
    """Devices the batch is split over (all of them without a members axis)."""
    return self.mesh.shape[DATA_AXIS]

  @property
  def member_devices(self) -> int:
    """Devices the member axis is split over (1 without one)."""
    return self.mesh.shape.get(MEMBER_AXIS, 1)

  def member_sharding(self, batch_axis: int | None = None) -> NamedSharding:
    """A stacked leaf [K, ...]: its member axis split over the 'members' devices and, when `batch_axis` (counted
    without the member axis) is given, that axis over the 'data' devices."""
    if MEMBER_AXIS not in self.mesh.axis_names:
      raise ValueError("member_sharding needs a mesh made with DataParallel.create(members=K).")
    rest = [] if batch_axis is None else [*([None] * batch_axis), DATA_AXIS]
    return NamedSharding(self.mesh, P(MEMBER_AXIS, *rest))

  @property
  def replicated(self) -> NamedSharding:
    return NamedSharding(self.mesh, P())

  def batch_sharding(self, batch_axis: int = 0) -> NamedSharding:
    """Sharding with axis `batch_axis` split over the devices (the other axes whole)."""
    return NamedSharding(self.mesh, P(*([None] * batch_axis), DATA_AXIS))

  def divides(self, batch_size: int) -> bool:
    return batch_size % self.data_devices == 0

  def check_batch(self, batch_size: int, name: str = "batch_size") -> None:
    """Raise a clear ValueError unless `batch_size` splits evenly over the devices."""
    if not self.divides(batch_size):
      d = self.data_devices
      raise ValueError(
          f"{name}={batch_size} cannot be split over {d} devices (data parallelism shards the batch; it "
          f"must be a multiple of {d}). Use e.g. --config.{name}={max(d, batch_size // d * d)}, or fewer "
          f"devices (CUDA_VISIBLE_DEVICES, or XLA_FLAGS=--xla_force_host_platform_device_count on CPU).")

  def put(self, tree: Any, sharding: NamedSharding) -> Any:
    """Host values (numpy or single-device arrays, the same in every process) → global arrays with
    `sharding`; each process transfers only the pieces its own devices hold."""

    def one(x):
      x = np.asarray(x)
      return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    return jax.tree_util.tree_map(one, tree)

  def replicate(self, tree: Any) -> Any:
    return self.put(tree, self.replicated)

  def shard_batch(self, tree: Any, batch_axis: int = 0) -> Any:
    """Every leaf split over the devices along `batch_axis` (its size must divide by the device count)."""
    return self.put(tree, self.batch_sharding(batch_axis))

  def shard_or_replicate(self, tree: Any, batch_size: int, batch_axis: int = 0) -> Any:
    """Shard along the batch axis if the batch divides over the devices, else replicate (e.g. the batch-1
    test stream, which every device then computes whole)."""
    if self.divides(batch_size):
      return self.shard_batch(tree, batch_axis)
    return self.replicate(tree)

  def sharding_for(self, batch_size: int, batch_axis: int = 0) -> NamedSharding:
    return self.batch_sharding(batch_axis) if self.divides(batch_size) else self.replicated
