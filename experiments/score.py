"""Score a text, or the run's own corpus split, under a trained language model's test protocol, from its run folder.

    python -m experiments.score --workdir=runs/small_tied --text=my_text.txt [--per_token=tokens.jsonl]
    python -m experiments.score --workdir=runs/small_tied --split=test     # results.json's test_ppl again
    python -m experiments.score --workdir=runs/members_run --member=1 --split=test

The perplexity is the run's batch-1 test protocol (one stream, windows of `test_window`, the model's carry kept
across them, all N − 1 targets: the first token is context only). The text is tokenised as the run's corpus is;
words outside the vocabulary are scored as `<unk>`, counted and the first few named. `--split=test` reads the
corpus the run was trained on (the config's data_dir, else $WT_JAX_DATA) with the checkpoint the run's own test
used (results.json's test_params: "best (epoch N)" → best, "final" → last). `--per_token=FILE` writes each
target's log-probability (natural log) and rank as JSONL. The last line printed is one JSON object with `ppl`,
`tokens` and `oov`. See `wt_jax.trained_lm`.
"""
import json
from pathlib import Path

from absl import app, flags
from absl import logging as absl_logging

from experiments import check_folder, lm_run_flags, quiet_library_logs, run_main
from wt_jax import files, trained_lm
from wt_jax.errors import InputError
from wt_jax.train.checkpoint import CheckpointUnreadableError

_TEXT = flags.DEFINE_string("text", None, "A UTF-8 text file to score.")
_SPLIT = flags.DEFINE_enum("split", None, list(trained_lm.SPLITS), "Score the run's own corpus split instead.")
_PER_TOKEN = flags.DEFINE_string("per_token", None, "Write each target's token, log-probability and rank to this "
                                 "file (JSONL).")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  if (_TEXT.value is None) == (_SPLIT.value is None):
    raise app.UsageError("Give one of --text=FILE and --split=test|valid|train.")
  if _PER_TOKEN.value:
    check_folder(Path(_PER_TOKEN.value).parent, "--per_token")
  quiet_library_logs()
  absl_logging.set_verbosity(absl_logging.ERROR)  # (orbax's notes on opening a checkpoint read-only)
  workdir, member = lm_run_flags.WORKDIR.value, lm_run_flags.MEMBER.value
  text = trained_lm.read_text(_TEXT.value) if _TEXT.value is not None else None
  try:
    checkpoint = lm_run_flags.CHECKPOINT.value or (
        trained_lm.tested_checkpoint(workdir, member) if _SPLIT.value == "test" else None)
    lm = trained_lm.load(workdir, checkpoint, member)
  except CheckpointUnreadableError as e:
    raise InputError(str(e)) from None
  per_token = bool(_PER_TOKEN.value)
  out = (trained_lm.score(lm, text, per_token) if text is not None else
         trained_lm.score_split(lm, _SPLIT.value, per_token=per_token))
  if per_token:
    files.write_whole(_PER_TOKEN.value, "".join(json.dumps(t) + "\n" for t in out.pop("per_token")))
  run = out["run"]
  print(f"{trained_lm.heading(run)}; {_TEXT.value or 'the ' + _SPLIT.value + ' split'}: {out['protocol']}")
  if out.get("not_the_runs_test"):
    print(f"note: not results.json's test_ppl: {out['not_the_runs_test']}.")
  if out["oov"]:
    print(f"{out['oov']} token(s) outside the vocabulary, scored as <unk>: {', '.join(out['oov_words'])}")
  if per_token:
    print(f"wrote {out['tokens']} per-token scores to {_PER_TOKEN.value}")
  last = {key: out[key] for key in ("ppl", "tokens", "oov", "oov_words", "nll", "split") if key in out}
  print(json.dumps(files.finite({**last, **run})))  # (a diverged model's inf perplexity as null: valid JSON)


if __name__ == "__main__":
  run_main(main)
