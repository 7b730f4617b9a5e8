#!/usr/bin/env bash
# Train the small LSTM untied and tied (Press & Wolf's Table 6 rows "small" and "small tied"), then sample from
# each and score with each, and build results/sampling/ from the records.
#
#   bash experiments/studies/sampling_study.sh [RUNS_DIR]      # default RUNS_DIR=runs/sampling, seed 0
#   SEED=1 bash experiments/studies/sampling_study.sh          # a further seed: workdirs <name>_seed1
#
# Training is `python -m experiments.ptb --config=configs/<name>.py --config.seed=SEED --workdir=RUNS_DIR/<name>_seedSEED`
# (both at once; about 75 min on 2 CPU cores), resumed if unfinished, skipped if finished. Then, from each run's
# checkpoint `last` (its final parameters: the ones these configs test, results.json's test_params "final"),
# each prompt below is continued greedily and by three samples at temperature 1 (sampling seed 0), written to
# <run>/samples/ (experiments.generate --output), and the run scores its own test split (with the checkpoint its
# test used) and results/sampling/text.txt, each score's last line written to <run>/scores/. The report copies
# those files with results.json and curve.jsonl into results/sampling/<run>/ and writes the page's tables.
set -uo pipefail
RUNS_DIR=${1:-runs/sampling}
SEED=${SEED:-0}
PROMPTS=("the company said" "the stock market" "in new york")
mkdir -p "$RUNS_DIR"

train() {  # train NAME
  local wd="$RUNS_DIR/$1_seed$SEED"
  if [[ -f "$wd/results.json" ]]; then echo "skip $wd (finished)"; return 0; fi
  python -m experiments.ptb --config="configs/$1.py" --config.seed="$SEED" --workdir="$wd" --alsologtostderr \
      >>"$wd.log" 2>&1
}

use() {  # use NAME: its samples and scores
  local wd="$RUNS_DIR/$1_seed$SEED" i=0
  mkdir -p "$wd/samples" "$wd/scores"
  for prompt in "${PROMPTS[@]}"; do
    python -m experiments.generate --workdir="$wd" --checkpoint=last --prompt="$prompt" --num_samples=1 --max_len=30 \
        --temperature=0 --output="$wd/samples/prompt${i}_greedy.jsonl" || return 1
    python -m experiments.generate --workdir="$wd" --checkpoint=last --prompt="$prompt" --num_samples=3 --max_len=30 \
        --temperature=1 --seed=0 --output="$wd/samples/prompt${i}_t1.jsonl" || return 1
    i=$((i + 1))
  done
  python -m experiments.score --workdir="$wd" --split=test | tail -n 1 >"$wd/scores/test.json" || return 1
  python -m experiments.score --workdir="$wd" --checkpoint=last --text=results/sampling/text.txt | tail -n 1 \
      >"$wd/scores/text.json" || return 1
}

train small & train small_tied & wait
for name in small small_tied; do
  wd="$RUNS_DIR/${name}_seed$SEED"
  [[ -f "$wd/results.json" ]] || { echo "$name did not finish: see $wd.log"; exit 1; }
  use "$name" || exit 1
done
python -m experiments.report sampling --runs="$RUNS_DIR"
