#!/usr/bin/env bash
# Train the tied-Transformer embedding-scale study (configs/transformer.py), one cell after another.
#
#   bash experiments/studies/transformer_study.sh [MODE,SCALE[,DATASET] ...]   # default: the nine PTB cells below
#   SEED=1 bash experiments/studies/transformer_study.sh tied,none tied,sqrt_d  # a further seed of two cells
#
# Each cell is `python -m experiments.ptb --config=configs/transformer.py:MODE,SCALE[,DATASET]
# --config.seed=SEED --workdir=RUNS_DIR/NAME`, logged to RUNS_DIR/NAME.log, with NAME ptb_MODE_SCALE (or
# wikitext2_MODE_SCALE) and `_seedN` appended for SEED ≠ 0. RUNS_DIR is runs/transformer for PTB and
# runs/transformer_wikitext2 for WikiText-2 (one report per corpus). After each cell,
# `python -m experiments.report transformer_DATASET --runs=RUNS_DIR` copies the finished runs' small outputs
# into results/transformer_DATASET and rebuilds the table. Re-running the script resumes an unfinished cell
# from its last checkpoint and skips finished ones (a results.json in the workdir or in the report). One PTB
# cell is ≈ 45 min on 2 CPU cores with another run beside it (BUILD_NOTES §20). The untied √D cell follows
# the tied one so that both workdirs are at hand for Press & Wolf's Tables 3–4 (`experiments.embeddings`).
set -u
SEED=${SEED:-0}
CELLS=("$@")
[[ ${#CELLS[@]} -eq 0 ]] && CELLS=(tied,none tied,sqrt_d untied,sqrt_d tied,logits tied,t5 untied,none untied,logits
                                    tied_projection,none tied,t5_steps)

for cell in "${CELLS[@]}"; do
  IFS=, read -r mode scale dataset <<<"$cell"
  dataset=${dataset:-ptb}
  runs_dir=runs/transformer$([[ $dataset == ptb ]] || echo "_$dataset")
  report=transformer_$dataset
  name=${dataset}_${mode}_${scale}$([[ $SEED == 0 ]] || echo "_seed$SEED")
  mkdir -p "$runs_dir"
  if [[ -f "$runs_dir/$name/results.json" || -f "results/$report/$name/results.json" ]]; then
    echo "skip $name (finished)"; continue
  fi
  echo "$(date -u +%FT%TZ) start $name"
  python -m experiments.ptb --config="configs/transformer.py:$cell" --config.seed="$SEED" \
      --workdir="$runs_dir/$name" --alsologtostderr >>"$runs_dir/$name.log" 2>&1
  rc=$?
  echo "$(date -u +%FT%TZ) exit $rc $name"
  [[ $rc -eq 0 ]] || exit $rc
  python -m experiments.report "$report" --runs="$runs_dir"
done
