#!/usr/bin/env bash
# On a GPU machine, after a window whose jobs were tying-surface cells (jobs_surface.txt): measure the finished
# cells there (experiments.studies.tying_surface_measures: their checkpoints do not come back) and leave
# OUT_DIR/measures.tgz, each cell's measures.json at its path under the run folder, which is its record's path
# under records/.
#
#   bash experiments/gpu/surface_measures.sh OUT_DIR
set -eu
cd "$(dirname "$0")/../.."
. experiments/gpu/setup.sh  # ROOT (WT_GPU_ROOT or /tmp/wt_gpu), the carried wheels, the environment
python3 -m experiments.studies.tying_surface_measures "$ROOT/runs"
(cd "$ROOT/runs" && find . -path '*set_aside*' -prune -o -path '*abandoned*' -prune -o -name measures.json -print |
  tar czf "$1/measures.tgz" -T -)
tar tzf "$1/measures.tgz"
