"""Independent PyTorch cross-check of the projection-regularised (PR) small LM's early training (issue 3).

    /path/to/python-with-torch experiments/torch_pr_check.py --mode=tied_projection --steps=600

Needs torch (not a dependency of wt_jax; any CPU build). Written from the paper and the authors' TF code's
equations, independently of wt_jax: embedding → 2-layer LSTM (200 units) → [h·P + p_b] → logits against the
(tied or untied) output embedding + bias; cost = Σ_t mean_b NLL + l2(P)/(B·6.5); SGD lr 1; global-norm clip
5; every parameter U(−0.1, 0.1) except the LSTM biases, which start at zero (TF's BasicLSTMCell); torch's
LSTM has two bias vectors per layer — both zero here, so the sum is the TF cell's single bias.
Prints one JSON line: the running train perplexity every 200 steps and the validation perplexity after
--steps steps (20 streams × 20-step windows, as wt_jax's validation).
"""
import argparse
import gzip
import json
import math
import os

import torch
from torch import nn


def read(path):
  opener = gzip.open if path.endswith(".gz") else open
  with opener(path, "rt") as f:
    return [w for line in f for w in line.split() + ["<eos>"]]


def load(folder):
  files = {s: next(os.path.join(folder, f"ptb.{s}.txt{z}") for z in (".gz", "")
                   if os.path.exists(os.path.join(folder, f"ptb.{s}.txt{z}"))) for s in ("train", "valid")}
  train = read(files["train"])
  counts = {}
  for w in train:
    counts[w] = counts.get(w, 0) + 1
  vocab = {w: i for i, w in enumerate(sorted(counts, key=lambda w: (-counts[w], w)))}
  ids = lambda words: torch.tensor([vocab[w] for w in words], dtype=torch.long)
  return ids(train), ids(read(files["valid"])), len(vocab)


class PRLM(nn.Module):
  def __init__(self, V, H, mode):
    super().__init__()
    self.mode = mode
    self.emb = nn.Embedding(V, H)
    self.rnn = nn.LSTM(H, H, 2)
    self.out = self.emb.weight if mode.startswith("tied") else nn.Parameter(torch.empty(V, H))
    self.out_b = nn.Parameter(torch.empty(V))
    if mode.endswith("projection"):
      self.P, self.p_b = nn.Parameter(torch.empty(H, H)), nn.Parameter(torch.empty(H))
    for name, p in self.named_parameters():
      nn.init.zeros_(p) if name.startswith("rnn.bias") else nn.init.uniform_(p, -0.1, 0.1)

  def forward(self, x, state):
    h, state = self.rnn(self.emb(x), state)
    if self.mode.endswith("projection"):
      h = h @ self.P + self.p_b
    return h @ self.out.T + self.out_b, state


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--data", default=os.path.join(os.environ.get("WT_JAX_DATA", "../shared/data"), "ptb"))
  ap.add_argument("--mode", default="tied_projection", choices=["untied", "tied", "projection", "tied_projection"])
  ap.add_argument("--steps", type=int, default=600)
  ap.add_argument("--pr_lambda", type=float, default=1 / 6.5)
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args()
  torch.manual_seed(args.seed)
  train, valid, V = load(args.data)
  B, T, H = 20, 20, 200
  rows = lambda s: s[: len(s) // B * B].view(B, -1).T.contiguous()  # [N/B, B]: B contiguous streams
  tr, va = rows(train), rows(valid)
  model = PRLM(V, H, args.mode)
  zero = lambda: (torch.zeros(2, B, H), torch.zeros(2, B, H))
  state, nll_sum, tokens, curve = zero(), 0.0, 0, {}
  for step in range(args.steps):
    x, y = tr[step * T:(step + 1) * T], tr[step * T + 1:(step + 1) * T + 1]
    state = tuple(s.detach() for s in state)
    logits, state = model(x, state)
    nll = nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1), reduction="sum")
    cost = nll / B
    if args.mode.endswith("projection"):
      cost = cost + args.pr_lambda * 0.5 * (model.P ** 2).sum() / B
    model.zero_grad()
    cost.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    with torch.no_grad():
      for p in model.parameters():
        p -= 1.0 * p.grad
    nll_sum, tokens = nll_sum + nll.item(), tokens + B * T
    if (step + 1) % 200 == 0:
      curve[step + 1] = round(math.exp(nll_sum / tokens), 1)
  with torch.no_grad():
    state, total, n = zero(), 0.0, 0
    for i in range((va.shape[0] - 1) // T):
      x, y = va[i * T:(i + 1) * T], va[i * T + 1:(i + 1) * T + 1]
      logits, state = model(x, state)
      total += nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1), reduction="sum").item()
      n += y.numel()
  print(json.dumps({"mode": args.mode, "pr_lambda": args.pr_lambda, "seed": args.seed, "steps": args.steps,
                    "running_train_ppl": curve, "valid_ppl": round(math.exp(total / n), 1),
                    "torch": torch.__version__}))


if __name__ == "__main__":
  main()
