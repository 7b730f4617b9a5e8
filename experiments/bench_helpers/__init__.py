"""Scripts `experiments.bench` runs under another Python (one with torch or gensim) for its interleaved
comparisons; not entry points of wt_jax."""
