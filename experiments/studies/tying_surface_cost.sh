#!/usr/bin/env bash
# What a cell of the tying surface costs on this machine, before its runs are sized to sessions: each CELL
# (configs/tying_surface.py's ARM,D,VOCAB) trained for STEPS steps (default 150) with a progress record every 25,
# validation and test cut to 2,000 tokens; its record's median steps/s after the first record (which holds the
# compilation), the steps an epoch and the parameters, one JSON line a cell in RUNS_DIR/cost.jsonl.
#
#   bash experiments/studies/tying_surface_cost.sh [RUNS_DIR] CELL ...     # RUNS_DIR default runs/tying_surface
set -u
RUNS_DIR=${1:-runs/tying_surface}
shift || true
STEPS=${STEPS:-150}
source "$(dirname "$0")/wikitext2_text.sh"
link_wikitext2_text "$RUNS_DIR"
status=0
for cell in "$@"; do
  wd="$RUNS_DIR/cost/${cell//,/_}"
  rm -rf "$wd"
  mkdir -p "$wd"
  python -m experiments.ptb --config="configs/tying_surface.py:$cell" --config.data_dir="$TEXT" \
      --config.max_steps="$STEPS" --config.log_every=25 --config.eval_max_tokens=2000 --config.plot=false \
      --workdir="$wd" >"$wd.log" 2>&1 || { status=$?; echo "exit $status $cell"; continue; }
  python - "$wd" "$cell" >>"$RUNS_DIR/cost.jsonl" <<'PY'
import json, platform, statistics, sys
wd, cell = sys.argv[1], sys.argv[2]
train = [json.loads(l) for l in open(f"{wd}/metrics.jsonl") if '"kind": "train"' in l]
result, config = json.load(open(f"{wd}/results.json")), json.load(open(f"{wd}/run.json"))["config"]
rates = [r["steps_per_s"] for r in train[1:]]
print(json.dumps({"cell": cell, "steps_per_s": statistics.median(rates), "records": len(rates),
                  "steps_per_epoch": result["steps_per_epoch"], "epochs": config["num_epochs"],
                  "num_params": result["num_params"], "vocab_size": config["vocab_size"],
                  "hidden_size": config["hidden_size"], "host": result["host"], "versions": result["versions"]}))
PY
done
exit $status
