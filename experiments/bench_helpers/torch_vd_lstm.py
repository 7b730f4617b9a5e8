"""PyTorch reference for the speed of the variational-dropout ("Bayesian", Gal 2015) LSTM LM of Press & Wolf's
Table 5 (`configs/large_bd*.py`, `wt_jax/models/bd_lstm_lm.py`): what a PyTorch user writes for it, since
cuDNN's LSTM cannot hold a dropout mask fixed on the recurrent state.

    python experiments/bench_helpers/torch_vd_lstm.py [--tied] [--device cuda] [--hidden 1500 --bptt 35]

The model of Gal's code, as bd_lstm_lm: word-type dropout on the embedding (0.3), per gate a mask on each
layer's input (0.5) and on its recurrent state (0.3), both fixed over the window, one on the top output (0.5);
each gate has its own input and recurrent Linear with biases; every parameter U(−0.04, 0.04). The cell is an
eager Python loop over time, the four gates' masked products as one batched matmul per operand. SGD lr 1,
global-norm clip 10, loss summed over time and averaged over the batch. Prints one JSON line (the fields of
../shared/bench/torch_small_lm.py's). Needs torch; not a dependency of wt_jax.
"""
import argparse
import gzip
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn


def load_ptb(d):
  """(train ids, valid ids, vocabulary size): words and <eos> per line, the vocabulary sorted (as
  torch_small_lm.py reads it)."""
  def words(split):
    for name in (f"ptb.{split}.txt.gz", f"ptb.{split}.txt"):
      path = os.path.join(d, name)
      if os.path.exists(path):
        with (gzip.open if name.endswith(".gz") else open)(path, "rt", encoding="utf8") as f:
          return [w for line in f for w in line.split() + ["<eos>"]]
    raise FileNotFoundError(f"ptb.{split}.txt[.gz] in {d}")

  train = words("train")
  vocab = {w: i for i, w in enumerate(sorted(set(train)))}
  ids = lambda ws: np.array([vocab[w] for w in ws], dtype=np.int64)
  return ids(train), ids(words("valid")), len(vocab)


class VDLSTMLM(nn.Module):
  def __init__(self, V, H, layers, tied, p_x=0.3, p_i=0.5, p_h=0.3, p_o=0.5):
    super().__init__()
    self.V, self.H, self.L, self.p = V, H, layers, (p_x, p_i, p_h, p_o)
    self.emb = nn.Embedding(V, H)
    self.w_ih = nn.ParameterList([nn.Parameter(torch.empty(4, H, H)) for _ in range(layers)])
    self.w_hh = nn.ParameterList([nn.Parameter(torch.empty(4, H, H)) for _ in range(layers)])
    self.b = nn.ParameterList([nn.Parameter(torch.empty(2, 4, 1, H)) for _ in range(layers)])
    self.out_w = None if tied else nn.Parameter(torch.empty(V, H))
    self.out_b = nn.Parameter(torch.empty(V))
    for p in self.parameters():
      nn.init.uniform_(p, -0.04, 0.04)

  def forward(self, x_TxB, state):
    T, B = x_TxB.shape
    p_x, p_i, p_h, p_o = self.p
    keep = lambda p, *shape: torch.bernoulli(torch.full(shape, 1 - p, device=x_TxB.device)) / (1 - p)
    word_keep = keep(p_x, self.V)[x_TxB]  # one draw per word type in the window
    h_in = self.emb(x_TxB) * word_keep[..., None]
    new_state = []
    for l in range(self.L):
      c, h = state[l]
      m_x, m_h = keep(p_i, 4, B, self.H), keep(p_h, 4, B, self.H)
      # the input part of all steps at once: [T, 4, B, H]
      xw = torch.einsum("tgbk,gkh->tgbh", h_in[:, None] * m_x, self.w_ih[l]) + self.b[l][0]
      outs = []
      for t in range(T):
        z = xw[t] + torch.bmm(h[None] * m_h, self.w_hh[l]) + self.b[l][1]  # [4, B, H]
        i, j, f, o = torch.sigmoid(z[0]), torch.tanh(z[1]), torch.sigmoid(z[2]), torch.sigmoid(z[3])
        c = f * c + i * j
        h = o * torch.tanh(c)
        outs.append(h)
      h_in = torch.stack(outs)
      new_state.append((c, h))
    y = h_in * keep(p_o, B, self.H)
    w = self.emb.weight if self.out_w is None else self.out_w
    return y @ w.t() + self.out_b, new_state


