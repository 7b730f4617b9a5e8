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

Test-time adaptation (`wt_jax.adapt`; `--split=valid` to tune): the continuous cache,
`--cache_size=N --cache_theta=θ --cache_lambda=λ`; dynamic evaluation, `--dynamic_eval=sgd|rms --dynamic_lr=η
--dynamic_decay=λ` (segments of `--dynamic_segment`, default the run's bptt; 'rms' first collects the RMS of the
gradients over `--dynamic_stats_batches` training windows, 0: all, of `--dynamic_stats_batch_size` × segment).
Both flags together: dynamic evaluation with the cache over the adapted model's states.
The JSON line then adds `adaptation` (the settings) and `plain_ppl`; the run's own parameters are never changed.
`--reset_at=line|blank_line` scores each document (a line; the lines up to an empty one) from a fresh start, plain
or adapted: the recurrent state, the cache and the adapted parameters start afresh, the document read after `<eos>`
(every token a target; `documents` in the JSON line counts them).
"""
import json
import math
from pathlib import Path

from absl import app, flags
from absl import logging as absl_logging

from experiments import check_folder, lm_run_flags, quiet_library_logs, run_main
import wt_jax.adapt as adapt
import wt_jax.files as files
import wt_jax.trained_lm as trained_lm
from wt_jax.errors import InputError
from wt_jax.train.checkpoint import CheckpointUnreadableError

_TEXT = flags.DEFINE_string("text", None, "A UTF-8 text file to score.")
_SPLIT = flags.DEFINE_enum("split", None, list(trained_lm.SPLITS), "Score the run's own corpus split instead.")
_PER_TOKEN = flags.DEFINE_string("per_token", None, "Write each target's token, log-probability and rank to this "
                                 "file (JSONL).")

_CACHE_SIZE = flags.DEFINE_integer("cache_size", 0, "The continuous cache's n, the states kept (0: no cache).")
_CACHE_THETA = flags.DEFINE_float("cache_theta", 0.3, "The cache's θ, the flatness of its softmax over h_t·h_i.")
_CACHE_LAMBDA = flags.DEFINE_float("cache_lambda", 0.1, "The cache's weight λ in [0, 1].")
_DYNAMIC = flags.DEFINE_enum("dynamic_eval", None, list(adapt.RULES), "Dynamic evaluation's rule (none: off).")
_DYNAMIC_LR = flags.DEFINE_float("dynamic_lr", 0.0, "Dynamic evaluation's step size η.")
_DYNAMIC_DECAY = flags.DEFINE_float("dynamic_decay", 0.0, "Dynamic evaluation's decay λ toward the trained "
                                    "parameters.")
_DYNAMIC_SEGMENT = flags.DEFINE_integer("dynamic_segment", None, "Dynamic evaluation's segment length (default: "
                                        "the run's bptt).")
_DYNAMIC_STATS = flags.DEFINE_integer("dynamic_stats_batches", 0, "rms: training windows for the gradients' RMS "
                                      "(0: all).")
_DYNAMIC_STATS_B = flags.DEFINE_integer("dynamic_stats_batch_size", 100, "rms: streams per training window.")
flags.mark_flag_as_required("workdir")


def _adaptation(lm) -> tuple:
  """(scorer, its settings): the cache, dynamic evaluation, or both together, as the flags ask."""
  cache = (_CACHE_SIZE.value, _CACHE_THETA.value, _CACHE_LAMBDA.value) if _CACHE_SIZE.value else None
  if not _DYNAMIC.value:
    return adapt.score_cache, dict(zip(("size", "theta", "lam"), cache))
  ms = None
  if _DYNAMIC.value == "rms":
    ms = adapt.gradient_rms(lm, trained_lm.split_stream(lm, "train"), _DYNAMIC_STATS_B.value,
                            _DYNAMIC_SEGMENT.value, _DYNAMIC_STATS.value)
  return adapt.score_dynamic, dict(rule=_DYNAMIC.value, lr=_DYNAMIC_LR.value, decay=_DYNAMIC_DECAY.value, ms=ms,
                                   segment=_DYNAMIC_SEGMENT.value, cache=cache)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  if (_TEXT.value is None) == (_SPLIT.value is None):
    raise app.UsageError("Give one of --text=FILE and --split=test|valid|train.")
  if _CACHE_SIZE.value < 0:
    raise app.UsageError(f"--cache_size must be ≥ 1 (0: no cache), not {_CACHE_SIZE.value}.")
  given = lambda holder: not flags.FLAGS[holder.name].using_default_value
  for flag in (_CACHE_THETA, _CACHE_LAMBDA):  # (a setting of an adaptation not asked for would silently do nothing)
    if given(flag) and not _CACHE_SIZE.value:
      raise app.UsageError(f"--{flag.name} sets the cache, which is off: give --cache_size=N too.")
  for flag in (_DYNAMIC_LR, _DYNAMIC_DECAY, _DYNAMIC_SEGMENT, _DYNAMIC_STATS, _DYNAMIC_STATS_B):
    if given(flag) and not _DYNAMIC.value:
      raise app.UsageError(f"--{flag.name} sets dynamic evaluation, which is off: give --dynamic_eval=sgd|rms too.")
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
  per_token, reset = bool(_PER_TOKEN.value), lm_run_flags.RESET_AT.value
  out = (trained_lm.score(lm, text, per_token) if text is not None else
         trained_lm.score_split(lm, _SPLIT.value, per_token=per_token))
  if reset != "never" or _CACHE_SIZE.value or _DYNAMIC.value:
    ids = trained_lm.encode_text(lm, text).ids if text is not None else trained_lm.split_stream(lm, _SPLIT.value)
    out.pop("not_the_runs_test", None)
  if reset != "never":  # (the whole text above gave the OOV words and the run; its perplexities are replaced)
    out = {**{k: v for k, v in out.items() if k not in ("ppl_per_word", "words")},
           **trained_lm.by_document(trained_lm.score_ids, lm, ids, reset, per_token)}
  if _CACHE_SIZE.value or _DYNAMIC.value:
    scorer, settings = _adaptation(lm)
    out = {**out, **trained_lm.by_document(scorer, lm, ids, reset, per_token, **settings), "plain_ppl": out["ppl"]}
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
  last = {key: out[key] for key in ("ppl", "tokens", "oov", "oov_words", "nll", "ppl_per_word", "words", "split",
                                    "plain_ppl", "adaptation", "documents") if key in out}
  print(json.dumps(files.finite({**last, **run})))  # (a diverged model's inf perplexity as null: valid JSON)
  if "adaptation" in out and not math.isfinite(out["ppl"]):
    raise InputError(f"The adapted perplexity is {out['ppl']} (the plain one {out['plain_ppl']:.2f}): the adaptation "
                     "diverged; try a smaller step size (--dynamic_lr) or cache weight (--cache_lambda < 1).")


if __name__ == "__main__":
  run_main(main)
