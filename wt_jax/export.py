"""Exporting a trained run's word embeddings for other tools: word2vec text format, npz, and a manifest.

    load_run(workdir, kind)                 → Run: the checkpoint's params, meta, step, and the run's results
    run_vocabulary(run, data_dir, ...)      → (words, where they came from)
    embedding_matrices(params)              → {'input': U, 'output': V} untied, {'tied': S} tied
    write_word2vec(path, words, matrix)     → the text format `gensim.models.KeyedVectors.load_word2vec_format`
                                              reads with binary=False (header "V D", then "word v1 ... vD")
    write_npz(path, words, matrices)        → one array per matrix plus `words`; read_npz(path) reads it back
    export_run(workdir, out, formats, ...)  → all of the above, plus <out>/manifest.json: (out, manifest)
    convert_run(workdir, out, direction)    → the run's parameters tied or untied (`wt_jax.convert`), saved as a
                                              new run's init: (folder, manifest)

Which matrices: an untied model has two embeddings, the input U (the lookup) and the output V (the softmax
weights); a tied one has one, S, used in both roles (`wt_jax.tying`). Press & Wolf (2017, Section 4.1,
"Quality of Obtained Embeddings") evaluate all three as word embeddings: in a language model V is the better
of the untied pair and S is about as good as V. In the projection modes the output matrix is exported as
stored, i.e. without the projection P in front of it.

The vocabulary: row i of every matrix is the word with id i. Language-model and word2vec runs store their
vocabulary (`<workdir>/vocab.txt`, one word per line in id order; word2vec's add "<TAB>count"), written at
the first start, so a run folder exports without its corpus. For a language-model run from before runs
wrote it, the vocabulary is rebuilt from the run's stored config (`meta['config']`: dataset, data_dir) by the
same corpus reader that trained it (`wt_jax.data.lm_corpora`), which assigns ids by decreasing training-set
frequency, ties alphabetically. The data root is resolved as everywhere (an explicit `data_dir`, else the
run's `config.data_dir`, else $WT_JAX_DATA, else the cache). The vocabulary's size must equal the matrices' row count.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import ml_collections
import numpy as np
from etils import epath

import wt_jax.convert as convert
from wt_jax.convert import tying_mode, words_params
from wt_jax.data import lm_corpora, paths
from wt_jax.data import vocab as vocab_lib
from wt_jax.errors import InputError
from wt_jax.train.checkpoint import Checkpoints

FORMATS = ("word2vec", "npz")
KINDS = ("last", "best")
MANIFEST = "manifest.json"


class ExportError(InputError):
  """A run cannot be exported (no such run, no checkpoint, no vocabulary that fits); the message is one line."""


@dataclasses.dataclass
class Run:
  """One checkpoint of a training run, read without building its model."""

  workdir: epath.Path  # a local folder or a bucket (gs://...)
  kind: str            # 'last' or 'best'
  step: int
  params: Any          # the parameter pytree as host arrays
  meta: dict           # the checkpoint's meta (an LM run's holds the whole config under 'config')
  results: dict        # <workdir>/results.json, {} while the run has not finished

  @property
  def config(self) -> dict:
    return self.meta.get("config") or {}

  @property
  def config_name(self) -> str | None:
    return self.config.get("name") or self.results.get("config")


def load_run(workdir: str | Path, kind: str = "last") -> Run:
  """The `kind` checkpoint of the run in `workdir`, a local folder or a bucket (read-only: a run still
  training is not disturbed)."""
  if kind not in KINDS:
    raise ExportError(f"Unknown checkpoint {kind!r}; expected one of {', '.join(KINDS)}.")
  workdir = epath.Path(workdir)
  if not workdir.is_dir():
    raise ExportError(f"No run folder at {workdir}.")
  folder = workdir / "checkpoints" / kind
  if not folder.is_dir():
    raise ExportError(f"No {kind!r} checkpoint in {workdir} (expected {folder}; has the run saved one yet?).")
  ckpts = Checkpoints(workdir / "checkpoints", read_only=True)
  try:
    step = ckpts.latest_step(kind)
    if step is None:
      raise ExportError(f"No {kind!r} checkpoint in {workdir} ({folder} holds no complete save).")
    state, meta = ckpts.restore_saved(kind, step)
  finally:
    ckpts.close()
  results_path = workdir / "results.json"
  results = json.loads(results_path.read_text()) if results_path.is_file() else {}
  return Run(workdir=workdir, kind=kind, step=int(step), params=state["params"], meta=dict(meta or {}),
             results=results)


def embedding_matrices(params: Mapping) -> dict[str, np.ndarray]:
  """{'input': U, 'output': V} for an untied model, {'tied': S} for a tied one: the V×D matrices, host copies."""
  words = words_params(params)
  if "out_embedding" in words:
    return {"input": np.asarray(words["embedding"]), "output": np.asarray(words["out_embedding"])}
  return {"tied": np.asarray(words["embedding"])}


LEAVES = {"input": "words/embedding", "output": "words/out_embedding", "tied": "words/embedding"}


def check_words(words: Sequence[str]) -> None:
  """word2vec's text format separates fields by spaces: every word must be non-empty and whitespace-free."""
  for i, w in enumerate(words):
    if not w or any(c.isspace() for c in w):
      raise ExportError(f"Word {i} ({w!r}) is empty or contains whitespace; the word2vec text format cannot "
                        f"hold it.")


