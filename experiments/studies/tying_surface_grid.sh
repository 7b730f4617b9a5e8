#!/usr/bin/env bash
# The tying surface's learning-rate and dropout grid (BUILD_NOTES §79): for each CELL (configs/tying_surface.py's
# ARM,D,VOCAB), every pair of LRS × DROPOUTS as one members run of one seed (wt_jax.members: the points are members
# with their own learning rate and dropout, each named as the cell with lr=…,dropout=… would be, so the report reads
# them as grid points).
#
#   bash experiments/studies/tying_surface_grid.sh [RUNS_DIR] CELL ... [-- EXTRA_FLAGS]   # RUNS_DIR default
#                                                                                           # runs/tying_surface
#   LRS="1e-3 2e-3" DROPOUTS="0.1 0.3" SEED=0 bash experiments/studies/tying_surface_grid.sh runs/tying_surface \
#       untied,64,4000 tied,64,4000                                          # (the defaults)
#
# Each run is `python -m experiments.ptb --config=configs/tying_surface.py:CELL --config.data_dir=RUNS_DIR/
# wikitext2_text --config.members=K --config.member_values="learning_rate=…;dropout=…;seed=S,…;name=…"
# --workdir=RUNS_DIR/grid_<ARM>_d<D>_<VOCAB>_seed<S>`, logged beside its workdir, resumed if unfinished, skipped if
# finished (a results.json).
set -u
RUNS_DIR=${1:-runs/tying_surface}
shift || true
source "$(dirname "$0")/wikitext2_text.sh"
split_cells "$@" || exit 2
LRS=${LRS:-1e-3 2e-3}
DROPOUTS=${DROPOUTS:-0.1 0.3}
SEED=${SEED:-0}
link_wikitext2_text "$RUNS_DIR"
status=0
for cell in "${CELLS[@]}"; do
  IFS=, read -r arm width vocab <<<"$cell"
  lrs=() dropouts=() seeds=() names=()
  for lr in $LRS; do
    for dropout in $DROPOUTS; do
      lrs+=("$lr") dropouts+=("$dropout") seeds+=("$SEED") names+=("surface_${arm}_d${width}_${vocab}_lr${lr}_dropout${dropout}")
    done
  done
  join() { local IFS=,; echo "$*"; }
  wd="$RUNS_DIR/grid_${arm}_d${width}_${vocab}_seed$SEED"
  if [[ -f "$wd/results.json" ]]; then echo "skip $wd (finished)"; continue; fi
  echo "$(date -u +%FT%TZ) start $wd"
  python -m experiments.ptb --config="configs/tying_surface.py:$cell" --config.data_dir="$TEXT" \
      --config.members="${#lrs[@]}" --config.seed="$SEED" --workdir="$wd" --alsologtostderr \
      --config.member_values="learning_rate=$(join "${lrs[@]}");dropout=$(join "${dropouts[@]}");seed=$(join "${seeds[@]}");name=$(join "${names[@]}")" \
      "${EXTRA[@]}" >>"$wd.log" 2>&1 || status=$?
  echo "$(date -u +%FT%TZ) exit $status $wd"
done
exit $status
