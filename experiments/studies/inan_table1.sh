#!/usr/bin/env bash
# Train Inan et al.'s Table 1 small PTB rows with Appendix A's settings (the keep reading of its dropout),
# each followed by footnote 4's second training session, one row after another.
#
#   bash experiments/studies/inan_table1.sh [ROW ...]      # ROW: vd al re real (default: all four)
#   SEED=1 bash experiments/studies/inan_table1.sh real    # a further seed: workdirs small_V_keep_seed1[_s2]
#
# Per row V, with RUNS_DIR (default runs/inan_appA) and REPORT=results/inan_ptb_table1:
#   1. first session   python -m experiments.ptb --config=configs/inan.py:small,V \
#                          --workdir=RUNS_DIR/small_V_keep
#   2. its final parameters, as they are (`experiments.export --convert=copy`), into RUNS_DIR/small_V_keep/init_s2;
#   3. second session  python -m experiments.ptb --config=configs/inan.py:small,V \
#                          --config.name=inan_small_V_keep_s2 --config.init_from=RUNS_DIR/small_V_keep/init_s2 \
#                          --workdir=RUNS_DIR/small_V_keep_s2
#      (the same schedule restarted from the first session's final state).
# After each session, `python -m experiments.report inan_ptb_table1 --runs=RUNS_DIR` copies the finished runs'
# small outputs into REPORT and rebuilds the table. Re-running the script resumes an unfinished session from
# its last checkpoint and skips finished ones. The parameters (up to 18.6 MB) are not committed: when a
# second session is still to run and the first session's workdir is gone (another machine), the first session
# is trained again (the same seed and commands) to give the second its start.
set -u
RUNS_DIR=${RUNS_DIR:-runs/inan_appA}
SEED=${SEED:-0}
REPORT=results/inan_ptb_table1
ROWS=("$@")
[[ ${#ROWS[@]} -eq 0 ]] && ROWS=(vd al re real)
mkdir -p "$RUNS_DIR"

finished() {  # finished RUN_NAME: its results.json is in the workdir or already in the report
  [[ -f "$RUNS_DIR/$1/results.json" || -f "$REPORT/$1/results.json" ]]
}

train() {  # train RUN_NAME ARGS...: train (or resume) unless its workdir holds a results.json
  local name=$1; shift
  if [[ -f "$RUNS_DIR/$name/results.json" ]]; then echo "skip $name (finished)"; return 0; fi
  echo "$(date -u +%FT%TZ) start $name"
  python -m experiments.ptb "$@" --workdir="$RUNS_DIR/$name" --alsologtostderr >>"$RUNS_DIR/$name.log" 2>&1
  local rc=$?
  echo "$(date -u +%FT%TZ) exit $rc $name"
  [[ $rc -eq 0 ]] && python -m experiments.report inan_ptb_table1 --runs="$RUNS_DIR"
  return $rc
}

for v in "${ROWS[@]}"; do
  first=small_${v}_keep$([[ $SEED == 0 ]] || echo "_seed$SEED")
  init=$RUNS_DIR/$first/init_s2
  if finished "${first}_s2"; then echo "skip $first and ${first}_s2 (finished)"; continue; fi
  if [[ ! -f "$init/params.npz" ]]; then
    train "$first" --config="configs/inan.py:small,$v" --config.seed="$SEED" || exit 1
    python -m experiments.export --workdir="$RUNS_DIR/$first" --convert=copy --out="$init" || exit 1
  fi
  train "${first}_s2" --config="configs/inan.py:small,$v" --config.seed="$SEED" \
      --config.name="inan_small_${v}_keep_s2" --config.init_from="$init" || exit 1
done
