"""Sample continuations of a prompt from a trained language model, from its run folder alone.

    python -m experiments.generate --workdir=runs/small_tied --prompt="the company said" --num_samples=5 \
        --max_len=40 --temperature=1.0 --top_k=0 --top_p=1.0 --seed=0 [--checkpoint=last] [--output=FILE]
    python -m experiments.generate --workdir=runs/members_run --member=2 --prompt="the" --temperature=0

Prints each sample (the prompt, then the continuation; `<eos>` as a line end) with its log-probability under the
model; with `--output`, writes them as JSONL, one object per sample: its `text` and `tokens`, the prompt, every
setting and the run (folder, checkpoint, step, member, config, the commit it was trained with). `--temperature=0`
is greedy. The prompt is tokenised as the run's corpus is and read after `<eos>`; a prompt whose words are all
outside the vocabulary is refused. See `wt_jax.sampling`.
"""
import json
from pathlib import Path

from absl import app, flags
from absl import logging as absl_logging

from experiments import check_folder, lm_run_flags, quiet_library_logs, run_main
import wt_jax.files as files
import wt_jax.sampling as sampling
import wt_jax.trained_lm as trained_lm
from wt_jax.errors import InputError
from wt_jax.train.checkpoint import CheckpointUnreadableError

_PROMPT = flags.DEFINE_string("prompt", "", "The text to continue (empty: a sentence from its start).")
_NUM_SAMPLES = flags.DEFINE_integer("num_samples", 5, "Samples, drawn as one batch.")
_MAX_LEN = flags.DEFINE_integer("max_len", 40, "Tokens drawn per sample (<eos> counts as one).")
_TEMPERATURE = flags.DEFINE_float("temperature", 1.0, "Softmax temperature; 0: the likeliest word at each step.")
_TOP_K = flags.DEFINE_integer("top_k", 0, "Draw among the k likeliest words only (0: all).")
_TOP_P = flags.DEFINE_float("top_p", 1.0, "Draw within the nucleus of this probability mass, in (0, 1] (1: all).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the draws: the same seed gives the same samples.")
_OUTPUT = flags.DEFINE_string("output", None, "Also write the samples to this file as JSONL.")
flags.mark_flag_as_required("workdir")


def records(out: dict) -> list[dict]:
  """One JSON object per sample: its text and tokens (each with its log-probability under the model), the prompt,
  the settings and the run."""
  return [{"sample": k, "text": s["text"], "tokens": s["tokens"], "logp": s["logp"], "log_prob": s["log_prob"],
           "prompt": out["prompt"], "prompt_tokens": out["prompt_tokens"], **out["settings"], **out["run"]}
          for k, s in enumerate(out["samples"])]


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  if _OUTPUT.value:
    check_folder(Path(_OUTPUT.value).parent, "--output")
  quiet_library_logs()
  absl_logging.set_verbosity(absl_logging.ERROR)  # (orbax's notes on opening a checkpoint read-only)
  sampling.check_sampling(_NUM_SAMPLES.value, _MAX_LEN.value, _TEMPERATURE.value, _TOP_K.value, _TOP_P.value)
  try:
    lm = trained_lm.load(lm_run_flags.WORKDIR.value, lm_run_flags.CHECKPOINT.value, lm_run_flags.MEMBER.value)
  except CheckpointUnreadableError as e:
    raise InputError(str(e)) from None
  out = sampling.sample(lm, _PROMPT.value, _NUM_SAMPLES.value, _MAX_LEN.value, _TEMPERATURE.value, _TOP_K.value,
                          _TOP_P.value, _SEED.value)
  print(trained_lm.heading(out["run"]) + (f"; prompt words outside the vocabulary (read as <unk>): "
                                           f"{', '.join(out['oov_words'])}" if out["oov"] else ""))
  head = lm.tokenizer.render(out["prompt_tokens"])
  for k, s in enumerate(out["samples"]):
    print(f"--- sample {k} (log p = {s['log_prob']:.2f})")
    print(f"{head} | {s['text']}" if head else s["text"])
  if _OUTPUT.value:
    files.write_whole(_OUTPUT.value, "".join(json.dumps(r) + "\n" for r in records(out)))
    print(f"wrote {len(out['samples'])} samples to {_OUTPUT.value}")


if __name__ == "__main__":
  run_main(main)
