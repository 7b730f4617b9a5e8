"""What tying does with subwords on WikiText-2 (the corpus issue's study; not a paper table): Press & Wolf's small LSTM,
untied and tied, on WikiText-2 cut into sentencepiece BPE pieces (`experiments/studies/subword_tying.sh`), beside the
same model on WikiText-2's 33,278 words (the word runs of results/softmax_study_wt2). Every run is read per word and in
bits per byte of the same test text, so the two tokenisations compare."""
from __future__ import annotations

import math
from pathlib import Path

from experiments.reports.pages import _report_dir, _write
from experiments.reports.records import ReportError, against_spread, load_runs, seeds_cell

WORD_RUNS = "softmax_study_wt2"  # results/<WORD_RUNS>/: the small LSTM on WikiText-2's words (sampled softmax, K = 3,300)
ARMS = (("small", "untied"), ("small_tied", "tied"))
COMMAND = ("bash experiments/studies/subword_tying.sh runs/subword_tying ARM  # ARM: small_tied or small, seeds 0 and "
           "1; each run is python -m experiments.ptb --config=configs/ARM.py --config.dataset=text "
           "--config.data_dir=runs/subword_tying/wikitext2_text --config.tokenizer=sentencepiece "
           "--config.vocab_size=4000 --config.seed=SEED --workdir=runs/subword_tying/ARM_bpe4000_seedSEED")


def _test_text(subword_runs: list[dict]) -> dict:
  """The test split's counts (`wt_jax.data.text_corpus`: words with one `<eos>` a line, UTF-8 bytes), the same in
  every subword run (else `ReportError`)."""
  tests = {(r["corpus"]["test"]["words"], r["corpus"]["test"]["bytes"]) for r in subword_runs}
  if len(tests) != 1:
    raise ReportError(f"the subword runs scored different test texts (words, bytes): {sorted(tests)}")
  words, size = tests.pop()
  return {"words": words, "bytes": size}


def _word_measures(r: dict, text: dict) -> dict:
  """A word-level run's test perplexity (per word already) in bits per byte of the same text: Σ NLL = ln(ppl)·(W − 1)
  over the batch-1 protocol's W − 1 targets, as `text_corpus.measures` counts a subword run's."""
  nll = math.log(r["test_ppl"]) * (text["words"] - 1)
  return {"per_word": r["test_ppl"], "bpb": nll / math.log(2) / text["bytes"]}


def _row(label: str, pieces: str, runs: list[dict], measures: list[dict]) -> str:
  seeds = ", ".join(str(r["seed"]) for r in runs)
  cell = lambda key, fmt=".1f": seeds_cell([r[key] for r in runs], fmt)
  return (f"| {label} | {pieces} | {runs[0]['num_params']:,} | {seeds} | {cell('valid_ppl')} | {cell('test_ppl')} | "
          f"{seeds_cell([m['per_word'] for m in measures])} | {seeds_cell([m['bpb'] for m in measures], '.4f', '.4f')} |")


def _gap(name: str, a: list[dict], b: list[dict]) -> str:
  """b − a (tied − untied) per word and in bits per byte, each read against the seeds (`against_spread`)."""
  word, word_verdict = against_spread([m["per_word"] for m in a], [m["per_word"] for m in b])
  bpb, bpb_verdict = against_spread([m["bpb"] for m in a], [m["bpb"] for m in b], ".4f")
  return f"- {name}, tied − untied: test per word {word:+.1f} ({word_verdict}); bits per byte {bpb:+.4f} ({bpb_verdict})."


def build_subword_tying(name: str, out_root: Path, runs_dir: Path | None = None, readme: Path | None = None) -> str:
  report_dir = _report_dir(name, out_root, runs_dir)
  subword = load_runs(report_dir, dataset="text")
  word = load_runs(out_root / WORD_RUNS, dataset="wikitext2")
  if not subword:
    raise ReportError(f"{report_dir} holds no finished subword run; run {COMMAND.split('  #')[0]} and import it with "
                      f"--runs=runs/subword_tying.")
  text = _test_text([r for runs in subword.values() for r in runs])
  head = ("| model | tokens | parameters | seeds | valid ppl (per token) | test ppl (per token) | test ppl per word | "
          "test bits per byte |\n|---|---|---|---|---|---|---|---|")
  rows, measures = [], {}
  for config, arm in ARMS:
    if config in word:
      measures["word", arm] = [_word_measures(r, text) for r in word[config]]
      rows.append(_row(f"small LSTM, {arm}", "words (33,278; sampled softmax in training)", word[config],
                       measures["word", arm]))
    if config in subword:
      runs = subword[config]
      measures["bpe", arm] = [{"per_word": r["test_ppl_per_word"], "bpb": r["test_bits_per_byte"]} for r in runs]
      pieces = runs[0]["corpus"]["tokenizer"]["vocab_size"]
      rows.append(_row(f"small LSTM, {arm}", f"BPE pieces ({pieces:,})", runs, measures["bpe", arm]))
  gaps = [_gap(label, measures[kind, "untied"], measures[kind, "tied"])
          for kind, label in (("word", "words"), ("bpe", "BPE pieces"))
          if (kind, "untied") in measures and (kind, "tied") in measures]
  pieces_per_word = next(iter(subword.values()))[0]["corpus"]["test"]["tokens"] / text["words"]
  lead = (f"WikiText-2's test text: {text['words']:,} words (one `<eos>` a line counted as a word), "
          f"{text['bytes']:,} UTF-8 bytes, {pieces_per_word:.3f} BPE pieces a word. Per word: exp(Σ NLL / (W − 1)); "
          "bits per byte: Σ NLL / ln 2 / bytes (`wt_jax/data/text_corpus.py`); a word run's test perplexity is per "
          "word already. Several seeds: mean ± sample sd (each seed).")
  tab = "\n".join([head, *rows]) + "\n\nTied − untied, against the seed spread (twice the larger sample sd):\n\n" + (
      "\n".join(gaps) or "- no arm has both its runs yet.")
  prov = "\n".join(
      f"- `{r['_dir']}`: seed {r['seed']}, {r['epochs']:.0f} epochs, {r['wall_s'] / 60:.0f} min wall, "
      f"{r['train_tokens_per_s']:,.0f} train tokens/s, machine: {r['host']['cpu']}, {r['host']['cpu_count']} cores"
      for runs in subword.values() for r in runs)
  _write(name, report_dir, readme, "Tying with subwords: the small LSTM on WikiText-2, words against BPE pieces",
         lead, tab, None, "", f"Command: `{COMMAND}`\n\n{prov}\n\nThe word rows' runs: "
         f"[results/{WORD_RUNS}](../{WORD_RUNS}/README.md).", "The study page")
  return tab
