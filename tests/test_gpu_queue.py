"""experiments/gpu_table5.py: the driver that fits a priority list of runs into a GPU window. Its decisions
(pure functions) and its whole path as a CPU dry run: probe, two jobs side by side, records."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments import gpu_table5 as g

REPO = Path(__file__).resolve().parents[1]


def test_projection_counts_the_steps_left_validation_and_test():
  # 1,000 steps left at 100 steps/s: 10 s, + 10% validation, + 60 s test
  assert g.projected_end(1000.0, 500, 100.0, 1500, 0.1, 60.0) == pytest.approx(1000 + 11 + 60)


def test_decide_restarts_a_late_job_one_rung_down_before_shedding_anything():
  deadline = 100.0
  assert g.decide([("a", 0, 1, 90.0), ("b", 0, 1, 95.0)], deadline) == ("keep", None)
  assert g.decide([("a", 0, 1, 90.0), ("b", 0, 1, 150.0)], deadline) == ("restart", "b")
  assert g.decide([("a", 0, 1, 150.0), ("b", 1, 1, 150.0)], deadline) == ("restart", "a")
  # on the last rung: the top job late → the lowest-priority other job is shed
  assert g.decide([("a", 1, 1, 150.0), ("b", 1, 1, None), ("c", 1, 1, 80.0)], deadline) == ("shed", "c")
  # any late job but the lowest-priority one sheds the lowest: it frees the device for the others
  assert g.decide([("a", 1, 1, 90.0), ("b", 1, 1, 150.0), ("c", 1, 1, 999.0)], deadline) == ("shed", "c")
  # the lowest-priority job late alone runs on to the deadline (a run longer than the window, kept partial)
  assert g.decide([("a", 1, 1, 90.0), ("b", 1, 1, 95.0), ("c", 1, 1, 999.0)], deadline) == ("keep", None)
  # a late lower-priority job on its last rung does not shed the top one; a lone late job is kept
  assert g.decide([("a", 1, 1, 90.0), ("b", 1, 1, 150.0)], deadline) == ("keep", None)
  assert g.decide([("a", 1, 1, 150.0)], deadline) == ("keep", None)
  assert g.decide([("a", 0, 1, None), ("b", 0, 1, None)], deadline) == ("keep", None)  # not measured yet


def test_job_and_variant_specs():
  job = g.parse_job("large:seed=1:bptt=35")
  assert (job.label, job.config, job.overrides) == ("large_seed1_bptt35", "large", ["seed=1", "bptt=35"])
  with pytest.raises(Exception, match="no configs/nope.py"):
    g.parse_job("nope")
  with pytest.raises(Exception, match="key=value"):
    g.parse_job("large:seed")
  assert g.parse_variant("u5") == (5, "")
  assert g.parse_variant("u1+while") == (1, "--xla_gpu_enable_command_buffer=+WHILE")
  assert g.parse_variant("u35-cb") == (35, "--xla_gpu_enable_command_buffer=")
  with pytest.raises(Exception, match="Unknown probe variant"):
    g.parse_variant("unroll5")


def test_the_fastest_variant_is_chosen_only_if_its_loss_matches():
  v = lambda ms, nll: {"train_ms_per_step": ms, "warmup_nll": [nll, 1.0]}
  results = {"u1": v(7.0, 9.2100), "u5": v(5.0, 9.2101), "u35": v(3.0, 9.5), "u1+while": {"error": "boom"}}
  assert g.choose_variant(results) == "u5"  # u35 is faster but computed another loss
  assert g.choose_variant({"u1": {"error": "x"}}) is None


def test_a_deadline_file_moves_the_deadline(tmp_path):
  driver = g.Driver([], tmp_path / "runs", tmp_path / "records", 100.0, [])
  (tmp_path / "records" / "deadline_at").write_text(str(driver.t0 + 250.0))
  driver.read_deadline()
  assert driver.deadline == pytest.approx(driver.t0 + 250.0)
  assert driver.events[-1]["event"] == "deadline moved"
  (tmp_path / "records" / "deadline_at").write_text("garbage")
  driver.read_deadline()  # unreadable: unchanged
  assert driver.deadline == pytest.approx(driver.t0 + 250.0)


def test_dry_run_probes_trains_two_jobs_side_by_side_and_leaves_whole_records(tmp_path, shared_data_root):
  env = {**os.environ, "WT_JAX_DATA": str(shared_data_root), "WT_JAX_COMMIT": "0123abc", "JAX_PLATFORMS": "cpu"}
  t0 = time.time()
  res = subprocess.run(
      [sys.executable, "-m", "experiments.gpu_table5", "--dry_run", "--jobs=small_tied,large:seed=1",
       "--parallel=2", "--budget_s=600", "--min_start_s=5", "--poll_s=0.5", "--probe=large_tied",
       "--probe_variants=u1,u5", "--probe_steps=3", f"--run_dir={tmp_path / 'runs'}",
       f"--record_dir={tmp_path / 'records'}", "--set=checkpoint_every_epochs=0"],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
  assert res.returncode == 0, res.stderr[-3000:]
  assert json.loads(res.stdout.strip().splitlines()[-1]) == {"small_tied": "finished", "large_seed1": "finished"}
  rec = tmp_path / "records"
  assert not list(rec.rglob("*.tmp"))  # every file renamed into place
  env_json = json.loads((rec / "env.json").read_text())
  assert env_json["backend"] == "cpu" and env_json["jax"] and env_json["driver_wall_s"] <= time.time() - t0
  probe = json.loads((rec / "probe.json").read_text())
  assert probe["chosen"] in ("u1", "u5") and all(v["train_ms_per_step"] > 0 for v in probe["variants"].values())
  status = json.loads((rec / "status.json").read_text())
  assert status["done"] and [j["state"] for j in status["jobs"]] == ["finished", "finished"]
  unroll = g.parse_variant(probe["chosen"])[0]
  for label in ("small_tied", "large_seed1"):
    results = json.loads((rec / label / "results.json").read_text())
    assert results["matmul_precision"] == "float32" and results["steps"] == results["steps_per_epoch"] * 2
    assert results["versions"]["wt_jax_commit"] == "0123abc"
    assert results["test_ppl"] > 1 and results["device_kind"] == "cpu"
    curve = [json.loads(line) for line in (rec / label / "curve.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in curve] == [1, 2] and all(r["valid_ppl"] > 1 for r in curve)
    job = next(j for j in status["jobs"] if j["label"] == label)
    assert f"--config.scan_unroll={unroll}" in job["events"][0]["cmd"]  # the probe's choice reached the job
  # checkpoint_every_epochs = 0: one checkpoint, of the final step only
  steps = sorted(p.name for p in (tmp_path / "runs" / "small_tied" / "checkpoints" / "last").iterdir()
                 if p.name.isdigit())
  assert len(steps) == 1


def test_gpu_window_script_leaves_the_driver_running_past_its_call_and_a_later_call_collects(
    tmp_path, shared_data_root):
  """experiments/gpu_window.sh as a lent machine runs it (tiny shapes on the CPU). A first call with no time
  to wait (WAIT_S counts from the script's start, so the preflight has used it up) sets up, passes the
  preflight, starts the driver in a session of its own and returns while it trains; a second call starts
  nothing, moves the deadline, waits for the driver and packs its whole records."""
  import tarfile
  root = tmp_path / "root"
  (root / "site").mkdir(parents=True)
  (root / "site" / ".installed").touch()  # the carried wheels (absent here) count as installed
  env = {**os.environ, "WT_GPU_ROOT": str(root), "WT_JAX_DATA": str(shared_data_root), "JAX_PLATFORMS": "cpu",
         "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
  out1, out2 = tmp_path / "out1", tmp_path / "out2"
  res = subprocess.run(
      ["bash", "experiments/gpu_window.sh", "1", str(out1), "--dry_run", "--jobs=small_tied", "--parallel=1",
       "--budget_s=300", "--min_start_s=1", "--poll_s=0.5", "--precisions=tensorfloat32"],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
  assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
  assert "preflight passed" in res.stdout and "driver still running" in res.stdout, res.stdout[-3000:]
  assert (out1 / "records.tgz").exists()
  res = subprocess.run(["bash", "experiments/gpu_window.sh", "300", str(out2)], cwd=REPO,
                       env={**env, "EXTEND_TO": "240"}, capture_output=True, text=True, timeout=600)
  assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
  assert "preflight" not in res.stdout and "driver finished" in res.stdout, res.stdout[-3000:]
  assert float((root / "records" / "deadline_at").read_text()) > time.time()
  with tarfile.open(out2 / "records.tgz") as tar:
    names = set(tar.getnames())
  assert {"records/env.json", "records/status.json", "records/small_tied/results.json",
          "records/small_tied/curve.jsonl"} <= names
  status = json.loads((out2 / "status.json").read_text())
  assert status["jobs"][0]["state"] == "finished"
  assert any(e["event"] == "deadline moved" for e in status["events"])
