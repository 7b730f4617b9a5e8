#!/usr/bin/env bash
# word2vec's quality beside its speed: for each corpus (CORPORA, default "ptb wikitext2") and seed
# (SEEDS, default "0 1"), wt_jax's skip-gram, untied and tied, with today's default step (pairs, one device) and with
# the windows step, noise shared by a window, on two host devices (512 steps a call); gensim's untied model; then the
# five similarity ρ of every run (`python -m experiments.studies.w2v_quality RUNS_DIR`).
#
#   GENSIM_PYTHON=G/bin/python bash experiments/studies/w2v_quality.sh [RUNS_DIR]   # default runs/w2v_quality
#
# SCHEMES (default "pairs windows_shared") and TYINGS ("untied tied") pick the runs; two more steps tell the new
# step's two changes apart: windows_shared_1device (noise a window, one device, 64 steps a call) and windows_2devices
# (noise a pair, word2vec.c's, on two devices, 512 steps a call).
#
# Each run is `[XLA_FLAGS=--xla_force_host_platform_device_count=N] python -m experiments.word2vec
# --config=configs/w2v_<TYING>.py --config.dataset=<CORPUS> --config.seed=<S> [the scheme's flags]
# --workdir=RUNS_DIR/<CORPUS>_<SCHEME>_<TYING>_seed<S>` or `$GENSIM_PYTHON experiments/bench_helpers/gensim_reference.py
# --config=configs/w2v_untied.py --dataset=<CORPUS> --seed=<S> --vectors_out=RUNS_DIR/<CORPUS>_gensim_untied_seed<S>`,
# logged beside its folder; a finished run is skipped, an unfinished wt_jax run resumes at its last epoch end.
set -u
RUNS_DIR=${1:-runs/w2v_quality}
SEEDS=${SEEDS:-0 1}
CORPORA=${CORPORA:-ptb wikitext2}
SCHEMES=${SCHEMES:-pairs windows_shared}
TYINGS=${TYINGS:-untied tied}
WINDOWS=(--config.batching=windows --config.batch_size=64)
SHARED=(--config.shared_negatives=true)
if [[ -z "${GENSIM_PYTHON:-}" ]]; then
  echo "GENSIM_PYTHON must name a Python with gensim (experiments/bench_helpers/gensim_reference.py says how)" >&2
  exit 2
fi
mkdir -p "$RUNS_DIR"
status=0
for corpus in $CORPORA; do
  for seed in $SEEDS; do
    for tying in $TYINGS; do
      for scheme in $SCHEMES; do
        wd="$RUNS_DIR/${corpus}_${scheme}_${tying}_seed$seed"
        if [[ -f "$wd/results.json" ]]; then continue; fi
        case $scheme in
          pairs) devices=1 extra=() ;;
          windows_shared) devices=2 extra=("${WINDOWS[@]}" "${SHARED[@]}" --config.steps_per_call=512) ;;
          windows_shared_1device) devices=1 extra=("${WINDOWS[@]}" "${SHARED[@]}") ;;
          windows_2devices) devices=2 extra=("${WINDOWS[@]}" --config.steps_per_call=512) ;;
          *) echo "unknown scheme $scheme" >&2; exit 2 ;;
        esac
        echo "$(date -u +%FT%TZ) start $wd"
        XLA_FLAGS="--xla_force_host_platform_device_count=$devices" python -m experiments.word2vec \
            --config="configs/w2v_$tying.py" --config.dataset="$corpus" --config.seed="$seed" "${extra[@]}" \
            --workdir="$wd" >>"$wd.log" 2>&1 || status=$?
      done
    done
    wd="$RUNS_DIR/${corpus}_gensim_untied_seed$seed"
    if [[ ! -f "$wd/gensim.json" ]]; then
      echo "$(date -u +%FT%TZ) start $wd"
      "$GENSIM_PYTHON" experiments/bench_helpers/gensim_reference.py --config=configs/w2v_untied.py \
          --dataset="$corpus" --seed="$seed" --vectors_out="$wd" >>"$wd.log" 2>&1 || status=$?
    fi
  done
done
python -m experiments.studies.w2v_quality "$RUNS_DIR" || status=$?
echo "$(date -u +%FT%TZ) exit $status"
exit $status
