#!/usr/bin/env bash
# What tying does with subwords on WikiText-2 (the corpus issue's study): Press & Wolf's small Table 6 model, untied
# and tied, trained on WikiText-2 cut into sentencepiece BPE pieces (`--config.dataset=text`, wt_jax/data/text_corpus.py),
# one run a seed (seeds 0 and 1; two members in one program ran 1.5x slower than the two seeds one after the other on
# this project's 2-core CPU, BUILD_NOTES §70).
#
#   bash experiments/studies/subword_tying.sh [RUNS_DIR] [ARM ...] [-- EXTRA_FLAGS]   # RUNS_DIR default runs/subword_tying,
#                                                                                     # arms small_tied small
#   PIECES=4000 SEEDS="0 1" bash experiments/studies/subword_tying.sh                 # BPE vocabulary, seeds (defaults)
#   taskset -c 0 bash experiments/studies/subword_tying.sh runs/subword_tying small_tied &   # two arms side by side,
#   taskset -c 1 bash experiments/studies/subword_tying.sh runs/subword_tying small &        # a core each
#
# The text folder is RUNS_DIR/wikitext2_text: links named train.txt.gz, valid.txt.gz, test.txt.gz to the WikiText-2
# files under $WT_JAX_DATA/wikitext2 (the tokenised release: its words, `<unk>` included, are the text). Each arm is
# `python -m experiments.ptb --config=configs/<arm>.py --config.dataset=text --config.data_dir=RUNS_DIR/wikitext2_text
# --config.tokenizer=sentencepiece --config.vocab_size=PIECES --config.seed=S --workdir=RUNS_DIR/<arm>_bpe<PIECES>_seed<S>`,
# logged beside its workdir, resumed if unfinished, skipped if finished; the runs go one after the other.
set -u
RUNS_DIR=${1:-runs/subword_tying}
shift || true
ARMS=()
while [[ $# -gt 0 && "$1" != "--" ]]; do ARMS+=("$1"); shift; done
[[ "${1:-}" == "--" ]] && shift
EXTRA=("$@")
[[ ${#ARMS[@]} -gt 0 ]] || ARMS=(small_tied small)
PIECES=${PIECES:-4000}
SEEDS=${SEEDS:-0 1}
DATA=${WT_JAX_DATA:?set WT_JAX_DATA to the folder holding wikitext2/}
TEXT="$RUNS_DIR/wikitext2_text"
mkdir -p "$TEXT"
for split in train valid test; do
  ln -sfn "$(cd "$DATA/wikitext2" && pwd)/wiki.$split.tokens.gz" "$TEXT/$split.txt.gz"
done
status=0
for arm in "${ARMS[@]}"; do
  for seed in $SEEDS; do
    wd="$RUNS_DIR/${arm}_bpe${PIECES}_seed$seed"
    if [[ -f "$wd/results.json" ]]; then echo "skip $wd (finished)"; continue; fi
    echo "$(date -u +%FT%TZ) start $wd"
    python -m experiments.ptb --config="configs/$arm.py" --config.dataset=text --config.data_dir="$TEXT" \
        --config.tokenizer=sentencepiece --config.vocab_size="$PIECES" --config.seed="$seed" --workdir="$wd" \
        --alsologtostderr "${EXTRA[@]}" >>"$wd.log" 2>&1 || status=$?
    echo "$(date -u +%FT%TZ) exit $status $wd"
  done
done
exit $status
