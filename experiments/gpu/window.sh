#!/usr/bin/env bash
# One call of a GPU window: set up and pass the preflight (once per machine), start an `experiments.gpu.run_queue`
# driver in a session of its own so that it outlives the call, wait for it at most WAIT_S seconds, then pack
# its records.
#
#   bash experiments/gpu/prepare.sh         # here, before each call: corpora, wheels, the commit's stamp
#   bash experiments/gpu/window.sh WAIT_S OUT_DIR [run_queue flags...]
#   EXTEND_TO=S bash experiments/gpu/window.sh WAIT_S OUT_DIR   # a later call: deadline = now + S seconds
#
# WAIT_S counts from this script's start, set-up and preflight (about 25 s on a fresh machine) included, so a
# call with a 600-s limit can pass WAIT_S = 580. The preflight runs the whole path (train, validate, checkpoint,
# test) of a tiny `small_tied` and checks that JAX's backend is the GPU (WT_GPU_BACKEND, default gpu: a CPU dry
# run of this script sets cpu), then builds every job's config and reads its corpus (`--check_jobs`).
#
# A later call on the same machine: without flags it starts nothing, waits for the driver (moving its deadline
# if EXTEND_TO is set: that call knows how much of the window is left) and packs its records again. With flags
# that differ from the running driver's, it waits (within WAIT_S) for that driver to end and then starts a new
# one with them, its records in records/driver<N>/ (the first driver's are records/ itself); if the running
# driver is still running at the end of the wait, it says so and starts nothing. The same flags again only wait.
#
# Expects, in the checkout (ignored by git, carried to the machine: name `.gpu` in every call's carry):
# .gpu/whl/*.whl, .gpu/fallback/*.whl (the flax/optax/orbax/chex the CPU suite runs with, used only if the
# machine's own fail the preflight), .gpu/data/{ptb,wikitext2} (WT_JAX_DATA, if set, wins) and .gpu/commit +
# .gpu/source (experiments/gpu/prepare.sh). WT_GPU_ROOT (default /tmp/wt_gpu) is the machine's scratch folder.
# Leaves in OUT_DIR: records.tgz (every driver's env.json, status.json, and per job results.json, run.json,
# curve.jsonl, metrics.jsonl, log.txt; a members job's run.json, summary.json, log.txt and members/<k>/ with each
# member's results.json, run.json, metrics.jsonl and curve.jsonl; no checkpoints), the latest driver's
# status.json, and driver.log.
set -u
cd "$(dirname "$0")/../.."
WAIT_S=$1
OUT_DIR=$2
shift 2
. experiments/gpu/setup.sh  # ROOT (WT_GPU_ROOT or /tmp/wt_gpu), the carried wheels, the environment
mkdir -p "$OUT_DIR"

records_dir() { cat "$ROOT/records_dir" 2>/dev/null || echo "$ROOT/records"; }  # the latest driver's
pack() {
  local rec; rec=$(records_dir)
  for f in "$ROOT"/driver*.log; do [ -f "$f" ] && cp "$f" "$ROOT/records/$(basename "$f")"; done
  [ -f "$ROOT/preflight.log" ] && cp "$ROOT/preflight.log" "$ROOT/records/preflight.log"
  tar czf "$OUT_DIR/records.tgz.tmp" -C "$ROOT" records && mv "$OUT_DIR/records.tgz.tmp" "$OUT_DIR/records.tgz"
  cp "$rec/status.json" "$OUT_DIR/status.json" 2>/dev/null
  tail -n 40 "$(cat "$ROOT/driver_log" 2>/dev/null)" > "$OUT_DIR/driver.log" 2>/dev/null
}
running() { [ -f "$ROOT/driver.pid" ] && kill -0 "$(cat "$ROOT/driver.pid")" 2>/dev/null; }

