#!/usr/bin/env bash
# The tying surface: Transformer cells of configs/tying_surface.py (ARM,D,VOCAB) on WikiText-2's text, one
# run a cell and seed, one after the other.
#
#   bash experiments/studies/tying_surface.sh [RUNS_DIR] CELL ... [-- EXTRA_FLAGS]   # RUNS_DIR default runs/tying_surface
#   SEEDS="0 1" bash experiments/studies/tying_surface.sh runs/tying_surface tied,128,4000 untied,128,4000
#   SEEDS=0 bash experiments/studies/tying_surface.sh runs/tying_surface tied,64,4000,lr=2e-3,dropout=0.1  # grid point
#   SEEDS=0 MEMBERS=2 bash experiments/studies/tying_surface.sh runs/tying_surface tied,64,4000
#       (seeds 0 and 1 in one program, wt_jax.members: RUNS_DIR/tied_d64_4000_seeds0-1)
#
# The text folder is RUNS_DIR/wikitext2_text: links named train.txt.gz, valid.txt.gz, test.txt.gz to the WikiText-2
# files under $WT_JAX_DATA/wikitext2. Each run is `python -m experiments.ptb --config=configs/tying_surface.py:CELL
# --config.data_dir=RUNS_DIR/wikitext2_text --config.seed=S --workdir=RUNS_DIR/<ARM>_d<D>_<VOCAB>_seed<S>` (a grid
# point's settings in the name before the seed: ..._<VOCAB>_lr2e-3_dropout0.1_seed<S>), logged
# beside its workdir, resumed if unfinished, skipped if finished (a results.json).
set -u
RUNS_DIR=${1:-runs/tying_surface}
shift || true
source "$(dirname "$0")/wikitext2_text.sh"
split_cells "$@" || exit 2
SEEDS=${SEEDS:-0 1}
link_wikitext2_text "$RUNS_DIR"
status=0
for cell in "${CELLS[@]}"; do
  IFS=, read -r arm width vocab settings <<<"$cell"
  settings=${settings//=/}
  train_seeds "$RUNS_DIR/${arm}_d${width}_$vocab${settings:+_${settings//,/_}}" \
      --config="configs/tying_surface.py:$cell" --config.data_dir="$TEXT" "${EXTRA[@]}"
done
exit $status