def write_word2vec(path: str | Path, words: Sequence[str], matrix: np.ndarray) -> epath.Path:
  """Write `matrix` (row i = `words[i]`) in word2vec's text format: a header "V D", then one line per word,
  "word v1 ... vD", UTF-8. Values are float32 written with 9 significant digits, which reads back to the
  same float32 (gensim's default dtype), so the loaded vectors equal the rows exactly."""
  matrix = np.asarray(matrix, dtype=np.float32)
  if matrix.ndim != 2 or matrix.shape[0] != len(words):
    raise ExportError(f"{len(words)} words for a matrix of shape {matrix.shape}: need one row per word.")
  check_words(words)
  path = epath.Path(path)
  tmp = path.with_name(path.name + ".part")
  with tmp.open("w", encoding="utf-8") as f:
    f.write(f"{matrix.shape[0]} {matrix.shape[1]}\n")
    for word, row in zip(words, matrix):
      f.write(word + " " + " ".join(f"{x:.9g}" for x in row.tolist()) + "\n")
  tmp.replace(path)
  return path


def write_npz(path: str | Path, words: Sequence[str], matrices: Mapping[str, np.ndarray]) -> epath.Path:
  """`np.savez` of every matrix under its name plus `words` (a unicode array, so `np.load` needs no
  pickle), the rows kept in their stored dtype."""
  for name, m in matrices.items():
    if name == "words":
      raise ExportError("A matrix cannot be called 'words' (that key holds the vocabulary).")
    if np.shape(m)[0] != len(words):
      raise ExportError(f"{len(words)} words for matrix {name!r} of shape {np.shape(m)}.")
  path = epath.Path(path)
  tmp = path.with_name(path.name + ".part.npz")
  with tmp.open("wb") as f:
    np.savez(f, words=np.asarray(list(words), dtype=str), **{k: np.asarray(v) for k, v in matrices.items()})
  tmp.replace(path)
  return path


def read_npz(path: str | Path) -> tuple[list[str], dict[str, np.ndarray]]:
  """(words, {name: matrix}) from `write_npz`'s file."""
  with np.load(path, allow_pickle=False) as z:
    return [str(w) for w in z["words"]], {k: z[k] for k in z.files if k != "words"}


def run_vocabulary(run: Run, data_dir: str | None = None, vocab_file: str | Path | None = None,
                   download: bool = False) -> tuple[list[str], str]:
  """(words in id order, where they came from) for `run`: `vocab_file` if given, else the run's own
  `vocab.txt`, else (older LM runs) the run's corpus rebuilt from its stored config. `data_dir` overrides
  the config's data folder; `download` lets the reader fetch a missing corpus."""
  if vocab_file:
    return vocab_lib.read_file(vocab_file), f"vocabulary file {vocab_file}"
  own = run.workdir / vocab_lib.FILE
  if own.is_file():
    return vocab_lib.read_file(own), f"the run's {own}"
  config = run.config
  dataset = config.get("dataset")
  if not dataset:
    raise ExportError(f"The checkpoint in {run.workdir} stores no config with a dataset and the run has no "
                      f"vocab.txt; pass a vocabulary file (one word per line, in id order).")
  if dataset not in lm_corpora.CORPORA:
    raise ExportError(f"The run's dataset {dataset!r} is not a word-level LM corpus "
                      f"({', '.join(lm_corpora.CORPORA)}); pass a vocabulary file.")
  c = ml_collections.ConfigDict({"dataset": dataset, "data_dir": data_dir or config.get("data_dir", ""),
                                 "download": bool(download)})
  try:
    corpus = lm_corpora.load_corpus(c)
  except paths.DataUnavailableError as e:
    raise ExportError(f"Cannot rebuild the vocabulary of {run.workdir}: {e}") from e
  root = paths.data_root(c.data_dir or None)
  return list(corpus.vocab.words), f"rebuilt from the {dataset} corpus in {root}"


