"""Golden curve: `small_tied` on the real PTB, 300 steps from a fixed seed, against committed values.

The run is the full pipeline (`loop.fit`) on a prefix of PTB — the first 40,020 training tokens (100 steps of
20×20 per epoch), 8,020 validation tokens — for 3 epochs with the decay starting after epoch 1, so that
within 300 steps the curve depends on the loss scaling (Σ over time, mean over batch), the learning-rate
schedule and its off-by-one (epochs 1–2 at lr 1, epoch 3 at 0.5), tying, clipping and the initialisation.
It compares the running train NLL at every 25th step and the validation NLL after each epoch with
`tests/golden/ptb_small_tied.json`.

Tolerance: 0.10 nats on the train points, 0.25 / 0.25 / 0.10 on the validation NLL after epochs 1 / 2 / 3.
Runs on one machine reproduce the values bit for bit (four runs, with and without XLA's multi-threaded
Eigen, 2026-11-23); another machine of the same kind moved them by up to 0.060 (train) and 0.119 (valid,
epoch 2), which is what the slack is for. Breaking the loss scaling, the schedule's off-by-one or tying
moves the train curve by 0.85, 0.13–0.18 and 0.48 nats (measured under these tolerances: BUILD_NOTES.md,
"Golden curve").

Regenerate after an intended change of the numerics (and say why in the commit):
    WT_JAX_REGEN_GOLDEN=1 python -m pytest -q tests/test_golden_curve.py
"""
import dataclasses
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from configs import small_tied
from wt_jax.data import ptb
from wt_jax.train import lm

pytestmark = pytest.mark.slow  # 300 steps of the small model on real PTB

GOLDEN = Path(__file__).parent / "golden" / "ptb_small_tied.json"
TOLERANCE_NATS = 0.10  # train NLL: cross-machine drift measured up to 0.060 (step 125); smallest break 0.134
VALID_TOLERANCE_NATS = (0.25, 0.25, 0.10)  # valid NLL after epochs 1, 2, 3: epoch 2 drifted 0.12 across machines


def golden_config():
  c = small_tied.get_config()
  c.num_epochs = 3
  c.decay_after_epoch = 1  # epochs 1-2 at lr 1, epoch 3 at lr 0.5: the off-by-one shows within 300 steps
  c.log_every = 25
  c.checkpoint_every_steps = 0
  c.plot = False
  c.seed = 0
  return c


def run_curve(data_root: Path, workdir: Path) -> dict:
  full = ptb.load(str(data_root), download=False)
  corpus = dataclasses.replace(full, train=full.train[:40_020], valid=full.valid[:8_020], test=full.test[:2_001])
  results = lm.fit(golden_config(), corpus, workdir)
  assert results["steps_per_epoch"] == 100 and results["steps"] == 300
  records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines() if line.strip()]
  train = {r["step"]: math.log(r["train_ppl"]) for r in records if r["kind"] == "train"}
  return {"train_nll": {str(k): v for k, v in sorted(train.items())},
          "valid_nll": [math.log(h["valid_ppl"]) for h in results["history"]],
          "num_params": results["num_params"],
          "wt_jax_commit": results["versions"]["wt_jax_commit"]}


def test_small_tied_golden_curve(shared_data_root, tmp_path, optimized_xla):
  got = run_curve(shared_data_root, tmp_path / "run")
  if os.environ.get("WT_JAX_REGEN_GOLDEN"):
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(got, indent=1) + "\n")
  want = json.loads(GOLDEN.read_text())
  assert got["num_params"] == want["num_params"] == 2_651_600
  assert list(got["train_nll"]) == list(want["train_nll"])  # the same steps were logged
  steps = list(want["train_nll"])
  np.testing.assert_allclose([got["train_nll"][s] for s in steps], [want["train_nll"][s] for s in steps],
                             atol=TOLERANCE_NATS, rtol=0, err_msg=f"running train NLL at steps {steps}")
  for epoch, (g, w, tol) in enumerate(zip(got["valid_nll"], want["valid_nll"], VALID_TOLERANCE_NATS), 1):
    assert abs(g - w) <= tol, f"validation NLL after epoch {epoch}: {g:.4f} vs golden {w:.4f} (tolerance {tol})"
