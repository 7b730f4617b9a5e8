"""The flags of the tools that read a trained language model's run folder (`experiments.generate`,
`experiments.score`), defined once here so that both tools can be imported into one process (absl's flags are
process-wide; a name defined twice is an error)."""
from absl import flags

from wt_jax import trained_lm

WORKDIR = flags.DEFINE_string("workdir", None, "The trained run's folder (holds run.json, vocab.txt, checkpoints/).")
CHECKPOINT = flags.DEFINE_enum("checkpoint", None, list(trained_lm.CHECKPOINTS),
                               "Which checkpoint to read (default: best, or last while the run has none; score "
                               "--split=test: the one the run's own test used).")
MEMBER = flags.DEFINE_integer("member", None, "A members run's member k (its folder <workdir>/members/<k>/).")
flags.mark_flag_as_required("workdir")