def export_run(workdir: str | Path, out: str | Path | None = None, formats: Iterable[str] = FORMATS,
               kind: str = "last", data_dir: str | None = None, vocab_file: str | Path | None = None,
               download: bool = False) -> tuple[epath.Path, dict]:
  """Write every embedding of the run in `workdir` to `out` (default <workdir>/export) in `formats`:
  `<name>.w2v.txt` (word2vec text) per matrix and `embeddings.npz`, with `manifest.json` describing them.
  Returns (the folder written, the manifest)."""
  formats = list(formats)
  unknown = [f for f in formats if f not in FORMATS]
  if unknown or not formats:
    raise ExportError(f"Unknown format(s) {unknown or formats}; expected one or more of {', '.join(FORMATS)}.")
  run = load_run(workdir, kind)
  matrices = embedding_matrices(run.params)
  rows = {m.shape[0] for m in matrices.values()}
  words, vocab_source = run_vocabulary(run, data_dir, vocab_file, download)
  if rows != {len(words)}:
    raise ExportError(f"The vocabulary ({vocab_source}) has {len(words)} words but the embeddings have "
                      f"{sorted(rows)[0]} rows: not this run's vocabulary.")
  out = epath.Path(out) if out else run.workdir / "export"
  out.mkdir(parents=True, exist_ok=True)
  mode = tying_mode(run.params)
  entries = {}
  for name, m in matrices.items():
    entries[name] = {"leaf": LEAVES[name], "shape": list(m.shape), "dtype": str(m.dtype)}
  if "word2vec" in formats:
    for name, m in matrices.items():
      entries[name]["word2vec"] = write_word2vec(out / f"{name}.w2v.txt", words, m).name
  if "npz" in formats:
    write_npz(out / "embeddings.npz", words, matrices)
    for name in matrices:
      entries[name]["npz"] = {"file": "embeddings.npz", "key": name, "words_key": "words"}
  config = run.config
  manifest = {
      "what": "word embeddings of a wt_jax run (row i = word i of the vocabulary)",
      "workdir": str(run.workdir if "://" in str(run.workdir) else run.workdir.absolute()),
      "checkpoint": run.kind,
      "step": run.step,
      "config": run.config_name,
      "dataset": config.get("dataset"),
      "model": config.get("model") or run.results.get("model"),
      "tying": mode,
      "tied": mode in ("tied", "tied_projection"),
      "output_bias": "out_bias" in run.params["words"],
      "projection": mode in ("projection", "tied_projection"),
      "matrices": entries,
      "vocab_size": len(words),
      "vocab_source": vocab_source,
      "formats": formats,
  }
  (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
  return out, manifest


def convert_run(workdir: str | Path, out: str | Path | None = None, direction: str = "untie",
                which: str = "output", kind: str = "last") -> tuple[Path, dict]:
  """Convert the `kind` checkpoint of the run in `workdir` (`direction`: 'untie' or 'tie', keeping the
  `which` embedding) and write it with `convert.save_init` to `out` (default
  <workdir>/init_<new mode>[_from_<which>]). Returns (the folder written, its manifest)."""
  if direction not in convert.DIRECTIONS:
    raise convert.ConversionError(f"Unknown conversion {direction!r}; expected one of "
                                  f"{', '.join(convert.DIRECTIONS)}.")
  run = load_run(workdir, kind)
  config = run.meta.get("config") or {}
  if config.get("model") == "skipgram" or "src_lang" in config:  # (word2vec; a translation model)
    kind_of_run = "word2vec" if config.get("model") == "skipgram" else "translation"
    raise convert.ConversionError(f"{workdir} is a {kind_of_run} run; only language-model runs (experiments.ptb) "
                                  "start from converted parameters (--config.init_from).")
  mode = tying_mode(run.params)
  if direction == "copy":  # Inan et al.'s footnote 4: retrain from the final state of a first session
    new_mode, params, default = mode, run.params, f"init_step{run.step}"
  else:
    new_mode = convert.converted_mode(mode, direction)
    params = convert.untie(run.params) if direction == "untie" else convert.tie(run.params, which)
    default = f"init_{new_mode}" + (f"_from_{which}" if direction == "tie" else "")
  out = Path(out) if out else run.workdir / default
  manifest = {
      "what": "initial parameters for a new wt_jax run, converted from a trained run",
      "from": {"workdir": str(run.workdir.absolute()), "checkpoint": run.kind, "step": run.step,
               "config": run.config_name, "tying": mode},
      "conversion": direction,
      "kept": which if direction == "tie" else None,
      "tying": new_mode,
      "output_bias": "out_bias" in params["words"],
      "config_overrides": {"words.mode": new_mode, "init_from": str(out)},
      "same_logits": direction in ("untie", "copy"),
      "leaves": {k: list(v.shape) for k, v in convert.flatten(params).items()},
  }
  return convert.save_init(out, params, manifest), manifest
