# Sourced by the studies that train on WikiText-2 as a folder of text (subword_tying.sh, tying_surface.sh).
#
#   link_wikitext2_text RUNS_DIR      sets TEXT=RUNS_DIR/wikitext2_text: links named train.txt.gz, valid.txt.gz,
#                                     test.txt.gz to the WikiText-2 files under $WT_JAX_DATA/wikitext2 (the tokenised
#                                     release: its words, `<unk>` included, are the text)
#   split_cells ARGS...               CELLS=(ARGS before "--"), EXTRA=(ARGS after it) (tying_surface*.sh)
#   train_seeds PREFIX ARGS...        for each seed S of $SEEDS: `python -m experiments.ptb ARGS --config.seed=S
#                                     --workdir=PREFIX_seedS`, logged to PREFIX_seedS.log, resumed if unfinished,
#                                     skipped if finished (a results.json); a failure sets `status` and the next
#                                     run goes on. With MEMBERS=K (K > 1), each S starts one members run of seeds
#                                     S … S+K−1 (`--config.members=K`, wt_jax.members) in PREFIX_seedsS-(S+K−1)
split_cells() {  # split_cells ARGS...: CELLS=(the arguments before "--"), EXTRA=(those after it); no cell: 1
  CELLS=() EXTRA=()
  while [[ $# -gt 0 && "$1" != "--" ]]; do CELLS+=("$1"); shift; done
  [[ "${1:-}" == "--" ]] && shift
  EXTRA=("$@")
  [[ ${#CELLS[@]} -gt 0 ]] || { echo "give at least one cell ARM,D,VOCAB (configs/tying_surface.py)" >&2; return 1; }
}

link_wikitext2_text() {
  local data=${WT_JAX_DATA:?set WT_JAX_DATA to the folder holding wikitext2/} split
  TEXT="$1/wikitext2_text"
  mkdir -p "$TEXT"
  for split in train valid test; do
    ln -sfn "$(cd "$data/wikitext2" && pwd)/wiki.$split.tokens.gz" "$TEXT/$split.txt.gz"
  done
}

train_seeds() {
  local prefix=$1 seed wd members=()
  shift
  for seed in $SEEDS; do
    wd="${prefix}_seed$seed"
    if [[ ${MEMBERS:-0} -gt 1 ]]; then
      wd="${prefix}_seeds$seed-$((seed + MEMBERS - 1))"
      members=(--config.members="$MEMBERS")
    fi
    if [[ -f "$wd/results.json" ]]; then echo "skip $wd (finished)"; continue; fi
    echo "$(date -u +%FT%TZ) start $wd"
    python -m experiments.ptb "$@" "${members[@]}" --config.seed="$seed" --workdir="$wd" --alsologtostderr \
        >>"$wd.log" 2>&1 || status=$?
    echo "$(date -u +%FT%TZ) exit ${status:-0} $wd"
  done
}
