# Sourced by experiments/gpu/window.sh and experiments/gpu/bench.sh on a lent GPU machine (run from the
# checkout's root): the packages the machine lacks (carried as wheels in .gpu/whl), the corpora (.gpu/data),
# the commit the records name (.gpu/commit and .gpu/source, stamped here before the call by
# experiments/gpu/prepare.sh), and several runs sharing the card.
ROOT=${WT_GPU_ROOT:-/tmp/wt_gpu}  # the machine's scratch: installed wheels, runs, records
mkdir -p "$ROOT"
export PYTHONPATH="$ROOT/site:$PWD" WT_JAX_DATA="${WT_JAX_DATA:-$PWD/.gpu/data}" PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # several processes share the card: allocate as needed
if [ ! -f "$ROOT/site/.installed" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$ROOT/site" .gpu/whl/*.whl \
    >>"$ROOT/setup.log" 2>&1 || { echo "wheel install failed"; cat "$ROOT/setup.log"; exit 1; }
  touch "$ROOT/site/.installed"
fi
# The copy's .git may not be this tree's: the stamped commit, "+dirty" if the copy's code differs from the
# stamp (experiments.gpu.provenance.commit_of).
if [ -f .gpu/commit ]; then
  WT_JAX_COMMIT="$(python3 -c 'from pathlib import Path; from experiments.gpu.provenance import commit_of
print(commit_of(Path(".gpu")))')" || { echo "cannot read the stamped commit in .gpu"; exit 1; }
  export WT_JAX_COMMIT
  echo "code: $WT_JAX_COMMIT"
fi
