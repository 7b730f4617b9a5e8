#!/usr/bin/env bash
# One GPU window's measurements, in one device call: the GPU-vs-CPU train-step test, then for each config
# `experiments.bench` interleaved with its PyTorch reference on the same card (same precision on both sides),
# then ours alone with other recurrence settings. Stops starting new work after BUDGET_S seconds.
#
#   git rev-parse HEAD > .gpu/commit; cp ../shared/bench/torch_*.py .gpu/bench/     # here, before the call
#   bash experiments/gpu_bench.sh BUDGET_S OUT_DIR [PRECISION] [CONFIGS...]
#
# PRECISION: tensorfloat32 (default) or float32. CONFIGS default: small_tied large_tied large_bd_wd_tied
# rhn_tied. BENCH_FLAGS (environment) is appended to every bench command (a CPU smoke run:
# BENCH_FLAGS="--config.hidden_size=32 --steps=2 --warmup=1 --repeats=1 --eval_windows=2"). Writes
# OUT_DIR/bench.jsonl (one JSON line per measurement, as it finishes), OUT_DIR/numerics.log and
# OUT_DIR/bench.log. NUMERICS=0 (environment) skips the GPU-vs-CPU test (about 100 s on an H200). PyTorch:
# the machine's python3; each config's reference (bench.torch_reference): .gpu/bench/torch_small_lm.py
# (cuDNN's LSTM), .gpu/bench/torch_rhn_lm.py beside it, and experiments/bench_helpers/torch_vd_lstm.py for
# the BD rows.
set -u
cd "$(dirname "$0")/.."
BUDGET_S=$1
OUT_DIR=$2
PRECISION=${3:-tensorfloat32}
shift $(($# < 3 ? $# : 3))
CONFIGS=${*:-small_tied large_tied large_bd_wd_tied rhn_tied}
. experiments/gpu_setup.sh
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/bench.log"
left() { [ $SECONDS -lt "$BUDGET_S" ]; }
record() {  # record NAME CMD...: the command's last JSON line, tagged, appended to bench.jsonl
  local name=$1; shift
  local t0=$SECONDS line
  echo "$(date -u +%FT%TZ) $name: $*" >>"$LOG"
  line=$("$@" 2>>"$LOG" | grep '^{' | tail -n 1)
  [ -z "$line" ] && line='{"error": "no output; see bench.log"}'
  echo "{\"name\": \"$name\", \"wall_s\": $((SECONDS - t0)), \"result\": $line}" >>"$OUT_DIR/bench.jsonl"
  echo "$name ($((SECONDS - t0)) s): $(echo "$line" | cut -c 1-300)"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT_DIR/device.txt"
if [ "${NUMERICS:-1}" != 0 ]; then
  timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_numerics.py -s >"$OUT_DIR/numerics.log" 2>&1
  tail -n 15 "$OUT_DIR/numerics.log"
fi

common=(--config.matmul_precision="$PRECISION" --peak=false --steps=100 --warmup=10 --repeats=3 --eval_windows=50
        ${BENCH_FLAGS:-})
for c in $CONFIGS; do
  left || { echo "budget spent before $c"; break; }
  record "$c interleaved" timeout 300 python3 -m experiments.bench --config="configs/$c.py" "${common[@]}" \
    --torch_python=python3 --torch_script=.gpu/bench/torch_small_lm.py --rounds=2
done
for c in $CONFIGS; do  # the recurrence settings: one time step per loop trip, the whole window (no time
  # loop; the LSTMs' automatic choice on a GPU, so for them a repeat), command buffers over the loops
  for v in "1 " "35 " "1 --xla_gpu_enable_command_buffer=+WHILE"; do
    left || break 2
    set -- $v
    XLA_FLAGS="${2:-}" record "$c unroll $1 ${2:-}" timeout 120 python3 -m experiments.bench \
      --config="configs/$c.py" "${common[@]}" --config.scan_unroll="$1"
  done
done
echo "done at $SECONDS s"
