#!/usr/bin/env bash
# Train the cells of the softmax-approximation study (wt_jax/softmax.py; BUILD_NOTES §23): Press & Wolf's
# small Table 6 model on PTB, tied and untied, trained with each approximation of the full softmax. The
# full-softmax cells are Table 6's own runs (results/ptb_table6).
#
#   bash experiments/studies/softmax_study.sh [RUNS_DIR] [KIND ...]   # default runs/softmax_study, kinds sampled nce class
#   bash experiments/studies/softmax_study.sh --bench [OUT]            # the bench line (default OUT: results/softmax_study/bench.jsonl)
#
# Each run is `python -m experiments.ptb --config=configs/<name>.py --config.softmax.kind=<kind> --config.seed=<seed>`
# with its own workdir RUNS_DIR/<name>_<kind>_seed<seed> and log beside it; the tied and the untied run of a
# kind go side by side (two queues). Re-running resumes unfinished runs and skips finished ones. Then
# `python -m experiments.report softmax_study --runs=RUNS_DIR` copies the small outputs into
# results/softmax_study/ and rebuilds the table.
set -u
if [[ "${1:-}" == "--bench" ]]; then
  # Each softmax's train step of configs/small_tied.py (tied, 20 × 20 windows of PTB), 3 interleaved rounds of
  # 3 × 100 timed steps: run it on an otherwise idle machine; one JSON line per kind and round.
  OUT=${2:-results/softmax_study/bench.jsonl}
  mkdir -p "$(dirname "$OUT")"
  for round in 1 2 3; do
    for kind in full sampled nce class; do
      python -m experiments.bench --config=configs/small_tied.py --config.softmax.kind="$kind" --steps=100 \
          --repeats=3 --warmup=20 --eval_windows=0 2>/dev/null | tail -n 1 | \
          python -c "import json, sys; r = json.loads(sys.stdin.read()); r['round'] = $round; print(json.dumps(r))" >>"$OUT"
    done
  done
  exit 0
fi
RUNS_DIR=${1:-runs/softmax_study}
shift || true
KINDS=${*:-sampled nce class}
mkdir -p "$RUNS_DIR"

run() {  # run NAME KIND SEED
  local wd="$RUNS_DIR/$1_$2_seed$3"
  if [[ -f "$wd/results.json" ]]; then echo "skip $wd (finished)"; return 0; fi
  echo "$(date -u +%FT%TZ) start $wd"
  python -m experiments.ptb --config="configs/$1.py" --config.softmax.kind="$2" --config.seed="$3" \
      --workdir="$wd" --alsologtostderr >>"$wd.log" 2>&1
  echo "$(date -u +%FT%TZ) exit $? $wd"
}

for kind in $KINDS; do
  ( run small_tied "$kind" 0 ) &
  ( run small "$kind" 0 ) &
  wait
done
