#!/usr/bin/env bash
# Train the six Multi30k runs behind our version of Press & Wolf's Table 8 (three tying modes × EN→DE, EN→FR),
# one after another (two concurrent runs give no throughput gain on a 2-core CPU).
#
#   bash experiments/studies/nmt_table8.sh [RUNS_DIR]      # default RUNS_DIR=runs/nmt
#
# Each run is `python -m experiments.nmt --config=configs/nmt_multi30k_<mode>.py --config.tgt_lang=<de|fr>`
# with workdir RUNS_DIR/en<tgt>_<mode> and log RUNS_DIR/en<tgt>_<mode>.log. Re-running the script resumes
# unfinished runs after their last finished epoch and skips finished ones (those with a results.json).
set -u
RUNS_DIR=${1:-runs/nmt}
mkdir -p "$RUNS_DIR"
for tgt in de fr; do
  for mode in baseline dec_tied three_way; do
    wd="$RUNS_DIR/en${tgt}_${mode}"
    if [[ -f "$wd/results.json" ]]; then echo "skip $wd (finished)"; continue; fi
    echo "$(date -u +%FT%TZ) start $wd"
    python -m experiments.nmt --config="configs/nmt_multi30k_${mode}.py" --config.tgt_lang="$tgt" \
        --workdir="$wd" --alsologtostderr >>"$wd.log" 2>&1
    echo "$(date -u +%FT%TZ) exit $? $wd"
  done
done
