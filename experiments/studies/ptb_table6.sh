#!/usr/bin/env bash
# Train the runs behind Press & Wolf's Table 6 (small, no-dropout PTB models) in two parallel queues.
#
#   bash experiments/studies/ptb_table6.sh [RUNS_DIR]      # default RUNS_DIR=runs/ptb_table6
#
# Each run is `python -m experiments.ptb --config=configs/<name>.py --config.seed=<seed>` with its own workdir
# RUNS_DIR/<name>_seed<seed> and log RUNS_DIR/<name>_seed<seed>.log. Re-running the script resumes every
# unfinished run from its last checkpoint and skips the finished ones (those with a results.json).
# Then `python -m experiments.report ptb_table6 --runs=RUNS_DIR` copies the small outputs into
# results/ptb_table6/ and rebuilds the table and the figure.
set -u
RUNS_DIR=${1:-runs/ptb_table6}
mkdir -p "$RUNS_DIR"

run() {  # run NAME SEED
  local wd="$RUNS_DIR/$1_seed$2"
  if [[ -f "$wd/results.json" ]]; then echo "skip $wd (finished)"; return 0; fi
  echo "$(date -u +%FT%TZ) start $wd"
  python -m experiments.ptb --config="configs/$1.py" --config.seed="$2" --workdir="$wd" \
      --alsologtostderr >>"$wd.log" 2>&1
  echo "$(date -u +%FT%TZ) exit $? $wd"
}

# Two queues of about equal length. Measured here (2 cores): two concurrent runs take ~195 ms/step each,
# one run alone ~106 ms/step, so two queues finish slightly sooner than one.
# `small` seed 1 is there to measure the seed spread of the untied row (its seed 0 test ppl is 2.9 above the paper).
( run small_tied_pr 0; run small_tied 1; run small_pr 0; run small 1 ) &
( run small 0; run small_tied 0; run small_tied_pr 1; run small_pr 1 ) &
wait
