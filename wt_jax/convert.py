"""Converting a language model's parameters between tied and untied, to start a new run from them.

    tying_mode(params)                 → the `wt_jax.tying` mode the tree was built with
    untie(params)                      → an untied model's parameters, U = V = S (two arrays, equal values)
    tie(params, which="output")        → a tied model's parameters, S = V (or S = U with which="input")
    save_init(folder, params, manifest) / load_init(path, like)
                                       → the converted parameters on disk (params.npz + manifest.json), and
                                         back as the tree a freshly built model expects

A trained run's checkpoint converted and saved in one call: `wt_jax.export.convert_run`.

The layout is `wt_jax.tying.WordEmbeddings` (params['words']): a tied model holds one `embedding` S used for
the lookup and, transposed, for the logits; an untied one holds the input `embedding` U and the output
`out_embedding` V. Every other leaf (the recurrent layers, the softmax bias `out_bias` when the model has one,
the projection P and its bias in the projection modes) is carried over unchanged, so the pairs map
tied ↔ untied and tied_projection ↔ projection.

`untie` is exact: with V = S the untied model computes h·Vᵀ + b = h·Sᵀ + b and looks rows up in U = S, the
tied model's logits. The two copies are separate arrays, so training the untied model moves them apart.

`tie` has to drop one matrix, so the tied model computes a different function from the untied one and needs
training. Which to keep: Press & Wolf (2017, Section 3, "Weight Tying") show from the update rules that in a
tied model every row of S but the current input word's is updated exactly as the untied model's *output*
embedding is (the input embedding updates only the row of the current word), so S "evolves in a more similar
way to the output embedding"; their Section 4.1 ("Quality of Obtained Embeddings", Tables 3 and 4) finds
the output embedding of an LM the better embedding and the tied one closest to it. `tie` therefore keeps V by
default; `which="input"` keeps U.

Starting a run from a converted init: the new run's config is the old one with `words.mode` changed and
`init_from` set to the folder, as `manifest.json`'s `config_overrides` says
(`--config.words.mode=untied --config.init_from=DIR`). `load_init(path, like=params_of_that_model)` checks
that the file has exactly that model's leaves and shapes and returns them in its tree; the LM trainer uses
them in place of its random initial parameters (`wt_jax.train.lm.LMTask.init_state`).
"""
from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any, Mapping

import jax
import numpy as np

from wt_jax.errors import InputError

PAIRS = {"tied": "untied", "tied_projection": "projection"}  # tied mode → its untied counterpart
UNTIED_TO_TIED = {v: k for k, v in PAIRS.items()}
DIRECTIONS = ("untie", "tie", "copy")  # copy: the same model's parameters (a second training session)
KEEP = ("output", "input")
PARAMS_FILE = "params.npz"
MANIFEST = "manifest.json"
SEP = "/"


class ConversionError(InputError):
  """Parameters that cannot be converted or loaded as asked; the message is one line (an `InputError`: the
  trainer and the entry points print it as such)."""


def words_params(params: Mapping) -> Mapping:
  """params['words'], the `WordEmbeddings` leaves, or a ConversionError when the tree has none."""
  if not isinstance(params, Mapping) or "words" not in params or "embedding" not in params["words"]:
    raise ConversionError("These parameters have no word embeddings (expected params['words']['embedding'], "
                          "the layout of wt_jax.tying.WordEmbeddings).")
  return params["words"]


def tying_mode(params: Mapping) -> str:
  """The `wt_jax.tying` mode a parameter tree was built with, read off its leaves: a tied model has no
  `out_embedding`, a projection model has a `proj_kernel`."""
  words = words_params(params)
  tied = "out_embedding" not in words
  if "proj_kernel" in words:
    return "tied_projection" if tied else "projection"
  return "tied" if tied else "untied"


def untie(params: Mapping) -> dict:
  """A tied (or tied_projection) model's parameters → its untied (projection) counterpart's, with the input
  embedding U and the output embedding V both equal to S, as two separate arrays. The logits are unchanged."""
  mode = tying_mode(params)
  if mode not in PAIRS:
    raise ConversionError(f"untie needs a tied model; these parameters are {mode} (they already have an "
                          f"out_embedding).")
  words = dict(words_params(params))
  S = np.asarray(words["embedding"])
  words["embedding"] = np.array(S, copy=True)
  words["out_embedding"] = np.array(S, copy=True)
  return {**params, "words": words}


