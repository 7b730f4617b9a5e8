"""Export a trained run's word embeddings, or convert its checkpoint between tied and untied.

    python -m experiments.export --workdir=runs/small_tied                        # word2vec + npz
    python -m experiments.export --workdir=runs/small --format=word2vec --out=vectors/small
    python -m experiments.export --workdir=runs/small --checkpoint=best --format=npz
    python -m experiments.export --workdir=runs/small_tied --format=safetensors       # the model, for other tools
    python -m experiments.export --workdir=runs/small_tied --convert=untie --out=inits/small_untied
    python -m experiments.export --workdir=runs/small --convert=tie [--keep=input] --out=inits/small_tied

Export writes `<out>/{input,output}.w2v.txt` (untied) or `<out>/tied.w2v.txt` (tied), which
`gensim.models.KeyedVectors.load_word2vec_format(path, binary=False)` reads, `<out>/embeddings.npz` (each
matrix and `words`) and `<out>/manifest.json`; `--out` defaults to `<workdir>/export`. The vocabulary is the
run folder's vocab.txt (no corpus needed); for a language-model run from before runs wrote one, it is rebuilt
from the stored config (its corpus under --data_dir, else the config's data_dir, else $WT_JAX_DATA). See
`wt_jax.export`.

`--format=safetensors` writes the whole model instead (`wt_jax.interchange`): `<out>/model.safetensors` (every
parameter by its path; a tied matrix once, its two roles named in the metadata), `config.json` (family, sizes,
tying, vocabulary size, which tensor plays which role, the forward pass as equations) and the vocabulary (and a
subword run's tokenizer.model).

`--convert` writes `<out>/params.npz` and `<out>/manifest.json`: the parameters of the same model with the
other tying (`wt_jax.convert`), for a new run to start from.
"""
import sys

from absl import app, flags

from experiments import check_folder, quiet_library_logs, run_main
import wt_jax.convert as convert
import wt_jax.export as export
import wt_jax.interchange as interchange
from wt_jax.data import paths
from wt_jax.train.checkpoint import CheckpointUnreadableError

_WORKDIR = flags.DEFINE_string("workdir", None, "The trained run's folder (holds checkpoints/).")
_FORMAT = flags.DEFINE_list("format", list(export.FORMATS), "word2vec and/or npz (comma-separated), or safetensors "
                            "(the whole model, for other tools).")
_OUT = flags.DEFINE_string("out", None, "Output folder (default: <workdir>/export, or <workdir>/init_<mode> "
                           "with --convert).")
_CHECKPOINT = flags.DEFINE_enum("checkpoint", "last", list(export.KINDS), "Which checkpoint to read.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Data root holding the run's corpus (default: the run's "
                                "config.data_dir, else $WT_JAX_DATA, else the cache).")
_VOCAB = flags.DEFINE_string("vocab", None, "A vocabulary file (one word per line, in id order) instead of "
                             "the run's own or its rebuilt corpus.")
_DOWNLOAD = flags.DEFINE_bool("download", False, "Let the corpus reader download a missing corpus.")
_CONVERT = flags.DEFINE_enum("convert", None, list(convert.DIRECTIONS), "Instead of exporting embeddings, "
                             "write the checkpoint's parameters untied (U = V = S), tied, or as they are (copy: a "
                             "second training session from them, Inan et al.'s footnote 4).")
_KEEP = flags.DEFINE_enum("keep", "output", list(convert.KEEP), "With --convert=tie: the embedding to keep "
                          "(output: Press & Wolf 2017, Sections 3 and 4.1).")
flags.mark_flag_as_required("workdir")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  check_folder(_OUT.value, "--out")
  quiet_library_logs()
  try:
    if _CONVERT.value:
      out, manifest = export.convert_run(_WORKDIR.value, _OUT.value, _CONVERT.value, _KEEP.value,
                                          _CHECKPOINT.value)
      print(f"{manifest['from']['tying']} → {manifest['tying']} ({_CONVERT.value}"
            f"{', kept the ' + _KEEP.value + ' embedding' if _CONVERT.value == 'tie' else ''}), step "
            f"{manifest['from']['step']}: wrote {out}; start a run with --config.words.mode={manifest['tying']} "
            f"--config.init_from={out}.")
    elif "safetensors" in _FORMAT.value:
      if len(_FORMAT.value) > 1:
        raise app.UsageError("--format=safetensors writes the whole model; export embeddings (word2vec, npz) in "
                             "another call.")
      out, config = interchange.export_model(_WORKDIR.value, _OUT.value, _CHECKPOINT.value)
      print(f"{config['family']}, {config['tying']}, vocabulary {config['vocab_size']}, step "
            f"{config['source']['step']}: wrote {interchange.FILE}, {interchange.CONFIG} and the vocabulary to {out}.")
    else:
      out, manifest = export.export_run(_WORKDIR.value, _OUT.value, _FORMAT.value, _CHECKPOINT.value,
                                   _DATA_DIR.value, _VOCAB.value, _DOWNLOAD.value)
      shapes = ", ".join(f"{k} {tuple(v['shape'])}" for k, v in manifest["matrices"].items())
      print(f"{manifest['tying']} run, step {manifest['step']}: {shapes}; vocabulary {manifest['vocab_source']}"
            f"; wrote {', '.join(manifest['formats'])} to {out}.")
  except (export.ExportError, convert.ConversionError, paths.DataUnavailableError, CheckpointUnreadableError) as e:
    sys.exit(f"error: {e}")


if __name__ == "__main__":
  run_main(main)