def main():
  ap = argparse.ArgumentParser()
  default = os.path.join(os.environ.get("WT_JAX_DATA") or os.path.join(
      os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data"), "ptb")  # CI's layout
  ap.add_argument("--data", default=default)
  ap.add_argument("--tied", action="store_true")
  ap.add_argument("--steps", type=int, default=50)
  ap.add_argument("--warmup", type=int, default=5)
  ap.add_argument("--batch", type=int, default=20)
  ap.add_argument("--bptt", type=int, default=35)
  ap.add_argument("--hidden", type=int, default=1500)
  ap.add_argument("--eval-batches", type=int, default=20)
  ap.add_argument("--device", default="cpu", help="cpu or cuda")
  a = ap.parse_args()
  dev = torch.device(a.device)
  sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
  torch.manual_seed(0)
  train, valid, V = load_ptb(a.data)
  B, T, H = a.batch, a.bptt, a.hidden
  m = VDLSTMLM(V, H, 2, a.tied).to(dev)
  nparams = sum(p.numel() for p in m.parameters())
  opt = torch.optim.SGD(m.parameters(), lr=1.0)
  tr = torch.from_numpy(train[: len(train) // B * B].reshape(B, -1).T.copy()).to(dev)
  zero = lambda: [(torch.zeros(B, H, device=dev), torch.zeros(B, H, device=dev)) for _ in range(2)]
  state, times, losses = zero(), [], []
  for step in range(a.warmup + a.steps):
    x, y = tr[step * T:(step + 1) * T], tr[step * T + 1:(step + 1) * T + 1]
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    logits, state = m(x, [(c.detach(), h.detach()) for c, h in state])
    loss = nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1), reduction="sum") / B
    loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 10.0)
    opt.step()
    losses.append(loss.item() / T)  # (a sync: the step's time includes all of its work)
    sync()
    if step >= a.warmup:
      times.append(time.perf_counter() - t0)
  ms = 1000 * float(np.median(times))
  m.eval()
  va = torch.from_numpy(valid[: len(valid) // B * B].reshape(B, -1).T.copy()).to(dev)
  state, n_tok = zero(), 0
  sync()
  t0 = time.perf_counter()
  with torch.no_grad():
    for i in range(min(a.eval_batches, (va.shape[0] - 1) // T)):
      # evaluation: no dropout (masks of keep probability 1)
      m.p, p = (0.0, 0.0, 0.0, 0.0), m.p
      logits, state = m(va[i * T:(i + 1) * T], state)
      m.p = p
      n_tok += logits.shape[0] * logits.shape[1]
  sync()
  eval_s = time.perf_counter() - t0
  print(json.dumps({
      "bench": "torch_vd_lstm", "tied": a.tied, "torch": torch.__version__, "params": nparams, "batch": B,
      "bptt": T, "hidden": H, "steps": a.steps, "train_ms_per_step": round(ms, 2),
      "train_tok_per_s": round(B * T / (ms / 1000), 1), "loss_first": round(losses[0], 3),
      "eval_tokens": n_tok, "eval_tok_per_s": round(n_tok / max(eval_s, 1e-9), 1),
      "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
      "tf32_matmul": torch.backends.cuda.matmul.allow_tf32}))


if __name__ == "__main__":
  main()
