#!/usr/bin/env bash
# Train the tied-Transformer embedding-scale study on PTB (configs/transformer.py), one cell after another.
#
#   bash experiments/transformer_study.sh [MODE,SCALE ...]     # default: the eight cells below, in order
#
# Each cell is `python -m experiments.ptb --config=configs/transformer.py:MODE,SCALE
# --workdir=RUNS_DIR/ptb_MODE_SCALE` (RUNS_DIR default runs/transformer), logged to RUNS_DIR/ptb_MODE_SCALE.log.
# After each cell, `python -m experiments.report transformer_ptb --runs=RUNS_DIR` copies the finished runs'
# small outputs into results/transformer_ptb and rebuilds the table. Re-running the script resumes an
# unfinished cell from its last checkpoint and skips finished ones (a results.json in the workdir or in
# results/transformer_ptb). One cell is ≈ 50 min on 2 CPU cores (BUILD_NOTES §20). The untied √D cell follows
# the tied one so that both workdirs are at hand for Press & Wolf's Tables 3–4 (`experiments.embeddings`).
set -u
RUNS_DIR=${RUNS_DIR:-runs/transformer}
REPORT=results/transformer_ptb
CELLS=("$@")
[[ ${#CELLS[@]} -eq 0 ]] && CELLS=(tied,none tied,sqrt_d untied,sqrt_d tied,logits tied,t5 untied,none untied,logits
                                    tied_projection,none)
mkdir -p "$RUNS_DIR"

for cell in "${CELLS[@]}"; do
  name=ptb_${cell/,/_}
  if [[ -f "$RUNS_DIR/$name/results.json" || -f "$REPORT/$name/results.json" ]]; then
    echo "skip $name (finished)"; continue
  fi
  echo "$(date -u +%FT%TZ) start $name"
  python -m experiments.ptb --config="configs/transformer.py:$cell" --workdir="$RUNS_DIR/$name" \
      --alsologtostderr >>"$RUNS_DIR/$name.log" 2>&1
  rc=$?
  echo "$(date -u +%FT%TZ) exit $rc $name"
  [[ $rc -eq 0 ]] || exit $rc
  python -m experiments.report transformer_ptb --runs="$RUNS_DIR"
done
