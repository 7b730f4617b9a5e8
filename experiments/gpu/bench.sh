#!/usr/bin/env bash
# One GPU window's measurements, in one device call: the GPU tests (GPU-vs-CPU train step, deterministic runs
# bit for bit), then the sections named in SECTIONS (default all, in this order):
#   determinism  the cost of XLA:GPU's deterministic kernels: each of DET_CONFIGS (default large_bd_wd_tied
#                rhn_tied) timed with them off and on, alternately, DET_ROUNDS rounds (default 2;
#                `deterministic off|on` lines)
#   interleaved  each config's `experiments.bench` interleaved with its PyTorch reference on the same card
#                (same precision on both sides; the references time their loop whole, as bench times ours)
#   compiled     rhn_tied against `torch_rhn_lm.py --compile reduce-overhead` (PyTorch's fused, CUDA-graphed
#                RHN), interleaved
#   unroll       ours alone with other recurrence settings
#   profile      a jax.profiler trace of a few train steps of each config (experiments.ptb
#                --config.profile_steps), packed as OUT_DIR/profiles.tgz (TensorBoard's profile plugin reads it)
#   members      K models in one program (wt_jax.members): each of MEMBERS_CONFIGS timed by `experiments.bench
#                --members_sweep=MEMBERS_K --rounds=MEMBERS_ROUNDS` (each K in its own process, interleaved; its ms
#                per step and its ratio to one model alone), one `<config> members` line each
#   word2vec     the skip-gram trainer's words/s on the card (no gensim there; its CPU comparison is
#                results/word2vec_speed/), untied and tied: word2vec.c's pairs step (the default), and the
#                windows step with noise a window at the CPU's shape (64 centres, 512 steps a call) and at 1,024
#                centres, 64 steps a call; W2V_FLAGS (environment) is appended (a smoke run: --w2v_epochs=1)
# Stops starting new work after BUDGET_S seconds.
#
#   bash experiments/gpu/prepare.sh                                                 # here, before the call
#   bash experiments/gpu/bench.sh BUDGET_S OUT_DIR [PRECISION] [CONFIGS...]
#
# PRECISION: tensorfloat32 (default) or float32. CONFIGS default: small_tied large_tied large_bd_wd_tied
# rhn_tied. BENCH_FLAGS (environment) is appended to every bench command (a CPU smoke run:
# BENCH_FLAGS="--config.hidden_size=32 --steps=2 --warmup=1 --repeats=1 --eval_windows=2"). Writes
# OUT_DIR/bench.jsonl (one JSON line per measurement, as it finishes), OUT_DIR/numerics.log and
# OUT_DIR/bench.log. NUMERICS=0 (environment) skips the GPU tests (the GPU-vs-CPU step took about 100 s on an
# H200; the determinism test runs 4 short processes); NUMERICS_K picks some by pytest's -k. PyTorch:
# the machine's python3; each config's reference (bench.torch_reference): .gpu/bench/torch_small_lm.py
# (cuDNN's LSTM), .gpu/bench/torch_rhn_lm.py beside it, and experiments/bench_helpers/torch_vd_lstm.py for
# the BD rows.
# The members section: MEMBERS_CONFIGS (default configs/inan.py:medium,vd, the config the next Inan jobs train
# two seeds of; a name without '/' is configs/NAME.py, a file may take its argument: configs/inan.py:medium,vd),
# MEMBERS_K (default 0,2: 0 is one model alone, the baseline), MEMBERS_ROUNDS (default 2), MEMBERS_FLAGS
# (default --steps=50 --warmup=10 --repeats=3). Each K's process costs its start and compilation (about 20-40 s
# on a GPU) and 160 steps (at most K times one model's step), so the default, 2 K x 2 rounds = 4 processes, should
# take about 2 minutes on an H200 (an estimate, not yet measured); e.g. MEMBERS_CONFIGS="small_tied
# configs/inan.py:medium,vd rhn_tied large_tied medium_tied" MEMBERS_K=0,1,2,4,8 is 50 processes, 17-33 min.
# A CPU smoke run:
# SECTIONS=members NUMERICS=0 BENCH_FLAGS="--config.hidden_size=16 --steps=2 --warmup=1 --repeats=1".
set -u
cd "$(dirname "$0")/../.."
BUDGET_S=$1
OUT_DIR=$2
PRECISION=${3:-tensorfloat32}
shift $(($# < 3 ? $# : 3))
CONFIGS=${*:-small_tied large_tied large_bd_wd_tied rhn_tied}
SECTIONS=${SECTIONS:-determinism interleaved compiled unroll profile members word2vec}
DET_CONFIGS=${DET_CONFIGS:-large_bd_wd_tied rhn_tied}
want() { case " $SECTIONS " in *" $1 "*) return 0 ;; esac; return 1; }
. experiments/gpu/setup.sh
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
  JAX_PLATFORMS=cuda,cpu timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_numerics.py -s \
    ${NUMERICS_K:+-k "$NUMERICS_K"} \
    >"$OUT_DIR/numerics.log" 2>&1
  tail -n 15 "$OUT_DIR/numerics.log"
fi

common=(--config.matmul_precision="$PRECISION" --peak=false --steps=100 --warmup=10 --repeats=3 --eval_windows=50
        ${BENCH_FLAGS:-})
if want determinism; then
  DET=$(python3 -c "from experiments import xla_flags_with_determinism as f; print(f('', True))")
  for c in $DET_CONFIGS; do
    for round in $(seq 1 "${DET_ROUNDS:-2}"); do  # off and on alternately: drift of the card's clock falls on both
      for det in off on; do
        left || break 3
        flags=""; [ $det = on ] && flags=$DET
        XLA_FLAGS="$flags" record "$c deterministic $det round $round" timeout 200 python3 -m experiments.bench \
          --config="configs/$c.py" "${common[@]}"
      done
    done
  done
fi
if want interleaved; then
  for c in $CONFIGS; do
    left || { echo "budget spent before $c"; break; }
    record "$c interleaved" timeout 300 python3 -m experiments.bench --config="configs/$c.py" "${common[@]}" \
      --torch_python=python3 --torch_script=.gpu/bench/torch_small_lm.py --rounds=2
  done
fi
if want compiled && left; then  # the reference's --compile through bench's flags: a wrapper that adds it
  cat >"$ROOT/torch_rhn_compiled.py" <<PY
import runpy, sys
script = "$PWD/.gpu/bench/torch_rhn_lm.py"
help_asked = "-h" in sys.argv or "--help" in sys.argv
sys.argv = [script] + sys.argv[1:] + ([] if help_asked else ["--compile", "reduce-overhead"])
runpy.run_path(script, run_name="__main__")
PY
  record "rhn_tied interleaved torch.compile reduce-overhead" timeout 400 python3 -m experiments.bench \
    --config=configs/rhn_tied.py "${common[@]}" --torch_python=python3 --torch_script="$ROOT/torch_rhn_compiled.py" \
    --rounds=2
fi
if want unroll; then
  for c in $CONFIGS; do  # the recurrence settings: one time step per loop trip, the whole window (no time
    # loop; the LSTMs' automatic choice on a GPU, so for them a repeat), command buffers over the loops
    for v in "1 " "35 " "1 --xla_gpu_enable_command_buffer=+WHILE"; do
      left || break 2
      set -- $v
      XLA_FLAGS="${2:-}" record "$c unroll $1 ${2:-}" timeout 120 python3 -m experiments.bench \
        --config="configs/$c.py" "${common[@]}" --config.scan_unroll="$1"
    done
  done
fi
if want profile; then
  rm -rf "$ROOT/profiles"
  for c in $CONFIGS; do  # a trace of 5 steps after the first (compilation), then stop; no test
    left || break
    echo "$(date -u +%FT%TZ) profile $c" >>"$LOG"
    timeout 200 python3 -m experiments.ptb --config="configs/$c.py" --workdir="$ROOT/profiles/$c" \
      --config.matmul_precision="$PRECISION" --config.profile_steps=5 --config.max_steps=20 \
      --config.eval_max_tokens=2000 --config.checkpoint_every_steps=0 --config.checkpoint_every_epochs=0 \
      --config.plot=false --config.eval_train=false ${PROFILE_FLAGS:-} >>"$LOG" 2>&1 && echo "profile $c: done" ||
      echo "profile $c: failed (bench.log)"
  done
  [ -d "$ROOT/profiles" ] && tar czf "$OUT_DIR/profiles.tgz" -C "$ROOT" \
    $(cd "$ROOT" && ls -d profiles/*/profile 2>/dev/null)
fi
if want members; then
  MEMBERS_K=${MEMBERS_K:-0,2}
  MEMBERS_ROUNDS=${MEMBERS_ROUNDS:-2}
  processes=$(( $(echo "$MEMBERS_K" | tr ',' '\n' | grep -c .) * MEMBERS_ROUNDS ))
  for c in ${MEMBERS_CONFIGS:-configs/inan.py:medium,vd}; do
    left || { echo "budget spent before the members sweep of $c"; break; }
    case $c in */*) cfg=$c ;; *) cfg="configs/$c.py" ;; esac
    # (no matmul peak, no evaluation: the train step alone; flags given later win, so BENCH_FLAGS can shrink it)
    record "$c members $MEMBERS_K" timeout $((60 * processes + 60)) python3 -m experiments.bench --config="$cfg" \
      --config.matmul_precision="$PRECISION" --peak=false --eval_windows=0 --members_sweep="$MEMBERS_K" \
      --rounds="$MEMBERS_ROUNDS" ${MEMBERS_FLAGS:---steps=50 --warmup=10 --repeats=3} ${BENCH_FLAGS:-}
  done
fi
if want word2vec; then
  windows="--config.batching=windows --config.shared_negatives=true"
  for t in untied tied; do
    for step in "" "$windows --config.batch_size=64 --config.steps_per_call=512" \
        "$windows --config.batch_size=1024 --config.steps_per_call=64"; do
      left || break 2
      record "w2v_$t ${step:-pairs}" timeout 200 python3 -m experiments.bench --config="configs/w2v_$t.py" $step \
        ${W2V_FLAGS:-}
    done
  done
fi
echo "done at $SECONDS s"
