"""A reader of `python -m experiments.export --format=safetensors` that uses numpy and safetensors only (no wt_jax):
what a user of another framework writes from config.json's `roles` and `forward` (not a test).

    logits(folder, ids) → logits[T, V] of a text's first T tokens, in float64
"""
import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file


def read(folder):
  folder = Path(folder)
  tensors = {k: v.astype(np.float64) for k, v in load_file(str(folder / "model.safetensors")).items()}
  return tensors, json.loads((folder / "config.json").read_text())


def sigmoid(z):
  return 1.0 / (1.0 + np.exp(-z))


def layer_norm(x, t, name, eps):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * t[f"{name}.scale"] + t[f"{name}.bias"]


def gelu_tanh(u):
  return 0.5 * u * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (u + 0.044715 * u ** 3)))


def lstm_states(t, c, ids):
  x = t[c["roles"]["input_embedding"]][ids]
  for layer in range(c["num_layers"]):
    w_ih, w_hh, bias = (t[f"lstm_{layer}.{n}"] for n in ("w_ih", "w_hh", "bias"))
    h = cell = np.zeros(w_hh.shape[0])
    out = []
    for x_t in x:
      i, j, f, o = np.split(x_t @ w_ih + h @ w_hh + bias, 4)
      cell = sigmoid(f) * cell + sigmoid(i) * np.tanh(j)
      h = sigmoid(o) * np.tanh(cell)
      out.append(h)
    x = np.stack(out)
  return x


def transformer_states(t, c, ids):
  D, H, M, T = c["hidden_size"], c["num_heads"], c["memory"], len(ids)
  x = t[c["roles"]["input_embedding"]][ids] * (np.sqrt(D) if c["input_scale"] else 1.0) + t["positions"][M:M + T]
  causal = np.tril(np.ones((T, T), bool))
  for layer in range(c["num_layers"]):
    b = f"block_{layer}"
    h = layer_norm(x, t, f"{b}.ln_attn", c["layer_norm_epsilon"])
    q, k, v = (a.reshape(T, H, D // H) for a in np.split(h @ t[f"{b}.qkv.kernel"] + t[f"{b}.qkv.bias"], 3, axis=-1))
    scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(D // H)
    scores = np.where(causal, scores, -np.inf)
    a = np.exp(scores - scores.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    ctx = np.einsum("hqk,khd->qhd", a, v).reshape(T, D)
    x = x + ctx @ t[f"{b}.attn_out.kernel"] + t[f"{b}.attn_out.bias"]
    h = layer_norm(x, t, f"{b}.ln_mlp", c["layer_norm_epsilon"])
    x = x + gelu_tanh(h @ t[f"{b}.mlp_in.kernel"] + t[f"{b}.mlp_in.bias"]) @ t[f"{b}.mlp_out.kernel"] + \
        t[f"{b}.mlp_out.bias"]
  return layer_norm(x, t, "ln_out", c["layer_norm_epsilon"])


def logits(folder, ids, output_matrix=None):
  """logits[T, V] of token ids (a text's first T). `output_matrix(tensors, config)` picks the output layer's matrix
  (default: config.json's roles); a test passes a wrong rule to see the comparison fail."""
  t, c = read(folder)
  states = {"lstm_lm": lstm_states, "transformer_lm": transformer_states}[c["family"]](t, c, np.asarray(ids))
  out = t[c["roles"]["output_embedding"]] if output_matrix is None else output_matrix(t, c)
  z = states @ out.T * (1.0 / np.sqrt(c["hidden_size"]) if c["logit_scale"] else 1.0)
  return z + t[c["roles"]["output_bias"]] if c["roles"]["output_bias"] else z
