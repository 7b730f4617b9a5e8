"""Run a PyTorch benchmark script under CPU autocast to bfloat16, so that it compares with
`--config.compute_dtype=bfloat16` at equal precision (used by `experiments.bench --torch_python`).

    /path/to/torch/python experiments/bench_helpers/torch_autocast.py ../shared/bench/torch_small_lm.py [its flags]

Needs torch (not a dependency of wt_jax). The script runs unchanged, as `__main__`, inside
`torch.autocast("cpu", dtype=torch.bfloat16)`: its matmuls (and the LSTM) take bfloat16 inputs, while the
parameters and optimizer stay float32.
"""
import runpy
import sys

import torch


def main():
  if len(sys.argv) < 2:
    sys.exit(__doc__)
  script = sys.argv[1]
  sys.argv = sys.argv[1:]
  with torch.autocast("cpu", dtype=torch.bfloat16):
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
  main()