mkdir -p "$ROOT/records"
if [ ! -f "$ROOT/preflight.ok" ] && [ $# -gt 0 ]; then
  date -u +"%FT%TZ setup" | tee "$ROOT/preflight.log"
  nvidia-smi >>"$ROOT/preflight.log" 2>&1
  # Preflight: the whole path on the device at tiny shapes, with the machine's own flax/optax/orbax; if that
  # fails, again with the versions the CPU suite runs with.
  preflight() {
    rm -rf "$ROOT/pre"
    timeout 300 python3 -m experiments.gpu.run_queue --dry_run --jobs=small_tied --parallel=1 --budget_s=240 \
      --min_start_s=1 --expect_backend="${WT_GPU_BACKEND:-gpu}" --run_dir="$ROOT/pre/runs" \
      --record_dir="$ROOT/pre/records" >>"$ROOT/preflight.log" 2>&1 &&
      grep -q '"small_tied": "finished"' "$ROOT/preflight.log"
  }
  if ! preflight; then
    echo "preflight failed with the machine's packages: $(tail -n 1 "$ROOT/preflight.log" | cut -c 1-300)"
    echo "retrying with .gpu/fallback" | tee -a "$ROOT/preflight.log"
    tail -n 30 "$ROOT/pre/runs/small_tied/log.txt" >>"$ROOT/preflight.log" 2>/dev/null
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$ROOT/site" \
      .gpu/fallback/*.whl >>"$ROOT/preflight.log" 2>&1
    preflight || { echo "preflight failed: $(tail -n 1 "$ROOT/preflight.log" | cut -c 1-300)"; \
                   tail -n 60 "$ROOT/preflight.log"; tail -n 40 "$ROOT/pre/runs/small_tied/log.txt" 2>/dev/null; \
                   exit 1; }
  fi
  cat "$ROOT/pre/records/env.json" >>"$ROOT/preflight.log"
  date -u +"%FT%TZ preflight passed" | tee -a "$ROOT/preflight.log"
  touch "$ROOT/preflight.ok"
fi

if [ $# -gt 0 ]; then
  if running && [ "$*" = "$(cat "$ROOT/driver.args" 2>/dev/null)" ]; then
    echo "the driver started with these flags is running: waiting for it"
  else
    # every job's config and corpus, before anything starts (one line if one is wrong or missing)
    python3 -m experiments.gpu.run_queue --check_jobs "$@" >"$ROOT/check_jobs.log" 2>&1 ||
      { echo "jobs refused: $(tail -n 1 "$ROOT/check_jobs.log" | cut -c 1-400)"; exit 1; }
    if running; then
      echo "a driver started with other flags is running ($(cat "$ROOT/driver.args")): waiting for it to end"
      while running && [ $SECONDS -lt "$WAIT_S" ]; do sleep 2; done
    fi
    if running; then
      echo "that driver is still running at the end of this call's wait: nothing started for: $*"
    else
      n=$(( $(cat "$ROOT/drivers" 2>/dev/null || echo 0) + 1 ))
      rec="$ROOT/records"; [ "$n" -gt 1 ] && rec="$ROOT/records/driver$n"
      mkdir -p "$rec"
      echo "$n" >"$ROOT/drivers"; echo "$rec" >"$ROOT/records_dir"; echo "$*" >"$ROOT/driver.args"
      echo "$ROOT/driver$n.log" >"$ROOT/driver_log"
      setsid nohup python3 -m experiments.gpu.run_queue --run_dir="$ROOT/runs" --record_dir="$rec" \
        --expect_backend="${WT_GPU_BACKEND:-gpu}" "$@" >"$ROOT/driver$n.log" 2>&1 </dev/null &
      echo $! >"$ROOT/driver.pid"
      echo "driver $n started: $*"
    fi
  fi
elif [ ! -f "$ROOT/driver.pid" ]; then
  echo "no driver on this machine and no flags to start one"
  exit 2
fi

if [ -n "${EXTEND_TO:-}" ]; then
  rec=$(records_dir)
  echo $(( $(date +%s) + EXTEND_TO )) >"$rec/deadline_at.tmp" && mv "$rec/deadline_at.tmp" "$rec/deadline_at"
fi
pid=$(cat "$ROOT/driver.pid")
n=0
while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt "$WAIT_S" ]; do  # (SECONDS: since this script started)
  sleep 5
  n=$((n + 1))
  if [ $((n % 12)) -eq 0 ]; then  # a line a minute: each job's latest progress
    for f in "$ROOT"/runs/*/log.txt; do  # (not a folder moved aside: <job>.<precision>.abandoned[.<n>] of a
      # restarted job, <job>.set_aside[.<n>] of a record not the job's)
      case ${f%/log.txt} in *.abandoned | *.abandoned.* | *.set_aside | *.set_aside.*) continue ;; esac
      echo "$(basename "$(dirname "$f")"): $(grep -E 'epoch [0-9]+ (step|done)' "$f" | tail -n 1 | cut -c 1-220)"
    done
  fi
  [ $((n % 6)) -eq 0 ] && pack
done
pack
kill -0 "$pid" 2>/dev/null && echo "driver still running" || echo "driver finished"
[ -s "$OUT_DIR/driver.log" ] && grep -v '^{' "$OUT_DIR/driver.log" | grep -iE 'error|refused|failed|set_aside|backend' |
  tail -n 3
cat "$OUT_DIR/status.json" 2>/dev/null | python3 -c "
import json, sys
s = json.load(sys.stdin)
print('elapsed', s['elapsed_s'], 'deadline', s['deadline_s'], 'done', s['done'], s.get('events'))
for j in s['jobs']:
  print(j['label'], j['state'], j['matmul_precision'], j.get('wall_s'),
        [e for e in j['events'] if e['event'] != 'start'][-3:])
"
rec=$(records_dir)
[ ! -f "$rec/probe.json" ] || python3 -c "
import json; p = json.load(open('$rec/probe.json'))
print('probe', p['config'], 'chosen', p.get('chosen'))
for k, v in p['variants'].items():
  print(' ', k, v.get('train_ms_per_step'), v.get('train_ms_per_step_all'), v.get('compile_s'),
        (v.get('warmup_nll') or [None])[0], v.get('error'))
"
exit 0