def tie(params: Mapping, which: str = "output") -> dict:
  """An untied (or projection) model's parameters → its tied (tied_projection) counterpart's, the one matrix
  S being the output embedding V (default; Press & Wolf Sections 3 and 4.1, see the module docstring) or the
  input embedding U (`which="input"`). The other matrix is dropped; every other leaf is kept."""
  if which not in KEEP:
    raise ConversionError(f"tie keeps the 'output' or the 'input' embedding, not {which!r}.")
  mode = tying_mode(params)
  if mode not in UNTIED_TO_TIED:
    raise ConversionError(f"tie needs an untied model; these parameters are {mode} (one embedding matrix).")
  words = dict(words_params(params))
  kept = words.pop("out_embedding") if which == "output" else words["embedding"]
  words.pop("out_embedding", None)
  words["embedding"] = np.array(kept, copy=True)
  return {**params, "words": words}


def converted_mode(mode: str, direction: str) -> str:
  """The tying mode `direction` ('untie' / 'tie') turns `mode` into."""
  table = PAIRS if direction == "untie" else UNTIED_TO_TIED if direction == "tie" else None
  if table is None:
    raise ConversionError(f"Unknown conversion {direction!r}; expected one of {', '.join(DIRECTIONS)}.")
  if mode not in table:
    raise ConversionError(f"Cannot {direction} a {mode!r} model: it is already "
                          f"{'tied' if direction == 'tie' else 'untied'}.")
  return table[mode]


def flatten(params: Any) -> dict[str, np.ndarray]:
  """{'words/embedding': array, ...}: every leaf by its '/'-joined path."""
  out = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    keys = [str(getattr(k, "key", getattr(k, "name", k))) for k in path]
    if any(SEP in k for k in keys):
      raise ConversionError(f"A parameter name contains {SEP!r}: {keys}.")
    out[SEP.join(keys)] = np.asarray(leaf)
  return out


def unflatten(flat: Mapping[str, np.ndarray]) -> dict:
  """The nested dict of `flatten`'s output."""
  tree: dict = {}
  for name, value in flat.items():
    *parents, leaf = name.split(SEP)
    node = tree
    for p in parents:
      node = node.setdefault(p, {})
    node[leaf] = value
  return tree


def save_init(folder: str | Path, params: Any, manifest: Mapping) -> Path:
  """Write `params` as <folder>/params.npz (one array per leaf, keyed by path) and `manifest` as
  <folder>/manifest.json. Returns the folder."""
  folder = Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  tmp = folder / (PARAMS_FILE + ".part.npz")
  np.savez(tmp, **flatten(params))
  tmp.replace(folder / PARAMS_FILE)
  (folder / MANIFEST).write_text(json.dumps(dict(manifest), indent=2) + "\n")
  return folder


def load_init(path: str | Path, like: Any = None) -> Any:
  """The parameters `save_init` wrote (`path`: the folder or its params.npz). With `like` (the parameters of
  the model the new run builds, e.g. its random init), check that the file has exactly its leaves and shapes
  and return them in `like`'s tree and dtypes; a mismatch (say, a tied init for an untied config) raises a
  ConversionError naming the differences."""
  path = Path(path)
  file = path / PARAMS_FILE if path.is_dir() else path
  if not file.is_file():
    hint = (f"; {path} is a run's folder: convert its checkpoint first, python -m experiments.export "
            f"--workdir={path} --convert=copy (or untie, tie)" if (path / "checkpoints").is_dir() else "")
    raise ConversionError(f"No converted parameters at {path} (expected {file}){hint}.")
  try:
    with np.load(file, allow_pickle=False) as z:
      flat = {k: z[k] for k in z.files}
  except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:  # (cut short, damaged, or another file)
    raise ConversionError(f"{file} cannot be read as converted parameters ({type(e).__name__}: {e}); write it "
                          f"again with python -m experiments.export --convert.") from e
  if like is None:
    return unflatten(flat)
  want = {k: (tuple(v.shape), v.dtype) for k, v in flatten(like).items()}
  only_file = sorted(set(flat) - set(want))
  only_model = sorted(set(want) - set(flat))
  reshaped = sorted(k for k in set(flat) & set(want) if tuple(flat[k].shape) != want[k][0])
  if only_file or only_model or reshaped:
    raise ConversionError(
        f"The parameters in {file} do not fit this model: only in the file: {only_file or 'none'}; only in "
        f"the model: {only_model or 'none'}; different shapes: {reshaped or 'none'}. Use the config with "
        f"the tying mode the file's manifest.json names.")
  values = [flat[n].astype(dtype) for n, (_, dtype) in want.items()]  # (in like's leaf order)
  return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(like), values)
