"""Where a members step's time goes: one model's train step (K = 0, the step `lm.fit` runs) against the step of
K members of the same config (`members=K`, `wt_jax.members`), on a synthetic stream, each traced with
jax.profiler. Every op of the compiled program is summed over the traced steps and classed as a product (the
op, or the fusion it runs, holds a `dot`) or not. Prints one JSON line per K and round (the Ks interleaved in
one process), then one line of ratios to K = 0 (medians over rounds). Saved as results/members/profile_<device>.jsonl,
the lines are the members page's profile table (`python -m experiments.report members`).

    python -m experiments.bench_helpers.members_profile --config=configs/small_tied.py --members=0,2 --rounds=2

Op times come from the trace (the executor's per-op events), so they add up to more than the step's wall time
when ops overlap (XLA:CPU runs independent ops on its threads) and include the tracer's own cost; `ms_per_step`
is the same step timed untraced. Each op is reported with its output shape and the JAX operation it came from
(the HLO `op_name`).
"""
import argparse
import collections
import gzip
import importlib.util
import json
import re
import statistics
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from experiments import bench
import wt_jax.members as members_lib
import wt_jax.models as models
import wt_jax.softmax as softmax
from wt_jax.data import batching
from wt_jax.train import run_record

_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (\S+?)[{ ].*?\b([\w\-]+)\(")


def load_config(spec: str, members: int):
  """`path[:argument]` (as `--config` takes it) with `members` set."""
  path, _, arg = spec.partition(":")
  module_spec = importlib.util.spec_from_file_location("profiled_config", path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  config = module.get_config(arg) if arg else module.get_config()
  if members:
    config.members = members
  return config


def hlo_ops(hlo_text: str) -> dict[str, dict]:
  """Every instruction of the compiled module: name → {shape, source, product}. A fusion or call is a product
  when the computation it runs holds a `dot`."""
  computations, current, ops = {}, None, {}
  for line in hlo_text.splitlines():
    header = re.match(r"^(?:ENTRY )?%([\w.\-]+) ", line)
    if header and line.rstrip().endswith("{"):
      current = computations.setdefault(header.group(1), [])
      continue
    m = _INSTRUCTION.match(line)
    if m is None:
      continue
    if current is not None:
      current.append(line)
    name, shape, opcode = m.groups()
    calls = re.search(r"calls=%([\w.\-]+)", line)
    source = re.search(r'op_name="([^"]*)"', line)
    ops[name] = {"shape": shape, "opcode": opcode, "calls": calls.group(1) if calls else None,
                 "source": source.group(1) if source else ""}
  for op in ops.values():
    body = computations.get(op["calls"], []) if op["calls"] else []
    op["product"] = op["opcode"] == "dot" or any(" dot(" in line for line in body)
  return ops


def build_step(config, train: np.ndarray, valid: np.ndarray):
  """(compiled step, initial state, batch preparation, windows): the train step of `config` as the benchmark
  times it (experiments.bench), members or not."""
  config = softmax.resolve(config, train)
  windows = batching.lm_windows(train, config.batch_size, config.bptt)
  if members_lib.parse(config):
    task = bench.members_task(config, train, valid)
    state = task.init_state()
    step = task.step_fn.lower(state, *task.dp.shard_batch((windows.x[0], windows.y[0]))).compile()
    return step, state, lambda x, y: task.dp.shard_batch((x, y)), windows
  model = models.build(config)
  step, state, _, _ = bench.compiled_train_step(config, model, windows, softmax.counts(train, config.vocab_size))
  return step, state, lambda x, y: (x, y), windows


def profile(step, state, prep, windows, steps: int, warmup: int) -> tuple[dict, dict]:
  """(untraced ms per step and per-op ms per step from a trace of the same number of steps, the state after
  them: the step donates the state it is given)."""
  position = 0

  def run(n):
    nonlocal state, position
    for _ in range(n):
      i = position % len(windows)
      state, sums = step(state, *prep(windows.x[i], windows.y[i]))
      position += 1
    jax.block_until_ready(sums)

  run(warmup)
  t0 = time.perf_counter()
  run(steps)
  ms = 1000 * (time.perf_counter() - t0) / steps
  with tempfile.TemporaryDirectory() as trace_dir:
    with jax.profiler.trace(trace_dir):
      run(steps)
    trace = sorted(Path(trace_dir).rglob("*.trace.json.gz"))[-1]
    events = json.load(gzip.open(trace))["traceEvents"]
  per_op = collections.Counter()
  for e in events:
    if e.get("ph") == "X":
      per_op[e["name"]] += e["dur"] / 1000 / steps
  return {"ms_per_step": ms, "per_op": per_op}, state


def summarise(config: str, K: int, round_: int, measured: dict, ops: dict, top: int) -> dict:
  """One JSON line: the step's untraced ms, its op time split into products and the rest, the `top` costliest
  ops. `config` names the run (`path[:argument]`)."""
  per_op = {name: t for name, t in measured["per_op"].items() if name in ops}
  products = sum(t for name, t in per_op.items() if ops[name]["product"])
  return {
      "bench": "members_profile", "config": config, "device_kind": jax.devices()[0].device_kind,
      "jax": jax.__version__, "wt_jax_commit": run_record.code_revision(), "members": K, "round": round_, "ms_per_step": round(measured["ms_per_step"], 2),
      "op_ms_per_step": round(sum(per_op.values()), 2), "product_ms": round(products, 2),
      "other_ms": round(sum(per_op.values()) - products, 2),
      "top_ops": [{"op": name, "ms": round(t, 2), "product": ops[name]["product"], "shape": ops[name]["shape"],
                   "source": ops[name]["source"]} for name, t in sorted(per_op.items(), key=lambda kv: -kv[1])[:top]],
  }


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", default="configs/small_tied.py", help="path[:argument], as --config takes it")
  parser.add_argument("--members", default="0,2", help="comma-separated K (0: one model trained alone)")
  parser.add_argument("--steps", type=int, default=20, help="steps timed, then the same number traced")
  parser.add_argument("--warmup", type=int, default=3)
  parser.add_argument("--rounds", type=int, default=2)
  parser.add_argument("--top", type=int, default=10, help="ops listed per line, the most costly first")
  args = parser.parse_args()
  Ks = [int(k) for k in args.members.split(",")]
  if 0 not in Ks:
    parser.error("--members needs 0 (one model trained alone, the baseline).")
  vocab_size = load_config(args.config, 0).vocab_size
  train = np.random.default_rng(0).integers(0, vocab_size, 200_000).astype(np.int32)
  valid = train[:80_000]
  built = {}
  for K in Ks:
    step, state, prep, windows = build_step(load_config(args.config, K), train, valid)
    built[K] = [step, state, prep, windows, hlo_ops(step.as_text())]
  lines = collections.defaultdict(list)
  for r in range(args.rounds):
    for K in Ks:
      step, state, prep, windows, ops = built[K]
      measured, built[K][1] = profile(step, state, prep, windows, args.steps, args.warmup)
      line = summarise(args.config, K, r, measured, ops, args.top)
      lines[K].append(line)
      print(json.dumps(line), flush=True)
  median = lambda K, key: statistics.median(line[key] for line in lines[K])
  print(json.dumps({
      "bench": "members_profile_ratios", "config": args.config, "steps": args.steps, "rounds": args.rounds,
      "device_kind": jax.devices()[0].device_kind, "jax": jax.__version__, "host": run_record.host(),
      "wt_jax_commit": run_record.code_revision(), "to_one_model": {str(K): {key: round(median(K, key) / median(0, key), 2)
                                for key in ("ms_per_step", "op_ms_per_step", "product_ms", "other_ms")}
                       for K in Ks if K}}))


if __name__ == "__main__":
  main()
