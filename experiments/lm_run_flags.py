"""The flags of the tools that read a trained language model's run folder (`experiments.generate`,
`experiments.score`, and `--reset_at` of `experiments.studies.test_time`), defined once here so that the tools can
be imported into one process (absl's flags are process-wide; a name defined twice is an error). Each tool that needs
`--workdir` marks it required itself."""
from absl import flags

import wt_jax.trained_lm as trained_lm

WORKDIR = flags.DEFINE_string("workdir", None, "The trained run's folder (holds run.json, vocab.txt, checkpoints/).")
CHECKPOINT = flags.DEFINE_enum("checkpoint", None, list(trained_lm.CHECKPOINTS),
                               "Which checkpoint to read (default: best, or last while the run has none; score "
                               "--split=test: the one the run's own test used).")
MEMBER = flags.DEFINE_integer("member", None, "A members run's member k (its folder <workdir>/members/<k>/).")
RESET_AT = flags.DEFINE_enum("reset_at", "never", list(trained_lm.RESETS), "Score each document from a fresh start "
                             "(the recurrent state, the cache, the adapted parameters): a document ends at every line "
                             "end (line), at an empty line (blank_line), or before each WikiText article (the empty "
                             "line before a ' = Title = ' line: wikitext_article); never: the text is one stream.")
