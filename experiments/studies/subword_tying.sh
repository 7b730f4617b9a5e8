#!/usr/bin/env bash
# What tying does with subwords on WikiText-2 (the corpus issue's study): Press & Wolf's small Table 6 model, untied
# and tied, trained on WikiText-2 cut into sentencepiece BPE pieces (`--config.dataset=text`, wt_jax/data/text_corpus.py),
# both seeds of an arm as the two members of one program (`--config.members=2`: seeds 0 and 1).
#
#   bash experiments/studies/subword_tying.sh [RUNS_DIR] [ARM ...] [-- EXTRA_FLAGS]   # RUNS_DIR default runs/subword_tying,
#                                                                                     # arms small_tied small
#   PIECES=4000 bash experiments/studies/subword_tying.sh                             # the BPE vocabulary (default 4000)
#
# The text folder is RUNS_DIR/wikitext2_text: links named train.txt.gz, valid.txt.gz, test.txt.gz to the WikiText-2
# files under $WT_JAX_DATA/wikitext2 (the tokenised release: its words, `<unk>` included, are the text). Each arm is
# `python -m experiments.ptb --config=configs/<arm>.py --config.dataset=text --config.data_dir=RUNS_DIR/wikitext2_text
# --config.tokenizer=sentencepiece --config.vocab_size=PIECES --config.members=2 --workdir=RUNS_DIR/<arm>_bpe<PIECES>`,
# logged beside its workdir, resumed if unfinished, skipped if finished; the arms run one after the other.
set -u
RUNS_DIR=${1:-runs/subword_tying}
shift || true
ARMS=()
while [[ $# -gt 0 && "$1" != "--" ]]; do ARMS+=("$1"); shift; done
[[ "${1:-}" == "--" ]] && shift
EXTRA=("$@")
[[ ${#ARMS[@]} -gt 0 ]] || ARMS=(small_tied small)
PIECES=${PIECES:-4000}
DATA=${WT_JAX_DATA:?set WT_JAX_DATA to the folder holding wikitext2/}
TEXT="$RUNS_DIR/wikitext2_text"
mkdir -p "$TEXT"
for split in train valid test; do
  ln -sfn "$(cd "$DATA/wikitext2" && pwd)/wiki.$split.tokens.gz" "$TEXT/$split.txt.gz"
done
status=0
for arm in "${ARMS[@]}"; do
  wd="$RUNS_DIR/${arm}_bpe$PIECES"
  if [[ -f "$wd/summary.json" ]]; then echo "skip $wd (finished)"; continue; fi
  echo "$(date -u +%FT%TZ) start $wd"
  python -m experiments.ptb --config="configs/$arm.py" --config.dataset=text --config.data_dir="$TEXT" \
      --config.tokenizer=sentencepiece --config.vocab_size="$PIECES" --config.members=2 --workdir="$wd" \
      --alsologtostderr "${EXTRA[@]}" >>"$wd.log" 2>&1 || status=$?
  echo "$(date -u +%FT%TZ) exit $status $wd"
done
exit $status
