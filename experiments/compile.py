"""Compile a config for a TPU topology on this machine (no TPU needed) and print the memory each chip needs.

    python -m experiments.compile --config=configs/rhn_tied.py --topology=v5e:2x2
    python -m experiments.compile --config=configs/small_tied.py --topology=v5e:1x1 --find_max_batch
    python -m experiments.compile --config=configs/nmt_multi30k_three_way.py --topology=v5e:2x2 --dump_dir=/tmp/hlo
    python -m experiments.compile --config=configs/rhn_tied.py --topology=v5e:1x1 --find_max_members

Needs libtpu (`pip install "jax[tpu]==<your jax version>"`). For a language model it compiles the train
step and the evaluation window, for NMT the train step and beam search, all for the project's data-parallel
mesh over the topology's chips (`wt_jax.aot`), checks each executable is a TPU one, and prints per chip:
arguments, outputs, temporaries, the total against the chip's HBM, and the compile time; then one JSON line
(prefix `AOT_JSON `). Exits non-zero with one line when the config does not fit, the topology is unknown or
libtpu is missing. --find_max_batch also searches the largest global train batch (a multiple of the chip
count) that fits (`wt_jax.batch_search.find_max_batch`). --find_max_members searches the largest number of
members (`wt_jax.members`: seeds of the config trained in one program, each chip holding its own members and
the whole batch) that fits, a multiple of the chip count.
"""
import json
import sys

import jax
from absl import app, flags
from etils import epath
from ml_collections import config_flags

from experiments import check_folder, run_main
import wt_jax.aot as aot
import wt_jax.batch_search as batch_search

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a config file in configs/.", lock_config=True)
_TOPOLOGY = flags.DEFINE_string("topology", None, "TPU slice, e.g. v5e:1x1, v5e:2x2, v4:2x2x1, v5p:2x2x1, v6e:2x4.")
_FIND_MAX = flags.DEFINE_bool("find_max_batch", False, "Also search the largest global train batch that fits.")
_RESOLUTION = flags.DEFINE_integer("batch_resolution", 0, "--find_max_batch stops when the largest batch "
                                   "that fits and the smallest that does not are this close (0: the chip "
                                   "count, i.e. exact). Larger: fewer compiles.")
_START = flags.DEFINE_integer("batch_start", 0, "--find_max_batch starts from this global batch (doubling "
                              "up, or halving down if it does not fit; 0: the chip count). A guess near the answer "
                              "(e.g. another topology's result × its chip ratio) saves compiles.")
_REL_TOL = flags.DEFINE_float("batch_rel_tol", 0.0, "--find_max_batch stops when the smallest batch that "
                              "does not fit is at most (1 + this) times the largest that fits (0: exact).")
_FIND_MEMBERS = flags.DEFINE_bool("find_max_members", False, "Also search the largest number of members (seeds in "
                                  "one program, the member axis over the chips) that fits.")
_HBM_GIB = flags.DEFINE_float("hbm_gib", 0.0, "Compare with this many GiB per chip instead of the chip's HBM "
                              "(e.g. to keep a margin).")
_DUMP_DIR = flags.DEFINE_string("dump_dir", "", "Write each program's optimised HLO (compiled.as_text()) here.")
flags.mark_flags_as_required(["config", "topology"])
flags.register_validator("hbm_gib", lambda v: v == 0 or 0 < v < float("inf"),
                         message="--hbm_gib must be a finite number of GiB > 0 (0: the chip's HBM).")
flags.register_validator("batch_rel_tol", lambda v: 0 <= v < float("inf"),
                         message="--batch_rel_tol must be a finite number ≥ 0 (0: exact).")

MIB = 1024 ** 2


def _size(n: int) -> str:
  return f"{n / aot.GIB:.2f} GiB" if n >= aot.GIB // 10 else f"{n / 1024:.1f} KiB"


