"""A trained language model in files other tools read: safetensors weights, a config.json, its vocabulary.

    export_model(workdir, out, kind) → (out, config)     `python -m experiments.export --format=safetensors`

    <out>/model.safetensors  every parameter once, named by its path in the model with dots (`words.embedding`,
                             `lstm_0.w_ih`, `block_0.qkv.kernel`, …), float32 as trained; the header's metadata
                             names the family, the tying and, for a tied model, both roles of its one matrix
    <out>/config.json        family, sizes, tying mode, vocabulary size, which tensor plays which role, and the
                             forward pass as equations (`FORWARD`), so a reader needs no wt_jax
    <out>/vocab.txt          token i on line i (row i of the word matrices); a subword run's tokenizer.model too

**Tying is stored, not guessed.** A tied model has one word matrix, `words.embedding` (S, V×D): the input lookup
reads its rows and the output layer multiplies by its transpose (logits = h·Sᵀ + b). It is stored once, and both
config.json (`tie_word_embeddings`: true, `roles.output_embedding`: "words.embedding") and the safetensors metadata
say so; an untied model stores `words.out_embedding` as well. The two known failures of other exporters are a tied
model saved without its output layer (huggingface/transformers #30202) and an untied head loaded as tied (PR
#43429): here a reader follows `roles`, never a default (tests/test_interchange.py rebuilds the logits with numpy
alone, and fails when the tied matrix is read in one role only).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import numpy as np
from etils import epath

import wt_jax.export as export
import wt_jax.files as files
from wt_jax.convert import tying_mode
from wt_jax.data import text_corpus
from wt_jax.data import vocab as vocab_lib
from wt_jax.errors import InputError

FILE, CONFIG = "model.safetensors", "config.json"
FORMAT = "wt_jax-lm/1"
FORWARD = {
    "lstm_lm": [
        "x_0[t] = E[id_t] (E = words.embedding); for l in 0..L-1, over t with (c, h) = 0 at the text's start:",
        "  z = x_l[t] @ lstm_l.w_ih + h @ lstm_l.w_hh + lstm_l.bias;  i, j, f, o = split(z, 4) (in that order)",
        "  c = sigmoid(f) * c + sigmoid(i) * tanh(j);  h = sigmoid(o) * tanh(c);  x_{l+1}[t] = h",
        "logits[t] = x_L[t] @ O.T + words.out_bias (O: roles.output_embedding)",
    ],
    "transformer_lm": [
        "a text's first T <= max_len - memory tokens: x = E[ids] * (sqrt(D) if input_scale else 1) + "
        "positions[memory : memory + T] (E = words.embedding; the memory slots before hold a previous window's last "
        "tokens, none at the start)",
        "for each block_l: h = LN(x; ln_attn); q, k, v = split(h @ qkv.kernel + qkv.bias, 3), each [S, heads, D/heads]",
        "  a = softmax(q.k / sqrt(D/heads) over earlier and equal positions only); x = x + (a.v) @ attn_out.kernel + "
        "attn_out.bias",
        "  h = LN(x; ln_mlp); x = x + gelu_tanh(h @ mlp_in.kernel + mlp_in.bias) @ mlp_out.kernel + mlp_out.bias",
        "logits = LN(x; ln_out) @ O.T * (1/sqrt(D) if logit_scale else 1) + words.out_bias (O: roles.output_embedding)",
        "LN(x; n) = (x - mean) / sqrt(var + layer_norm_epsilon) * n.scale + n.bias over the last axis; gelu_tanh(u) = "
        "u/2 * (1 + tanh(sqrt(2/pi) * (u + 0.044715 u^3)))",
    ],
}


def _safetensors():
  import safetensors.numpy  # (a dependency; imported where it is used, as sentencepiece is)
  return safetensors.numpy


def tensors(params) -> dict[str, np.ndarray]:
  """Every leaf of `params` by its path joined with dots → a float32 host array (a shared leaf is one leaf)."""
  out = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    out[jax.tree_util.keystr(path, simple=True, separator=".")] = np.ascontiguousarray(np.asarray(leaf))
  return out


def roles(names, mode: str) -> dict:
  """Which tensor plays which part of the word layers (None: the model has none)."""
  tied = mode in ("tied", "tied_projection")
  has = lambda n: n if n in names else None
  return {"input_embedding": "words.embedding",
          "output_embedding": "words.embedding" if tied else "words.out_embedding",
          "output_bias": has("words.out_bias"), "projection_kernel": has("words.proj_kernel"),
          "projection_bias": has("words.proj_bias")}


def model_config(c: dict, mode: str, names, vocab_size: int) -> dict:
  """config.json: what a reader needs to rebuild the model from the tensors (module docstring)."""
  family = c["model"]
  out = {"format": FORMAT, "family": family, "tying": mode, "tie_word_embeddings": mode in ("tied", "tied_projection"),
         "vocab_size": vocab_size, "hidden_size": c["hidden_size"], "num_layers": c["num_layers"],
         "roles": roles(names, mode), "input_scale": bool(c["words"].get("input_scale", False)),
         "logit_scale": bool(c["words"].get("logit_scale", False)),
         "tokenizer": {k: c.get(k) for k in ("dataset", "tokenizer", "lowercase", "numbers_as_n")},
         "eos": "<eos> after every line of text", "source": {"config": c.get("name")}}
  if family == "transformer_lm":
    out |= {"num_heads": c["num_heads"], "mlp_size": c["mlp_size"], "memory": c["memory"],
            "max_len": c["memory"] + c["bptt"], "layer_norm_epsilon": 1e-6, "activation": "gelu_tanh"}
  if family in FORWARD:
    out["forward"] = FORWARD[family]
  else:
    out["forward"] = f"see wt_jax.models ({family}); the tensors are its parameters by path"
  return out


def export_model(workdir, out=None, kind: str = "last") -> tuple[epath.Path, dict]:
  """Write checkpoint `kind` of the LM run in `workdir` to `out` (default <workdir>/export) as the module docstring
  says. Returns (out, the config.json written)."""
  run = export.load_run(workdir, kind)
  c = run.config
  if not c.get("model") or "words" not in run.params:
    raise InputError(f"{workdir} is not a language-model run (its checkpoint holds no LM config and word layers).")
  if c.get("softmax", {}).get("class_bounds"):
    raise InputError("A class-factored softmax's model has no single output matrix; export it with --format=npz.")
  words, source = export.run_vocabulary(run)
  mode, arrays = tying_mode(run.params), tensors(run.params)
  if arrays["words.embedding"].shape[0] != len(words):
    raise InputError(f"The vocabulary ({source}) has {len(words)} words but the embedding has "
                     f"{arrays['words.embedding'].shape[0]} rows.")
  config = {**model_config(c, mode, arrays, len(words)), "source": {
      "workdir": str(run.workdir), "checkpoint": run.kind, "step": run.step, "config": c.get("name")}}
  meta = {"format": FORMAT, "family": config["family"], "tying": mode,
          "tie_word_embeddings": json.dumps(config["tie_word_embeddings"])}
  if config["tie_word_embeddings"]:
    meta["words.embedding"] = ("tied: the input embedding (row i = token i) and the output layer (logits = h @ "
                               "words.embedding.T + words.out_bias), one matrix")
  out = epath.Path(out) if out else run.workdir / "export"
  out.mkdir(parents=True, exist_ok=True)
  tmp = Path(str(out / (FILE + ".part")))
  _safetensors().save_file(arrays, str(tmp), metadata=meta)
  tmp.replace(Path(str(out / FILE)))
  files.write_json(out / CONFIG, config)
  vocab_lib.write_file(out / vocab_lib.FILE, words)
  pieces = run.workdir / text_corpus.TOKENIZER_FILE
  if pieces.is_file():
    shutil.copyfile(str(pieces), str(out / text_corpus.TOKENIZER_FILE))
  return out, config

