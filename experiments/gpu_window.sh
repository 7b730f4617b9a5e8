#!/usr/bin/env bash
# One call of a GPU window: set up (once per machine), start `experiments.gpu_table5` (once per machine) in a
# session of its own so that it outlives the call, wait for it at most WAIT_S seconds, then pack its records.
#
#   git rev-parse HEAD > .gpu/commit        # here, before the call: the commit the records will name
#   bash experiments/gpu_window.sh WAIT_S OUT_DIR [gpu_table5 flags...]
#   EXTEND_TO=S bash experiments/gpu_window.sh WAIT_S OUT_DIR   # a later call: deadline = now + S seconds
#
# WAIT_S counts from this script's start, set-up and preflight (about 25 s on a fresh machine) included, so a
# call with a 600-s limit can pass WAIT_S = 580. A second call on the same machine starts nothing: it waits
# for the running driver (moving its deadline if EXTEND_TO is set: that call knows how much of the window is
# left) and packs its records again. Expects, in the checkout (ignored by git, carried to the machine):
# .gpu/whl/*.whl (packages the machine lacks), .gpu/fallback/*.whl (the flax/optax/orbax/chex this project's
# CPU suite runs with, used only if the machine's own fail the preflight) and .gpu/data/ptb/ (the corpus;
# WT_JAX_DATA, if set, wins). WT_GPU_ROOT (default /tmp/wt_gpu) is the machine's scratch folder. Leaves in
# OUT_DIR: records.tgz (env.json, status.json, each job's results.json / curve.jsonl / metrics.jsonl /
# log.txt), status.json and driver.log.
set -u
cd "$(dirname "$0")/.."
WAIT_S=$1
OUT_DIR=$2
shift 2
. experiments/gpu_setup.sh  # ROOT (WT_GPU_ROOT or /tmp/wt_gpu), the carried wheels, the environment
mkdir -p "$OUT_DIR"

pack() {
  cp "$ROOT/driver.log" "$ROOT/records/driver.log" 2>/dev/null
  [ -f "$ROOT/preflight.log" ] && cp "$ROOT/preflight.log" "$ROOT/records/preflight.log"
  tar czf "$OUT_DIR/records.tgz.tmp" -C "$ROOT" records && mv "$OUT_DIR/records.tgz.tmp" "$OUT_DIR/records.tgz"
  cp "$ROOT/records/status.json" "$OUT_DIR/status.json" 2>/dev/null
  tail -n 40 "$ROOT/driver.log" > "$OUT_DIR/driver.log" 2>/dev/null
}

if [ ! -f "$ROOT/driver.pid" ]; then
  date -u +"%FT%TZ setup" | tee "$ROOT/preflight.log"
  nvidia-smi >>"$ROOT/preflight.log" 2>&1
  # Preflight: the whole path (train, validate, checkpoint, test) on the GPU at tiny shapes, with the machine's
  # own flax/optax/orbax; if that fails, again with the versions the CPU suite runs with.
  preflight() {
    rm -rf "$ROOT/pre"
    timeout 300 python3 -m experiments.gpu_table5 --dry_run --jobs=small_tied --parallel=1 --budget_s=240 \
      --min_start_s=1 --run_dir="$ROOT/pre/runs" --record_dir="$ROOT/pre/records" >>"$ROOT/preflight.log" 2>&1 &&
      grep -q '"small_tied": "finished"' "$ROOT/preflight.log"
  }
  if ! preflight; then
    echo "preflight failed with the machine's packages; retrying with .gpu/fallback" | tee -a "$ROOT/preflight.log"
    tail -n 30 "$ROOT/pre/runs/small_tied/log.txt" >>"$ROOT/preflight.log" 2>/dev/null
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$ROOT/site" \
      .gpu/fallback/*.whl >>"$ROOT/preflight.log" 2>&1
    preflight || { echo "preflight failed"; tail -n 60 "$ROOT/preflight.log"; \
                   tail -n 40 "$ROOT/pre/runs/small_tied/log.txt"; exit 1; }
  fi
  cat "$ROOT/pre/records/env.json" >>"$ROOT/preflight.log"
  date -u +"%FT%TZ preflight passed" | tee -a "$ROOT/preflight.log"
  mkdir -p "$ROOT/records"
  setsid nohup python3 -m experiments.gpu_table5 --run_dir="$ROOT/runs" --record_dir="$ROOT/records" "$@" \
    >"$ROOT/driver.log" 2>&1 </dev/null &
  echo $! >"$ROOT/driver.pid"
fi

if [ -n "${EXTEND_TO:-}" ]; then
  echo $(( $(date +%s) + EXTEND_TO )) >"$ROOT/records/deadline_at.tmp" && mv "$ROOT/records/deadline_at.tmp" "$ROOT/records/deadline_at"
fi
end=$WAIT_S  # (bash's SECONDS: seconds since this script started)
pid=$(cat "$ROOT/driver.pid")
n=0
while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do
  sleep 5
  n=$((n + 1))
  if [ $((n % 12)) -eq 0 ]; then  # a line a minute: each job's latest progress
    for f in "$ROOT"/runs/*/log.txt; do  # (a restarted job's first folder is <job>.<precision>.abandoned)
      case $f in *.abandoned/log.txt) continue ;; esac
      echo "$(basename "$(dirname "$f")"): $(grep -E 'epoch [0-9]+ (step|done)' "$f" | tail -n 1 | cut -c 1-220)"
    done
  fi
  [ $((n % 6)) -eq 0 ] && pack
done
pack
kill -0 "$pid" 2>/dev/null && echo "driver still running" || echo "driver finished"
cat "$OUT_DIR/status.json" 2>/dev/null | python3 -c "
import json, sys
s = json.load(sys.stdin)
print('elapsed', s['elapsed_s'], 'deadline', s['deadline_s'], 'done', s['done'], s.get('events'))
for j in s['jobs']:
  print(j['label'], j['state'], j['matmul_precision'], j.get('wall_s'), [e for e in j['events'] if e['event'] != 'start'][-3:])
"
[ ! -f "$ROOT/records/probe.json" ] || python3 -c "
import json; p = json.load(open('$ROOT/records/probe.json'))
print('probe', p['config'], 'chosen', p.get('chosen'))
for k, v in p['variants'].items():
  print(' ', k, v.get('train_ms_per_step'), v.get('train_ms_per_step_all'), v.get('compile_s'), (v.get('warmup_nll') or [None])[0], v.get('error'))
"
