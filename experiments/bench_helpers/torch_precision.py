"""Run a PyTorch benchmark script with its float32 matmuls (cuBLAS and cuDNN, the LSTM included) at a chosen
precision, so that it compares with `--config.matmul_precision` at equal precision on a GPU (used by
`experiments.bench --torch_python`).

    /path/to/torch/python experiments/bench_helpers/torch_precision.py tf32|float32 SCRIPT [its flags]

tf32: TF32 inputs allowed (what JAX's default and `tensorfloat32` do on an A100/H100); float32: exact float32
(`matmul_precision=float32`). Needs torch (not a dependency of wt_jax); the script runs unchanged, as
`__main__`.
"""
import runpy
import sys

import torch


def main():
  if len(sys.argv) < 3 or sys.argv[1] not in ("tf32", "float32"):
    sys.exit(__doc__)
  allow = sys.argv[1] == "tf32"
  torch.backends.cuda.matmul.allow_tf32 = allow
  torch.backends.cudnn.allow_tf32 = allow
  script = sys.argv[2]
  sys.argv = sys.argv[2:]
  runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
  main()
