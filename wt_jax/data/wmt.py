"""WMT14 EN–FR and WMT15 EN–DE (Press & Wolf 2017 Table 8's data) through tensorflow-datasets.

TFDS's translation builders need TensorFlow, so this is an optional extra: `pip install -e '.[wmt]'`.
Data is prepared under `<data root>/tfds` (see wt_jax.data.paths) unless TFDS_DATA_DIR says otherwise;
the first call downloads and prepares several GB (the builders fetch the WMT sources themselves).

    load_pair("wmt14_enfr", "en", "fr") → {'train'|'valid'|'test': (source sentences, target sentences)}

Splits: TFDS `train`, `validation` (newstest2013 for both), `test` (newstest2014 / newstest2015).
"""
from __future__ import annotations

import os

from wt_jax.data import paths
from wt_jax.errors import InputError

BUILDERS = {"wmt14_enfr": ("wmt14_translate/fr-en", ("en", "fr")),
            "wmt15_ende": ("wmt15_translate/de-en", ("en", "de"))}
SPLITS = {"train": "train", "valid": "validation", "test": "test"}


def _tfds():
  try:
    import tensorflow_datasets as tfds
  except ImportError as e:
    raise paths.DataUnavailableError(
        "The WMT datasets are read through tensorflow-datasets, which needs TensorFlow for its translation "
        "builders: pip install -e '.[wmt]' (or use --config.dataset=multi30k).") from e
  return tfds


def load_pair(dataset: str, src: str, tgt: str, data_dir: str | None = None, download: bool = True,
              max_train: int = 0) -> dict[str, tuple[list[str], list[str]]]:
  """Sentences of `dataset` (a key of BUILDERS) as aligned lists; `max_train` > 0 keeps the first N training
  pairs (for a quick look at the pipeline)."""
  if dataset not in BUILDERS:
    raise InputError(f"Unknown WMT dataset {dataset!r}; expected one of {', '.join(BUILDERS)}.")
  name, langs = BUILDERS[dataset]
  if {src, tgt} != set(langs):
    raise InputError(f"{dataset} translates between {' and '.join(langs)}, not {src}→{tgt}.")
  tfds = _tfds()
  tfds_dir = os.environ.get("TFDS_DATA_DIR") or str(paths.data_root(data_dir) / "tfds")
  out = {}
  for split, tfds_split in SPLITS.items():
    try:
      ds = tfds.load(name, split=tfds_split, data_dir=tfds_dir, download=download)
    except Exception as e:  # TFDS raises its own types (e.g. AssertionError when not prepared, no network)
      raise paths.DataUnavailableError(
          f"tensorflow-datasets could not provide {name} [{tfds_split}] in {tfds_dir}: {e}. With no network, "
          f"prepare it elsewhere and point {paths.ENV_VAR} (its tfds/ folder) or TFDS_DATA_DIR at it.") from e
    a, b = [], []
    for i, ex in enumerate(tfds.as_numpy(ds)):
      if split == "train" and max_train and i >= max_train:
        break
      a.append(ex[src].decode("utf-8"))
      b.append(ex[tgt].decode("utf-8"))
    out[split] = (a, b)
  return out
