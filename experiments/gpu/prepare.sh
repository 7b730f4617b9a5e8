#!/usr/bin/env bash
# Here, before a GPU call (the machine has no network, and ../shared does not travel): fill .gpu/ (ignored by
# git; name it in the call's `carry`) with what the machine needs.
#
#   bash experiments/gpu/prepare.sh        # again before every call: it re-stamps the commit
#
# .gpu/data/{ptb,wikitext2} (from $WT_JAX_DATA or ../shared/data) and .gpu/data/wikitext2_text (WikiText-2's
# files as a folder of text, train/valid/test.txt.gz), .gpu/bench/torch_*.py (the PyTorch references of
# experiments/gpu/bench.sh, from ../shared/bench), .gpu/whl (ml_collections and tensorboardX, which the
# machine lacks) and .gpu/fallback (the flax/optax/orbax/chex this project's CPU suite runs with, used only if
# the machine's own fail the preflight), both for CPython 3.12 on x86-64 (skipped with WHEELS=0), and the
# stamp: .gpu/commit (HEAD, "+dirty" if tracked code differs) and .gpu/source (a digest of the code files; on
# the machine a copy whose code differs is recorded as "+dirty"). PYTHON: the Python
# with this project's packages (default python3).
set -eu
cd "$(dirname "$0")/../.."
DATA=${WT_JAX_DATA:-../shared/data}
mkdir -p .gpu/data .gpu/bench .gpu/whl .gpu/fallback
git check-ignore -q .gpu || { echo ".gpu is not ignored by git (.gitignore lists /.gpu/)"; exit 1; }
for corpus in ptb wikitext2; do
  [ -d "$DATA/$corpus" ] || { echo "no $DATA/$corpus (set WT_JAX_DATA)"; exit 1; }
  rm -rf ".gpu/data/$corpus" && cp -r "$DATA/$corpus" .gpu/data/ && chmod -R u+w ".gpu/data/$corpus"
done
mkdir -p .gpu/data/wikitext2_text  # WikiText-2 as a folder of text (the tying surface's jobs: jobs_surface.txt)
for split in train valid test; do
  cp ".gpu/data/wikitext2/wiki.$split.tokens.gz" ".gpu/data/wikitext2_text/$split.txt.gz"
done
cp "$(dirname "$DATA")"/bench/torch_*.py .gpu/bench/ 2>/dev/null || echo "no PyTorch references beside $DATA"
if [ "${WHEELS:-1}" != 0 ]; then
  dl() {  # dl FOLDER NAME==VERSION...: CPython 3.12 x86-64 wheels (the machine's Python)
    local dir=$1; shift
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d "$dir" "$@"
  }
  ls .gpu/whl/ml_collections-* >/dev/null 2>&1 || dl .gpu/whl ml_collections==1.1.0 tensorboardX==2.6.5
  ls .gpu/fallback/flax-* >/dev/null 2>&1 ||
    dl .gpu/fallback flax==0.12.8 optax==0.2.8 orbax-checkpoint==0.12.8 chex==0.1.92
fi
"${PYTHON:-python3}" -m experiments.gpu.run_queue --stamp=.gpu
du -sh .gpu
