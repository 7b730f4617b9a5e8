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
source "$(dirname "$0")/wikitext2_text.sh"
link_wikitext2_text "$RUNS_DIR"
status=0
for arm in "${ARMS[@]}"; do
  train_seeds "$RUNS_DIR/${arm}_bpe$PIECES" --config="configs/$arm.py" --config.dataset=text --config.data_dir="$TEXT" \
      --config.tokenizer=sentencepiece --config.vocab_size="$PIECES" "${EXTRA[@]}"
done
exit $status
