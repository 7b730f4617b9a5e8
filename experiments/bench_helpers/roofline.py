"""A roofline estimate, on paper, of a recurrent LM's training step on one accelerator chip.

    python -m experiments.bench_helpers.roofline      # the table of BUILD_NOTES ("Roofline")

No hardware is involved: the step is split into the *dependent chain* (the recurrent matmuls, one after the
other: forward through time, then the backward loop) and the *parallel* rest (input projections, the output
layer, the weight gradients formed after the loop), and each part is bounded by the chip's published
matmul peak and HBM bandwidth:

    t_step ≥ N_chain · max(bytes_stage / BW, flops_stage / (peak · min(1, B / tile)), t_op) + F_parallel / peak

bytes_stage is the recurrent weight a stage multiplies by, read from HBM once per stage (it is re-read at
every time step unless the chip keeps it on-chip, which XLA does not promise); B / tile is the share of the
matrix unit a batch of B rows can fill (TPU MXU 128 rows, H100 wgmma 64); t_op is an *assumed* fixed cost
per dependent stage (loop iteration, kernel launch, synchronisation), given as a range because it cannot be
measured here.
"""
from __future__ import annotations

import dataclasses

from configs import large_bd_wd_tied, rhn_tied
from experiments.bench import matmul_flops_per_step

PTB_STEPS_PER_EPOCH = 1327  # PTB's 929,589 training tokens in 20 streams of 35-token windows


@dataclasses.dataclass(frozen=True)
class Chip:
  name: str
  peak_tflops: dict    # dense matmul peak by input dtype
  hbm_gb_s: float
  tile_rows: int       # rows of the matrix unit's tile: a batch below it leaves the rest idle
  source: str


CHIPS = (
    # Google Cloud TPU v5e documentation: 197 TFLOP/s bf16 per chip, 819 GB/s HBM2, 16 GiB; 128×128 MXUs.
    # float32 matmuls at XLA's default precision run as one bf16 pass (the rate of bf16; the bytes of f32).
    Chip("TPU v5e", {"float32": 197.0, "bfloat16": 197.0}, 819.0, 128, "cloud.google.com/tpu/docs/v5e"),
    # NVIDIA H100 SXM5 datasheet: 989 TFLOP/s dense bf16, 495 dense TF32 (XLA's float32 default), 3.35 TB/s.
    Chip("H100 SXM", {"float32": 495.0, "bfloat16": 989.0}, 3350.0, 64, "nvidia.com/en-us/data-center/h100"),
)


@dataclasses.dataclass(frozen=True)
class Step:
  """One training step split into its dependent chain and the parallel rest."""
  name: str
  batch: int
  chain_stages: int         # dependent matmul stages per step (forward and backward loops)
  stage_flops: float        # FLOPs of one stage
  stage_weights: int        # weight elements one stage reads
  total_flops: float        # all matmul FLOPs of the step (experiments.bench.matmul_flops_per_step)
  epochs: int

  @property
  def parallel_flops(self) -> float:
    return self.total_flops - self.chain_stages * self.stage_flops


def rhn_step(c) -> Step:
  """Zilly et al.'s RHN: T time steps × depth micro-layers, each [B, H] × [H, 2H], forward and backward."""
  B, T, H, d = c.batch_size, c.bptt, c.hidden_size, c.depth
  return Step(c.name, B, 2 * T * d, 2 * B * H * 2 * H, H * 2 * H, matmul_flops_per_step(c), c.num_epochs)


def lstm_step(c) -> Step:
  """L stacked LSTM layers: T time steps each, one [B, H] × [H, 4H] stage per step (Gal's four per-gate
  [H, H] matmuls are independent of each other: one stage), forward and backward."""
  B, T, H, L = c.batch_size, c.bptt, c.hidden_size, c.num_layers
  return Step(c.name, B, 2 * T * L, 2 * B * H * 4 * H, H * 4 * H, matmul_flops_per_step(c), c.num_epochs)


def estimate(step: Step, chip: Chip, dtype: str, t_op_us: float) -> dict:
  """Lower bounds (ms per step, hours for the run's epochs) and which term bounds the chain."""
  peak = chip.peak_tflops[dtype] * 1e12
  nbytes = {"float32": 4, "bfloat16": 2}[dtype]
  t_mem = step.stage_weights * nbytes / (chip.hbm_gb_s * 1e9)
  t_mxu = step.stage_flops / (peak * min(1.0, step.batch / chip.tile_rows))
  t_op = t_op_us * 1e-6
  stage = max(t_mem, t_mxu, t_op)
  bound = {t_mem: "HBM (weights per stage)", t_mxu: "matrix unit (B rows)", t_op: "per-stage latency"}[stage]
  t_chain = step.chain_stages * stage
  t_par = step.parallel_flops / peak
  ms = (t_chain + t_par) * 1e3
  return {"config": step.name, "chip": chip.name, "dtype": dtype, "t_op_us": t_op_us,
          "stage_us": round(stage * 1e6, 2), "stage_mem_us": round(t_mem * 1e6, 2),
          "stage_mxu_us": round(t_mxu * 1e6, 2), "chain_ms": round(t_chain * 1e3, 3),
          "parallel_ms": round(t_par * 1e3, 3), "step_ms": round(ms, 3), "chain_bound": bound,
          "run_hours": round(ms * 1e-3 * PTB_STEPS_PER_EPOCH * step.epochs / 3600, 2)}


def steps() -> list[Step]:
  return [rhn_step(rhn_tied.get_config()), lstm_step(large_bd_wd_tied.get_config())]


def main():
  for s in steps():
    print(f"{s.name}: {s.total_flops / 1e9:.1f} GFLOP/step, {s.chain_stages} dependent stages of "
          f"{s.stage_flops / 1e6:.1f} MFLOP and {s.stage_weights * 4 / 1e6:.2f} MB (float32) each; parallel "
          f"{s.parallel_flops / 1e9:.1f} GFLOP; {s.epochs} epochs × {PTB_STEPS_PER_EPOCH} steps")
  print("| config | batch | chip | weights | stage µs: HBM / MXU | chain bound (t_op = 0) | ms/step, t_op = 0 µs "
        "(chain + parallel) | ms/step, t_op = 10 µs | full run h, t_op = 0 / 10 µs |")
  print("|---|---|---|---|---|---|---|---|---|")
  for s in steps():
    for batch in (s.batch, 128):
      scaled = dataclasses.replace(s, batch=batch, stage_flops=s.stage_flops * batch / s.batch,
                                   total_flops=s.total_flops * batch / s.batch)
      for chip in CHIPS:
        for dtype in ("float32", "bfloat16"):
          if batch != s.batch and dtype == "float32":
            continue
          e0, e10 = estimate(scaled, chip, dtype, 0.0), estimate(scaled, chip, dtype, 10.0)
          hours = [round(e["run_hours"] * s.batch / batch, 2) for e in (e0, e10)]  # fewer steps per epoch
          print(f"| {s.name} | {batch} | {chip.name} | {dtype} | {e0['stage_mem_us']} / {e0['stage_mxu_us']} | "
                f"{e0['chain_bound']} | {e0['step_ms']} ({e0['chain_ms']} + {e0['parallel_ms']}) | "
                f"{e10['step_ms']} | {hours[0]} / {hours[1]} |")


if __name__ == "__main__":
  main()
