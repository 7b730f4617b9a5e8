"""One start of a text corpus, timed in a process of its own (so that its peak memory is the start's alone): what
`python -m experiments.bench --corpus_tokens=N` runs twice, first on an empty id cache, then on the full one.

    python experiments/bench_helpers/corpus_prep.py --data_dir=DIR [--tokenizer=word] [--vocab_size=N]

Prints one JSON line: seconds to `wt_jax.data.text_corpus.load`, the tokens it gave, its rate, the process's peak
resident memory (VmHWM) and its resident memory before the load (Python, numpy and the imports).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import ml_collections  # noqa: E402

from wt_jax.data import text_corpus  # noqa: E402


def status_mib(field: str) -> float:
  """A memory line of /proc/self/status in MiB: VmRSS (resident now), VmHWM (its peak). (`ru_maxrss` would not do:
  a child started by fork and exec inherits its parent's peak.)"""
  with open("/proc/self/status") as f:
    return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--data_dir", required=True)
  ap.add_argument("--tokenizer", default="word")
  ap.add_argument("--vocab_size", type=int, default=50_000)
  args = ap.parse_args()
  config = ml_collections.ConfigDict({"dataset": "text", "data_dir": args.data_dir, "tokenizer": args.tokenizer,
                                      "vocab_size": args.vocab_size, "lowercase": False, "numbers_as_n": False,
                                      "min_count": 0, "subword_model": "bpe"})
  before = status_mib("VmRSS")
  t0 = time.perf_counter()
  corpus = text_corpus.load(config)
  seconds = time.perf_counter() - t0
  tokens = sum(len(getattr(corpus, s)) for s in text_corpus.SPLITS)
  print(json.dumps({"seconds": round(seconds, 2), "tokens": tokens, "tokens_per_s": round(tokens / seconds),
                    "vocab": len(corpus.vocab), "rss_before_mib": round(before, 1),
                    "peak_rss_mib": round(status_mib("VmHWM"), 1)}))


if __name__ == "__main__":
  main()