def _mib(n: int) -> str:
  return f"{n / MIB:10.1f}"


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  check_folder(_DUMP_DIR.value or None, "--dump_dir")
  config, topology = _CONFIG.value, _TOPOLOGY.value
  # A compile-only TPU executable cannot be read back from the persistent cache without a TPU client.
  jax.config.update("jax_enable_compilation_cache", False)
  try:
    limit = int(_HBM_GIB.value * aot.GIB) if _HBM_GIB.value else aot.hbm_bytes(topology)
    dp = aot.data_parallel(topology)
  except (aot.TopologyError, aot.LibTPUMissing) as e:
    sys.exit(f"error: {e}")
  chips = dp.num_devices
  kind = dp.mesh.devices.flat[0].device_kind
  print(f"{config.get('name', '?')} on {topology}: {chips} chip(s) ({kind}), data parallel, "
        f"{limit / aot.GIB:.1f} GiB HBM per chip")
  try:
    programs = aot.compile_config(config, dp)
  except aot.DoesNotFit as e:
    sys.exit(f"error: {config.get('name', 'the config')} does not fit {topology}: the TPU compiler refused "
             f"the {e}")
  print(f"{'program':12s} {'platform':8s} {'batch':>6s} {'args MiB':>10s} {'out MiB':>10s} {'alias MiB':>10s} "
        f"{'temp MiB':>10s} {'total MiB':>10s} {'of HBM':>7s} {'compile s':>9s}")
  for p in programs.values():
    m = p.memory
    print(f"{p.name:12s} {p.platform:8s} {p.batch_size:6d} {_mib(m.arguments)} {_mib(m.outputs)} "
          f"{_mib(m.aliased)} {_mib(m.temporaries)} {_mib(m.total)} {m.total / limit:6.1%} {p.seconds:9.1f}")
    if _DUMP_DIR.value:
      out = epath.Path(_DUMP_DIR.value)
      out.mkdir(parents=True, exist_ok=True)
      (out / f"{config.get('name', 'config')}.{topology.replace(':', '_')}.{p.name}.hlo.txt").write_text(
          p.compiled.as_text())
  fits = all(p.memory.total <= limit for p in programs.values())
  record = {"config": config.get("name", "?"), "topology": topology, "chips": chips, "device_kind": kind,
            "versions": aot.versions(),
            "hbm_bytes_per_chip": limit, "fits": fits,
            "programs": {p.name: {"platform": p.platform, "batch_size": p.batch_size, "total_bytes": p.memory.total,
                                  "argument_bytes": p.memory.arguments, "output_bytes": p.memory.outputs,
                                  "alias_bytes": p.memory.aliased, "temp_bytes": p.memory.temporaries,
                                  "compile_s": round(p.seconds, 1)} for p in programs.values()}}
  if _FIND_MAX.value:
    record.update(_find_max_batch(config, dp, limit))
  if _FIND_MEMBERS.value:
    record.update(_find_max_members(config, dp, limit))
  print("AOT_JSON " + json.dumps(record), flush=True)
  if not fits:
    worst = max(programs.values(), key=lambda p: p.memory.total)
    sys.exit(f"error: {config.get('name', 'the config')} does not fit {topology}: {worst.name} needs "
             f"{_size(worst.memory.total)} per chip of {_size(limit)}")
  if _FIND_MAX.value and record["max_batch"] == 0:
    sys.exit(f"error: not even a global batch of {chips} (one row per chip) fits {topology}")


def _per_chip(compile_n, label: str, limit: int):
  """n → the per-chip bytes of the program `compile_n(n)` builds (n a batch or a number of members), each
  printed as it is compiled; one the compiler refuses prints why and raises its `aot.DoesNotFit`."""
  def total(n):
    try:
      p = compile_n(n)
    except aot.DoesNotFit as e:
      print(f"  {label} {n:7d}: does not fit (the compiler ran out of HBM: {str(e).split(': ', 1)[-1]})", flush=True)
      raise
    print(f"  {label} {n:7d}: {_mib(p.memory.total)} MiB per chip, "
          f"{'fits' if p.memory.total <= limit else 'does not fit'} ({p.seconds:.1f} s)", flush=True)
    return p.memory.total
  return total


def _find_max_batch(config, dp, limit: int) -> dict:
  """The largest global train batch whose program fits `limit` bytes per chip (`batch_search`), printed."""
  chips = dp.num_devices
  search = batch_search.find_max_batch(_per_chip(lambda b: aot.compile_train(config, dp, b), "batch", limit),
                                       chips, limit, resolution=_RESOLUTION.value or None, rel_tol=_REL_TOL.value,
                                       start=_START.value or None)
  above = min((b for b in search.tried if b > search.batch_size), default=None)
  note = " (the search's cap; larger may fit)" if search.capped else ""
  print(f"largest global train batch that fits: {search.batch_size} ({search.batch_size // chips} per chip)"
        f"{note}; smallest tried that does not: {above}; {len(search.tried)} compiles")
  return dict(max_batch=search.batch_size, max_batch_per_chip=search.batch_size // chips,
              max_batch_capped=search.capped, smallest_not_fitting=above, compiles=len(search.tried))


def _find_max_members(config, dp, limit: int) -> dict:
  """The largest number of members (each at the config's batch) whose program fits, the member axis over the
  chips, printed."""
  if aot.is_nmt(config):
    sys.exit("error: --find_max_members is for language models (members of an LM config).")
  chips, devices = dp.num_devices, list(dp.mesh.devices.flat)
  compile_k = lambda k: aot.compile_lm_members(config, devices, k, member_devices=chips)
  found = batch_search.find_max_batch(_per_chip(compile_k, "members", limit), chips, limit, rel_tol=_REL_TOL.value)
  above = min((k for k in found.tried if k > found.batch_size), default=None)
  print(f"largest number of members that fits: {found.batch_size} ({found.batch_size // chips} per chip, batch "
        f"{config.batch_size} each); smallest tried that does not: {above}; {len(found.tried)} compiles")
  return dict(max_members=found.batch_size, max_members_per_chip=found.batch_size // chips,
              max_members_capped=found.capped, members_not_fitting=above,
              members_tried={str(k): v for k, v in sorted(found.tried.items())})


if __name__ == "__main__":
  run_main(main)
