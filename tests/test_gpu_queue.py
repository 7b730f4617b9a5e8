"""experiments/gpu/run_queue.py (with jobs.py and provenance.py): the driver that fits a priority list of runs
(any study's configs) into a GPU window. Its decisions (pure functions), its reading of what a job's folder
already holds, its record of every rate check, the commit it names, and its whole path as a CPU dry run:
probe, two jobs side by side, records, a second driver on the same folders (the trainer refusing a folder of
another config), and experiments/gpu/window.sh as a lent machine runs it."""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from absl import app, flags

from experiments.gpu import jobs as gj
from experiments.gpu import provenance as gp
from experiments.gpu import run_queue as g
from wt_jax.train import members_run

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


def _parsed_flags():
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()  # (the defaults: --precisions=float32,tensorfloat32, --check_steps=400)


def test_job_and_variant_specs(tmp_path):
  job = gj.parse_job("large:seed=1:bptt=35")
  assert (job.label, job.config, job.arg, job.overrides) == ("large_seed1_bptt35", "large", None, ["seed=1", "bptt=35"])
  job = gj.parse_job("inan.py:medium,al")  # a config file's argument, as experiments.ptb's --config takes it
  assert (job.label, job.config, job.arg, job.config_arg) == ("inan_medium_al", "inan", "medium,al",
                                                               "configs/inan.py:medium,al")
  job = gj.parse_job("inan:small,vd,wikitext2:seed=1")
  assert (job.label, job.arg, job.overrides) == ("inan_small_vd_wikitext2_seed1", "small,vd,wikitext2", ["seed=1"])
  with pytest.raises(Exception, match="no configs/nope.py"):
    gj.parse_job("nope")
  with pytest.raises(Exception, match="key=value"):
    gj.parse_job("large:seed=1:bptt")
  _parsed_flags()
  assert gj.job_config(gj.parse_job("inan.py:medium,al:seed=3"), ["num_epochs=2"]).to_dict()["name"] == \
      "inan_medium_al_keep"
  assert gj.job_config(gj.parse_job("inan.py:medium,al:seed=3"), ["num_epochs=2"]).seed == 3
  with pytest.raises(Exception, match="SIZE,VARIANT"):
    gj.job_config(gj.parse_job("inan.py:huge,al"), [])
  with pytest.raises(Exception, match="no key 'sed'"):
    gj.job_config(gj.parse_job("large:sed=1"), [])
  # members: K models in one program, from members=K or from member_values' lists
  assert gj.job_members(gj.parse_job("large"), []) == 0 and gj.job_members(gj.parse_job("large"), ["members=3"]) == 3
  assert gj.job_members(gj.parse_job("inan.py:medium,al:member_values=al.alpha=6.5,13;dropout_h=0.4,0.5"), []) == 2
  with pytest.raises(Exception, match="Job small_tied_member_valuesdropout0102learning_rate1: .*one value per member"):
    gj.job_members(gj.parse_job("small_tied:member_values=dropout=0.1,0.2;learning_rate=1"), [])
  # jobs joined by '+': one program whose members are each part's models, named by their own configs
  job = gj.parse_job("inan.py:medium,vd:members=2 + inan.py:medium,al:members=2", ["num_epochs=3"])
  assert (job.label, job.config_arg) == ("inan_medium_vd_members2__inan_medium_al_members2",
                                         "configs/inan.py:medium,vd")
  assert job.overrides == ["members=0", "member_values=name=inan_medium_vd_keep,inan_medium_vd_keep,"
                           "inan_medium_al_keep,inan_medium_al_keep;seed=0,1,0,1;al.alpha=0.0,0.0,13.0,13.0"]
  assert gj.job_members(job, ["num_epochs=3"]) == 4
  assert gj.parse_job("large_bd_wd_tied + large_bd_tied:seed=1").overrides[-1] == \
      "member_values=name=large_bd_wd_tied,large_bd_tied;seed=0,1;weight_decay=1e-07,0.0"
  with pytest.raises(Exception, match="Job large_bd_wd_tied__large_bd_wd: .*differ in 'words.mode'"):
    gj.parse_job("large_bd_wd_tied + large_bd_wd")
  with pytest.raises(Exception, match="differ in 'num_epochs'"):  # (a part's own override counts too)
    gj.parse_job("large_bd_wd_tied + large_bd_tied:num_epochs=2")
  listed = tmp_path / "jobs.txt"
  listed.write_text("# Table 5\nlarge_bd_wd   # first\n\ninan.py:medium,vd\n")
  assert gj.read_job_specs(["a"], ["b"], str(listed)) == ["a", "b", "large_bd_wd", "inan.py:medium,vd"]
  assert g.parse_variant("u5") == (5, "")
  assert g.parse_variant("u1+while") == (1, "--xla_gpu_enable_command_buffer=+WHILE")
  assert g.parse_variant("u35-cb") == (35, "--xla_gpu_enable_command_buffer=")
  with pytest.raises(Exception, match="Unknown probe variant"):
    g.parse_variant("unroll5")


def test_malformed_jobs_and_overrides_are_refused_with_their_reason(tmp_path):
  _parsed_flags()
  with pytest.raises(Exception, match="expected key=value"):
    gj.job_config(gj.parse_job("small_tied"), ["bptt"])
  # each value parsed by its field's type, as `--config.key=value` on the job's command line; the job's own
  # override after the common ones
  config = gj.job_config(gj.parse_job("inan.py:small,al:seed=1"), ["seed=2", "plot=false", "al.alpha=3"])
  assert (config.seed, config.plot, config.al.alpha) == (1, False, 3.0) and isinstance(config.al.alpha, float)
  for override, said in [("seed=1.5", r"Override 'seed=1.5': .*invalid literal for int"),
                         ("plot=maybe", r"Override 'plot=maybe': .*Non-boolean argument"),
                         ("al.alpa=2", r"Override 'al.alpa=2': the config has no key 'al.alpa' \(Did you mean "
                                       r"\"alpha\""),
                         ("nope.x=1", r"Override 'nope.x=1': the config has no key 'nope.x'\.$")]:
    with pytest.raises(app.UsageError, match=said):
      gj.job_config(gj.parse_job("inan.py:small,al"), [override])
  with pytest.raises(Exception, match="the precision is set by --precisions"):  # (the record names the rung)
    gj.job_config(gj.parse_job("small_tied:matmul_precision=tensorfloat32"), [])
  with pytest.raises(Exception, match="the precision is set by --precisions"):
    gj.job_config(gj.parse_job("small_tied"), ["matmul_precision=float32"])
  with pytest.raises(Exception, match="Unknown job '__init__'"):  # (configs/__init__.py: not a run's config)
    gj.parse_job("__init__")
  with pytest.raises(Exception, match="Unknown job '../configs/small_tied'"):
    gj.parse_job("../configs/small_tied")
  with pytest.raises(Exception, match="configs/large_tied.py takes no argument, not 'seed'"):
    gj.job_config(gj.parse_job("large_tied:seed"), [])
  with pytest.raises(Exception, match="has no get_config"):
    gj.job_config(gj.Job(label="x", config="__init__", overrides=[]), [])
  with pytest.raises(Exception, match="members 0 and 1 are the same run"):  # the same model twice
    gj.parse_job("small_tied + small_tied")
  with pytest.raises(Exception, match="members 1 and 2 are the same run"):
    gj.parse_job("small_tied:members=2 + small_tied:seed=1")
  job = gj.parse_job("small_tied:learning_rate=1e+3")  # '+' inside a value does not join jobs
  assert job.overrides == ["learning_rate=1e+3"] and gj.job_config(job, []).learning_rate == 1000.0
  long = [gj.parse_job(f"small_tied:name={c * 300}") for c in "ab"]  # a label stays a valid, distinct file name
  assert all(len(j.label) <= 120 for j in long) and long[0].label != long[1].label
  binary = tmp_path / "jobs.bin"
  binary.write_bytes(b"\xff\xfe small_tied\n")
  with pytest.raises(Exception, match="not UTF-8 text"):
    gj.read_job_specs([], [], str(binary))


def test_a_job_without_train_steps_is_refused(shared_data_root, monkeypatch):
  _parsed_flags()
  monkeypatch.setenv("WT_JAX_DATA", str(shared_data_root))
  job = gj.parse_job("small_tied")
  with pytest.raises(Exception, match="no train windows of batch_size 20 and bptt 0"):
    gj.steps_of_job(job, ["bptt=0"])
  with pytest.raises(Exception, match="-2 epochs"):
    gj.steps_of_job(job, ["num_epochs=-2"])


@pytest.mark.slow  # (a driver process per flag)
def test_bad_flags_stop_the_driver_with_one_line(tmp_path, shared_data_root):
  """Flag values the loop cannot run with, a job refused after the flags are read, and a stamp folder that
  cannot be made: each one line on stderr (absl's flag check adds its hint), no traceback, no job started."""
  env = {**os.environ, "WT_JAX_DATA": str(shared_data_root), "JAX_PLATFORMS": "cpu"}
  folders = [f"--run_dir={tmp_path / 'runs'}", f"--record_dir={tmp_path / 'records'}"]
  (tmp_path / "file").write_text("")
  for args, said in [(["--parallel=0"], "--parallel must be at least 1"),
                     (["--budget_s=nan"], "--budget_s must be a positive number of seconds"),
                     (["--precisions="], "--precisions must be a ladder of"),
                     (["--min_start_s=800", "--budget_s=700"], "--min_start_s (800) leaves no time"),
                     (["--set=matmul_precision=tensorfloat32"], "the precision is set by --precisions"),
                     ([f"--record_dir={tmp_path / 'runs'}"], "--run_dir and --record_dir must differ"),
                     ([f"--stamp={tmp_path / 'file' / 'stamp'}"], "--stamp: cannot write")]:
    res = _queue(["--jobs=small_tied", *folders, *args], env, timeout=120)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and "Traceback" not in res.stderr and len(lines) <= 2, (args, res.stderr[-2000:])
    assert said in lines[0], (args, lines)
  assert not (tmp_path / "runs").exists()


def test_the_next_windows_job_list_names_configs_that_build():
  specs = gj.read_job_specs([], [], str(REPO / "experiments" / "gpu" / "jobs_next.txt"))
  assert specs[:2] == ["large_bd_wd", "large_bd_wd_tied"] and len(specs) == 10
  _parsed_flags()
  names = [gj.job_config(gj.parse_job(s), []).name for s in specs]
  assert len(set(names)) == 10 and sum("wikitext2" in n for n in names) == 4
  # Table 5's rows are single runs (the paper's rows are single seeds); each Inan row trains seeds 0 and 1 in
  # one program
  assert [gj.job_members(gj.parse_job(s), []) for s in specs] == [0, 0] + [2] * 8
  assert all(gj.members_of(gj.job_config(gj.parse_job(s), [])) == 2 and "inan" in n
             for s, n in zip(specs[2:], names[2:]))


def test_the_surface_job_list_trains_each_arm_of_one_cell_two_seeds_a_program_on_the_text_folder():
  """jobs_surface.txt: the tying surface's GPU cell (D = 768, 16,000 pieces), every arm, seeds 0 and 1 as members,
  on the folder prepare.sh fills; each a name the surface's measures and report know as that cell."""
  from configs import tying_surface
  _parsed_flags()
  specs = gj.read_job_specs([], [], str(REPO / "experiments" / "gpu" / "jobs_surface.txt"))
  configs = [gj.job_config(gj.parse_job(s), []) for s in specs]
  assert [tying_surface.arg_of(c.name) for c in configs] == [f"{arm},768,16000" for arm in tying_surface.ARMS]
  assert {(c.members, c.data_dir) for c in configs} == {(2, ".gpu/data/wikitext2_text")}
  assert ".gpu/data/wikitext2_text/$split.txt.gz" in (REPO / "experiments" / "gpu" / "prepare.sh").read_text()


def test_set_adjusts_a_dry_runs_shapes(shared_data_root):
  """--set comes after the dry run's shrinking, so it can change a shape the dry run sets (a Transformer's
  test window, its heads): here fewer training tokens than the dry run's 1,200 give the job fewer steps."""
  env = {**os.environ, "WT_JAX_DATA": str(shared_data_root), "JAX_PLATFORMS": "cpu"}
  steps = [int(re.search(r"\((\d+) steps", _queue(["--dry_run", "--check_jobs", "--jobs=small_tied", *extra],
                                                    env, timeout=120).stdout)[1])
           for extra in ([], ["--set=train_max_tokens=600"])]
  assert steps[0] > steps[1] > 0


def _models(spec: str) -> list[tuple[str, int]]:
  """(config name, seed) of every model a job trains."""
  from wt_jax import members
  config = gj.job_config(gj.parse_job(spec), [])
  group = members.parse(config)
  return [(c.name, c.seed) for c in group.configs] if group else [(config.name, config.seed)]


def test_the_grouped_job_list_trains_every_model_of_the_next_windows_list_in_fewer_programs():
  _parsed_flags()
  grouped = gj.read_job_specs([], [], str(REPO / "experiments" / "gpu" / "jobs_grouped.txt"))
  listed = gj.read_job_specs([], [], str(REPO / "experiments" / "gpu" / "jobs_next.txt"))
  got = [m for s in grouped for m in _models(s)]
  assert sorted(got) == sorted(m for s in listed for m in _models(s)) and len(got) == len(set(got)) == 18
  assert grouped[:2] == listed[:2] == ["large_bd_wd", "large_bd_wd_tied"]  # (Table 5's rows: single runs)
  assert [gj.job_members(gj.parse_job(s), []) for s in grouped] == [0, 0, 4, 4, 4, 4]


def test_a_record_counts_as_the_jobs_only_if_its_config_is_the_jobs():
  """A finished record, or one without a checkpoint, is compared here; a resumable one only for its rung of
  the ladder: its config the trainer compares when it resumes it (the dry run below: a folder of another
  config fails the job with the trainer's line)."""
  _parsed_flags()
  job = gj.parse_job("large_bd_tied:seed=1")
  expected = gj.job_config(job, ["checkpoint_every_epochs=0"]).to_dict()
  ladder = ["float32", "tensorfloat32"]
  mine = {**expected, "matmul_precision": "tensorfloat32", "log_every": 50}  # (how it reports: may differ)
  results = {"config": expected["name"], "seed": 1, "matmul_precision": "tensorfloat32"}
  assert gj.record_mismatch(mine, expected, ladder, results) is None
  assert gj.record_mismatch(mine, expected, ladder, None) is None  # a run not finished yet: resumed
  other_seed = {**mine, "seed": 0}
  assert "seed 0 (job: 1)" in gj.record_mismatch(other_seed, expected, ladder, results)
  assert "matmul_precision 'tensorfloat32', not one of ['float32']" in gj.record_mismatch(mine, expected, ["float32"],
                                                                                         None)
  untied = gj.job_config(gj.parse_job("large_bd:seed=1"), ["checkpoint_every_epochs=0"]).to_dict()
  assert "words.mode" in gj.record_mismatch({**untied, "matmul_precision": "float32"}, expected, ladder, None)
  assert gj.record_mismatch({**untied, "matmul_precision": "float32"}, expected, ladder, None, resumable=True) is None
  assert "not one of ['float32']" in gj.record_mismatch(mine, expected, ["float32"], None, resumable=True)
  assert "results.json has seed 0" in gj.record_mismatch(mine, expected, ladder, {**results, "seed": 0})


def _folder_with_record(wd: Path, config: dict, results: dict | None) -> None:
  wd.mkdir(parents=True)
  (wd / "run.json").write_text(json.dumps({"config": config}))
  if results is not None:
    (wd / "results.json").write_text(json.dumps(results))


def test_a_finished_record_of_another_run_is_set_aside_and_the_jobs_own_is_kept(tmp_path, capfd):
  _parsed_flags()
  jobs = [gj.parse_job("large_tied"), gj.parse_job("large")]
  driver = g.Driver(jobs, tmp_path / "runs", tmp_path / "records", 100.0, [])
  own = {**gj.job_config(jobs[0], []).to_dict(), "matmul_precision": "tensorfloat32"}
  _folder_with_record(tmp_path / "runs" / "large_tied", own,
                      {"config": "large_tied", "seed": 0, "matmul_precision": "tensorfloat32", "test_ppl": 74.4})
  other = {**gj.job_config(jobs[1], ["seed=5"]).to_dict(), "matmul_precision": "float32"}  # another seed
  _folder_with_record(tmp_path / "runs" / "large", other, {"config": "large", "seed": 5, "test_ppl": 79.0})
  assert driver.adopt(jobs[0]) is True
  assert jobs[0].state == "finished" and driver.precision(jobs[0]) == "tensorfloat32"  # the record's, not rung 0
  assert json.loads((tmp_path / "records" / "large_tied" / "results.json").read_text())["test_ppl"] == 74.4
  assert driver.adopt(jobs[1]) is False and jobs[1].state == "queued"
  assert not (tmp_path / "runs" / "large").exists()
  assert (tmp_path / "runs" / "large.set_aside" / "results.json").exists()
  assert jobs[1].events[-1]["event"] == "set aside" and "seed 5 (job: 0)" in jobs[1].events[-1]["why"]
  err = capfd.readouterr().err
  assert "large: " in err and "holds another run's record" in err and len(err.strip().splitlines()) == 1
  _folder_with_record(tmp_path / "runs" / "large", {"no": "config"}, {"config": "large"})  # unreadable
  assert driver.adopt(jobs[1]) is False and (tmp_path / "runs" / "large.set_aside.1").exists()
  # another run, not finished: with a checkpoint step, left to the trainer, which compares the config when it
  # resumes (the dry run below); without one, nothing would compare it before a fresh start over its record
  _folder_with_record(tmp_path / "runs" / "large", other, None)
  assert driver.adopt(jobs[1]) is False and (tmp_path / "runs" / "large.set_aside.2").exists()
  assert "seed 5 (job: 0)" in jobs[1].events[-1]["why"]
  _folder_with_record(tmp_path / "runs" / "large", other, None)
  (tmp_path / "runs" / "large" / "checkpoints" / "last" / "118").mkdir(parents=True)
  events = len(jobs[1].events)
  assert driver.adopt(jobs[1]) is False and (tmp_path / "runs" / "large").exists() and len(jobs[1].events) == events
  assert driver.precision(jobs[1]) == "float32"  # (resumed on its own rung)


def _members_folder(wd: Path, config: dict, seeds: list[int], summary: bool) -> None:
  """A members run's folder as wt_jax/train/trainer.py leaves it: run.json (the whole config), per member
  members/<k>/ with run.json, metrics.jsonl, results.json, vocab.txt and checkpoints, and summary.json last."""
  wd.mkdir(parents=True)
  (wd / "run.json").write_text(json.dumps({"config": config}))
  (wd / "checkpoints" / "last" / "118").mkdir(parents=True)
  for k, seed in enumerate(seeds):
    lane = wd / "members" / str(k)
    (lane / "checkpoints" / "last" / "118").mkdir(parents=True)
    (lane / "checkpoints" / "last" / "118" / "state").write_bytes(b"\0" * 1000)
    (lane / "vocab.txt").write_text("a\nb\n")
    (lane / "run.json").write_text(json.dumps({"config": {**config, "members": 0, "seed": seed},
                                               "member": {"index": k, "of": len(seeds)}}))
    steps = [(10, 30.0 + k), (20, 40.0 + k)]  # (every member's records carry the run's step)
    lines = [{"kind": "train", "step": st, "epoch": 1, "train_ppl": 900.0, "steps_per_s": rate} for st, rate in steps]
    lines += [{"kind": "epoch", "epoch": e, "step": 10 * e, "valid_ppl": 800.0 - 10 * e - k} for e in (1, 2)]
    (lane / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (lane / "results.json").write_text(json.dumps({
        "config": config["name"], "seed": seed, "matmul_precision": config["matmul_precision"], "test_ppl": 700.0 + k,
        "member": {"index": k, "of": len(seeds), "run": str(wd), "diverged": None}}))
  if summary:
    (wd / "summary.json").write_text(json.dumps({"config": config["name"], "members": len(seeds), "seeds": seeds,
                                                 "diverged": []}))


def test_a_members_run_is_finished_by_its_summary_judged_by_member_0_and_collected_member_by_member(tmp_path):
  """A members job (members=2): its folder's run is resumed while it has no summary.json (the members'
  results.json alone do not make it finished), adopted once it has one, and recorded as the report imports it:
  run.json, summary.json and members/<k>/ with results.json, run.json, metrics.jsonl and curve.jsonl, without
  checkpoints. Its step and rate come from member 0's metrics. A summary of other seeds, or a plain run's
  finished folder, is set aside."""
  _parsed_flags()
  job = gj.parse_job("small_tied:members=2")
  driver = g.Driver([job], tmp_path / "runs", tmp_path / "records", 100.0, [])
  assert job.members == 2
  wd = tmp_path / "runs" / job.label
  own = {**gj.job_config(job, []).to_dict(), "matmul_precision": "tensorfloat32"}
  _members_folder(wd, own, [0, 1], summary=False)
  assert driver.progress(job) == (20, 40.0)  # member 0's latest progress record
  assert driver.adopt(job) is False and job.state == "queued" and wd.exists()  # resumed, at its own precision
  assert driver.precision(job) == "tensorfloat32"
  (wd / "summary.json").write_text(json.dumps({"config": "small_tied", "members": 2, "seeds": [0, 1]}))
  assert driver.adopt(job) is True and job.state == "finished"
  rec = tmp_path / "records" / job.label
  files = sorted(p.relative_to(rec).as_posix() for p in rec.rglob("*") if p.is_file())
  assert files == [f"members/{k}/{name}" for k in (0, 1)
                   for name in ("curve.jsonl", "metrics.jsonl", "results.json", "run.json")] + ["run.json",
                                                                                               "summary.json"]
  curve = [json.loads(line) for line in (rec / "members" / "1" / "curve.jsonl").read_text().splitlines()]
  assert [(r["epoch"], r["valid_ppl"]) for r in curve] == [(1, 789.0), (2, 779.0)]  # member 1's own
  assert json.loads((rec / "members" / "1" / "results.json").read_text())["seed"] == 1

  # another job's summary: the same config but other seeds (member_values listing them)
  job2 = gj.parse_job("small_tied:members=2:seed=4")
  driver2 = g.Driver([job2], tmp_path / "runs2", tmp_path / "records2", 100.0, [])
  wd2 = tmp_path / "runs2" / job2.label
  mine = {**gj.job_config(job2, []).to_dict(), "matmul_precision": "float32"}
  _members_folder(wd2, mine, [0, 1], summary=True)
  assert driver2.adopt(job2) is False and (tmp_path / "runs2" / f"{job2.label}.set_aside").exists()
  assert "seeds [0, 1] (job: [4, 5])" in job2.events[-1]["why"]
  # a plain run's finished folder is not the members job's
  plain = {**gj.job_config(gj.parse_job("small_tied"), []).to_dict(), "matmul_precision": "float32"}
  _folder_with_record(wd2, plain, {"config": "small_tied", "seed": 4, "matmul_precision": "float32"})
  assert driver2.adopt(job2) is False and "members 0 (job: 2)" in job2.events[-1]["why"]
  assert gj.MEMBERS_DIR == members_run.MEMBERS_DIR and gj.SUMMARY_FILE == members_run.SUMMARY_FILE


def test_a_damaged_record_is_set_aside_whole_under_a_free_name_and_said_why(tmp_path):
  """What a job's folder holds, damaged: a results.json without a run's keys, a run.json whose config is not
  an object, a members summary whose member's results are gone, a file where the folder should be. Each is
  moved aside whole (its checkpoints with it) under a name nothing holds, with the file that is wrong named."""
  _parsed_flags()
  job = gj.parse_job("small_tied")
  runs = tmp_path / "runs"
  driver = g.Driver([job], runs, tmp_path / "records", 100.0, [])
  own = {**gj.job_config(job, []).to_dict(), "matmul_precision": "float32"}
  (runs / "small_tied.set_aside" / "small_tied").mkdir(parents=True)  # taken names: never nested into
  (runs / "small_tied.set_aside.1").write_text("")
  _folder_with_record(runs / "small_tied", own, {})
  (runs / "small_tied" / "checkpoints").mkdir()
  assert driver.adopt(job) is False and job.state == "queued"
  assert (runs / "small_tied.set_aside.2" / "checkpoints").is_dir() and not (runs / "small_tied").exists()
  assert job.events[-1]["why"].startswith("its results.json is not a run's record (no 'config')")
  (runs / "small_tied").mkdir()
  (runs / "small_tied" / "run.json").write_text(json.dumps({"config": []}))
  assert driver.adopt(job) is False and "config is not an object" in job.events[-1]["why"]
  (runs / "small_tied").write_text("not a folder")
  assert driver.adopt(job) is False and job.events[-1]["moved_to"] == "small_tied.set_aside.4"
  members = gj.parse_job("small_tied:members=2")
  driver = g.Driver([members], runs, tmp_path / "records", 100.0, [])
  _members_folder(runs / members.label, {**gj.job_config(members, []).to_dict(), "matmul_precision": "float32"},
                  [0, 1], summary=True)
  (runs / members.label / "members" / "1" / "results.json").unlink()
  assert driver.adopt(members) is False and members.state == "queued"
  assert "members/1/results.json is missing" in members.events[-1]["why"]


def test_progress_skips_lines_that_are_not_progress_records(tmp_path):
  _parsed_flags()
  job = gj.parse_job("small_tied")
  driver = g.Driver([job], tmp_path / "runs", tmp_path / "records", 100.0, [])
  (tmp_path / "runs" / "small_tied").mkdir()
  good = [{"kind": "train", "step": s, "steps_per_s": 10.0 * s} for s in (10, 20)]
  (tmp_path / "runs" / "small_tied" / "metrics.jsonl").write_bytes(
      "".join(json.dumps(r) + "\n" for r in good).encode() + b'[1, 2]\n\xff\xfe\n{"kind": "train"}\n'
      b'{"kind": "train", "step": "30", "steps_per_s": 1}\n{"kind": "train", "ste')
  assert driver.progress(job) == (20, 200.0)


def test_a_members_job_restarted_one_rung_down_keeps_member_0s_probe_and_starts_a_clean_record(tmp_path,
                                                                                             monkeypatch):
  _parsed_flags()
  job = gj.parse_job("small_tied:members=2")
  driver = g.Driver([job], tmp_path / "runs", tmp_path / "records", 100.0, [])
  wd = tmp_path / "runs" / job.label
  _members_folder(wd, {**gj.job_config(job, []).to_dict(), "matmul_precision": "float32"}, [0, 1], summary=False)
  job.state = "running"
  driver.collect(job)
  rec = tmp_path / "records" / job.label
  assert (rec / "members" / "1" / "curve.jsonl").exists()
  started = []
  monkeypatch.setattr(driver, "start", lambda j: started.append((j.label, driver.precision(j))))
  driver.restart_lower(job, "too slow")
  assert started == [(job.label, "tensorfloat32")]
  assert (rec / "probe_float32.jsonl").read_text() == (tmp_path / "runs" / f"{job.label}.float32.abandoned" / "members"
                                                        / "0" / "metrics.jsonl").read_text()
  assert sorted(p.name for p in rec.iterdir()) == ["probe_float32.jsonl"]  # nothing of the abandoned run's record


def test_every_rate_check_and_the_ones_behind_a_shed_are_kept(tmp_path, monkeypatch):
  """Two jobs on their last precision rung; at the second check the first is late while sharing the device,
  so the second is shed. Both checks of each job stay in status.json, and the shed names the checks (and the
  late job) that caused it."""
  _parsed_flags()
  jobs = [gj.parse_job("large_tied"), gj.parse_job("large")]
  driver = g.Driver(jobs, tmp_path / "runs", tmp_path / "records", 1000.0, [])
  for job in jobs:
    job.state, job.rung = "running", 1
  rates = {"large_tied": iter([(400, 1000.0), (800, 10.0)]), "large": iter([(400, 1000.0), (800, 1000.0)])}
  monkeypatch.setattr(driver, "progress", lambda job: next(rates[job.label]))
  steps_of = {"large_tied": 100_000, "large": 1_000}
  driver.judge(steps_of)  # both in time: large_tied ends ≈ 170 s, large ≈ 61 s after now (deadline 1,000 s)
  assert [j.state for j in jobs] == ["running", "running"]
  driver.judge(steps_of)  # large_tied now at 10 steps/s: ≈ 10,900 s
  driver.write_status()
  status = json.loads((tmp_path / "records" / "status.json").read_text())
  tied, untied = status["jobs"]
  assert untied["state"] == "shed"
  shed = untied["events"][-1]
  assert shed["event"] == "shed" and "large_tied projected past the deadline" in shed["why"]
  behind = {c["label"]: c for c in shed["checks"]}
  assert behind["large_tied"]["projected_end_s"] > 100 and behind["large_tied"]["sharing_with"] == ["large"]
  assert [c["step"] for c in tied["checks"]] == [400, 800] and [c["step"] for c in untied["checks"]] == [400, 800]
  assert tied["checks"][0]["steps_per_s"] == 1000.0 and tied["checks"][-1] == behind["large_tied"]


def test_the_commit_is_stamped_and_a_copy_whose_code_differs_is_dirty(tmp_path):
  import shutil
  stamped = gp.stamp(tmp_path / "stamp")  # this checkout: HEAD, +dirty if its tracked code differs
  assert stamped == (tmp_path / "stamp" / "commit").read_text().strip() and len(stamped.split("+")[0]) == 40
  assert (tmp_path / "stamp" / "source").read_text().strip() == gp.source_digest(REPO)
  copy = tmp_path / "copy"  # the tree as it travels to another machine (without .git)
  for d in gp.SOURCE_DIRS:
    shutil.copytree(REPO / d, copy / d, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
  shutil.copy(REPO / "setup.py", copy / "setup.py")
  (tmp_path / "stamp" / "commit").write_text("0123abc\n")  # (a clean commit, whatever this checkout's state)
  assert gp.commit_of(tmp_path / "stamp", copy) == "0123abc"  # the same code as stamped
  (copy / "configs" / "large.py").write_text((copy / "configs" / "large.py").read_text() + "\n# edited\n")
  assert gp.commit_of(tmp_path / "stamp", copy) == "0123abc+dirty"
  (tmp_path / "stamp" / "commit").write_text("0123abc+dirty\n")
  assert gp.commit_of(tmp_path / "stamp", copy) == "0123abc+dirty"  # (said once)
  (tmp_path / "stamp" / "source").unlink()
  assert gp.commit_of(tmp_path / "stamp", copy) == "0123abc+dirty+unverified"


@pytest.mark.slow  # (a driver process)
def test_a_cpu_backend_is_refused_where_the_gpu_is_expected(tmp_path, shared_data_root):
  env = {**os.environ, "WT_JAX_DATA": str(shared_data_root), "JAX_PLATFORMS": "cpu"}
  res = subprocess.run([sys.executable, "-m", "experiments.gpu.run_queue", "--jobs=small_tied", "--expect_backend=gpu",
                        f"--run_dir={tmp_path / 'runs'}", f"--record_dir={tmp_path / 'records'}"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert res.returncode != 0 and res.stderr.strip().splitlines()[-1].startswith("JAX's backend is 'cpu', not 'gpu'")
  assert not (tmp_path / "runs" / "small_tied").exists()


def test_the_fastest_variant_is_chosen_only_if_its_loss_matches():
  v = lambda ms, nll: {"train_ms_per_step": ms, "warmup_nll": [nll, 1.0]}
  results = {"u1": v(7.0, 9.2100), "u5": v(5.0, 9.2101), "u35": v(3.0, 9.5), "u1+while": {"error": "boom"}}
  assert g.choose_variant(results) == "u5"  # u35 is faster but computed another loss
  assert g.choose_variant({"u1": {"error": "x"}}) is None
  # a members probe (experiments.bench --config.members=K): each warm-up step's loss is a list of K, and every
  # member's must match; u35 agrees on member 0 but not on member 1
  results = {"u1": v(7.0, [9.21, 9.30]), "u5": v(5.0, [9.2101, 9.3001]), "u35": v(3.0, [9.21, 9.6])}
  assert g.choose_variant(results) == "u5"


def test_a_members_probe_times_the_members_program(tmp_path, monkeypatch):
  """The probe's bench command carries the members asked for every job (--set), as well as the shapes."""
  _parsed_flags()
  cmds = []

  def fake_run(cmd, **kwargs):
    cmds.append(cmd)
    return subprocess.CompletedProcess(cmd, 1, "", "no bench here")

  monkeypatch.setattr(g.subprocess, "run", fake_run)
  g.probe(gj.parse_job("large_tied"), ["u1"], ["members=2", "hidden_size=16", "num_epochs=2"], "float32", tmp_path,
          time.time() + 100)
  assert "--config.members=2" in cmds[0] and "--config.hidden_size=16" in cmds[0]
  assert "--config.num_epochs=2" not in cmds[0]  # (a run setting, not the program's shape)


def test_a_deadline_file_moves_the_deadline(tmp_path):
  driver = g.Driver([], tmp_path / "runs", tmp_path / "records", 100.0, [])
  (tmp_path / "records" / "deadline_at").write_text(str(driver.t0 + 250.0))
  driver.read_deadline()
  assert driver.deadline == pytest.approx(driver.t0 + 250.0)
  assert driver.events[-1]["event"] == "deadline moved"
  (tmp_path / "records" / "deadline_at").write_text("garbage")
  driver.read_deadline()  # unreadable: unchanged
  assert driver.deadline == pytest.approx(driver.t0 + 250.0)
  for stale in (str(driver.t0 - 3600.0), "nan", "inf"):  # a file an earlier driver left, or not a time
    (tmp_path / "records" / "deadline_at").write_text(stale)
    driver.read_deadline()
    driver.read_deadline()  # (said once)
    assert driver.deadline == pytest.approx(driver.t0 + 250.0)
  assert [e["event"] for e in driver.events[-3:]] == ["deadline_at ignored"] * 3


def _queue(args, env, timeout=600):
  return subprocess.run([sys.executable, "-m", "experiments.gpu.run_queue", *args], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow  # (whole driver runs: training processes)
def test_a_driver_that_fails_or_is_stopped_stops_its_jobs_and_a_failed_job_fails_the_driver(tmp_path,
                                                                                            shared_data_root):
  """The driver failing (here: a file where a job's records go), or stopped by SIGTERM, stops its running jobs
  (none is left training without a driver), marks its status done and says so in one line (130 for a stop);
  a job whose process fails makes the driver exit 1, naming the job and its log."""
  env = {**os.environ, "WT_JAX_DATA": str(shared_data_root), "JAX_PLATFORMS": "cpu"}
  flags_ = ["--dry_run", "--jobs=small_tied", "--poll_s=0.2", "--min_start_s=5"]
  status = lambda rec: json.loads((rec / "status.json").read_text())
  rec = tmp_path / "a" / "records"
  rec.mkdir(parents=True)
  (rec / "small_tied").write_text("")
  res = _queue([*flags_, f"--run_dir={tmp_path / 'a' / 'runs'}", f"--record_dir={rec}"], env, timeout=120)
  assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
  assert res.stderr.strip().splitlines()[-1].startswith("The driver stopped (FileExistsError: ")
  assert "1 running job(s) stopped" in res.stderr and (rec / "driver_error.txt").read_text().startswith("Traceback")
  jobs = status(rec)["jobs"]
  assert status(rec)["done"] and [(j["state"], j["returncode"] != 0) for j in jobs] == [("stopped", True)]

  rec = tmp_path / "b" / "records"
  driver = subprocess.Popen([sys.executable, "-m", "experiments.gpu.run_queue", *flags_, f"--record_dir={rec}",
                             f"--run_dir={tmp_path / 'b' / 'runs'}"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
  t0 = time.time()
  running = lambda: (rec / "status.json").exists() and status(rec)["jobs"][0]["state"] == "running"
  while time.time() - t0 < 120 and not running():
    time.sleep(0.2)
  driver.terminate()
  out, err = driver.communicate(timeout=120)
  assert driver.returncode == 130 and "Traceback" not in err, err[-2000:]
  assert err.strip().splitlines()[-1].startswith("The driver stopped (interrupted); 1 running job(s) stopped")
  assert status(rec)["done"] and status(rec)["jobs"][0]["state"] == "stopped"

  rec = tmp_path / "c" / "records"
  res = _queue([*flags_, f"--run_dir={tmp_path / 'c' / 'runs'}", f"--record_dir={rec}",
                "--xla_flags=--xla_no_such_flag=1"], env, timeout=120)  # (XLA stops the job's process)
  assert res.returncode == 1 and json.loads(res.stdout.strip().splitlines()[-1]) == {"small_tied": "failed"}
  job = status(rec)["jobs"][0]
  log, why = rec / "small_tied" / "log.txt", job["events"][-1]["why"]  # (its reason: the log's last line)
  assert "xla_no_such_flag" in why and why == log.read_text().strip().splitlines()[-1].strip()[-300:]
  assert res.stderr.strip().splitlines()[-1] == (f"small_tied failed (return code {job['returncode']}): {why}; "
                                                  f"its log is {log}."), res.stderr[-2000:]


@pytest.mark.slow  # (whole driver runs: training processes)
def test_dry_run_probes_trains_two_jobs_side_by_side_and_leaves_whole_records(tmp_path, shared_data_root):
  """The whole path on the CPU at tiny shapes: a probe, two jobs side by side (one from a config file with
  an argument, Inan et al.'s), deterministic kernels asked for, and the records. A second driver on the same
  folders records the finished runs without rerunning them, and sets aside one whose config is no longer
  the job's."""
  env = {**os.environ, "WT_JAX_DATA": str(shared_data_root), "WT_JAX_COMMIT": "0123abc", "JAX_PLATFORMS": "cpu"}
  t0 = time.time()
  folders = [f"--run_dir={tmp_path / 'runs'}", f"--record_dir={tmp_path / 'records'}"]
  res = _queue(["--dry_run", "--jobs=small_tied", "--job=inan.py:small,al:seed=1", "--parallel=2",
                "--budget_s=600", "--min_start_s=5", "--poll_s=0.5", "--probe=large_tied", "--probe_variants=u5",
                "--probe_steps=3", "--deterministic", "--set=checkpoint_every_epochs=0", *folders], env)
  assert res.returncode == 0, res.stderr[-3000:]
  labels = ("small_tied", "inan_small_al_seed1")
  assert json.loads(res.stdout.strip().splitlines()[-1]) == {label: "finished" for label in labels}
  rec = tmp_path / "records"
  assert not list(rec.rglob("*.tmp"))  # every file renamed into place
  env_json = json.loads((rec / "env.json").read_text())
  assert env_json["backend"] == "cpu" and env_json["jax"] and env_json["driver_wall_s"] <= time.time() - t0
  assert env_json["wt_jax_commit"] == "0123abc"
  probe = json.loads((rec / "probe.json").read_text())
  # (one variant, not the default unroll, so that the job's command shows the choice; choosing among several:
  # test_the_fastest_variant_is_chosen_only_if_its_loss_matches)
  assert probe["chosen"] == "u5" and probe["variants"]["u5"]["train_ms_per_step"] > 0
  status = json.loads((rec / "status.json").read_text())
  assert status["done"] and [j["state"] for j in status["jobs"]] == ["finished", "finished"]
  assert status["jobs"][1]["config"] == "configs/inan.py:small,al"
  unroll = g.parse_variant(probe["chosen"])[0]
  for label in labels:
    results = json.loads((rec / label / "results.json").read_text())
    assert results["matmul_precision"] == "float32" and results["steps"] == results["steps_per_epoch"] * 2
    assert results["versions"]["wt_jax_commit"] == "0123abc"
    assert results == json.loads((tmp_path / "runs" / label / "results.json").read_text())  # the run's own
    # trained: far below the uniform distribution's perplexity over PTB's 10,000 words (10,000); 1,852 and 1,783
    # measured here (1,200 training tokens), each within 1% of the batched protocol's value on the same text
    assert 1000 < results["test_ppl"] < 3000 and results["device_kind"] == "cpu"
    assert results["test_ppl_batched"] == pytest.approx(results["test_ppl"], rel=0.03)
    assert "--xla_gpu_deterministic_ops=true" in results["host"]["xla_flags"]
    run = json.loads((rec / label / "run.json").read_text())
    assert run["config"]["deterministic"] is True
    curve = [json.loads(line) for line in (rec / label / "curve.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in curve] == [1, 2] and all(r["valid_ppl"] > 1 for r in curve)
    job = next(j for j in status["jobs"] if j["label"] == label)
    assert f"--config.scan_unroll={unroll}" in job["events"][0]["cmd"]  # the probe's choice reached the job
  inan = json.loads((rec / "inan_small_al_seed1" / "run.json").read_text())["config"]
  assert inan["name"] == "inan_small_al_keep" and inan["seed"] == 1 and inan["al"]["alpha"] > 0
  # checkpoint_every_epochs = 0: one checkpoint, of the final step only
  steps = sorted(p.name for p in (tmp_path / "runs" / "small_tied" / "checkpoints" / "last").iterdir()
                 if p.name.isdigit())
  assert len(steps) == 1

  # A second driver with another init_scale for every job (--set): the same folder names, but the records in
  # them are not these jobs' runs. small_tied's, finished, is the queue's to judge: set aside, trained afresh.
  # inan's, made unfinished (its results.json gone: a run stopped before its end, its checkpoint kept), the
  # trainer refuses to resume under another config: the job fails with the trainer's line, its folder kept.
  # A third driver, with the second's settings, finds small_tied's record its own: recorded, not rerun.
  (tmp_path / "runs" / "inan_small_al_seed1" / "results.json").unlink()
  res = _queue(["--dry_run", "--jobs=small_tied", "--job=inan.py:small,al:seed=1", "--budget_s=600",
                "--min_start_s=5", "--poll_s=0.5", "--deterministic", "--set=checkpoint_every_epochs=0",
                "--set=init_scale=0.05", f"--run_dir={tmp_path / 'runs'}", f"--record_dir={tmp_path / 'records2'}"],
               env)
  assert res.returncode == 1, res.stderr[-3000:]
  status = json.loads((tmp_path / "records2" / "status.json").read_text())
  tied, inan = status["jobs"]
  assert [e["event"] for e in tied["events"]][:2] == ["set aside", "start"]
  assert "init_scale 0.1 (job: 0.05)" in tied["events"][0]["why"]
  assert "holds another run's record (its run.json has init_scale" in res.stderr
  assert (tmp_path / "runs" / "small_tied.set_aside" / "results.json").exists()
  assert tied["state"] == "finished" and inan["state"] == "failed"
  refused = f"{tmp_path / 'runs' / 'inan_small_al_seed1'} was started with another config (init_scale 0.1 → 0.05"
  assert [e["event"] for e in inan["events"]] == ["start", "failed"] and inan["events"][-1]["why"].startswith(refused)
  assert f"inan_small_al_seed1 failed (return code 1): {refused}" in res.stderr.strip().splitlines()[-1]
  assert (tmp_path / "runs" / "inan_small_al_seed1" / "checkpoints").is_dir()
  res = _queue(["--dry_run", "--jobs=small_tied", "--budget_s=600", "--min_start_s=5", "--poll_s=0.5",
                "--deterministic", "--set=checkpoint_every_epochs=0", "--set=init_scale=0.05",
                f"--run_dir={tmp_path / 'runs'}", f"--record_dir={tmp_path / 'records3'}"], env)
  assert res.returncode == 0, res.stderr[-3000:]
  status = json.loads((tmp_path / "records3" / "status.json").read_text())
  assert [e["event"] for e in status["jobs"][0]["events"]] == ["finished earlier"]  # its own record: not rerun
  assert (tmp_path / "records3" / "small_tied" / "results.json").exists()


@pytest.mark.slow  # (whole driver runs: training processes)
def test_dry_run_trains_a_members_job_and_its_record_imports_member_by_member(tmp_path, shared_data_root,
                                                                             monkeypatch):
  """A members job through the whole path on the CPU — Inan et al.'s medium VD-LSTM and +AL rows, two seeds
  each, as one program (two jobs joined by '+'): trained, judged from member 0's progress records, finished by
  its summary.json, collected member by member without checkpoints, and imported by `experiments.report
  --runs=<records>` as two runs of each row, by each member's own config name. A second driver on the same
  folders records it without rerunning it."""
  env = {**os.environ, "WT_JAX_DATA": str(shared_data_root), "WT_JAX_COMMIT": "0123abc", "JAX_PLATFORMS": "cpu"}
  spec = "inan.py:medium,vd:members=2 + inan.py:medium,al:members=2"
  label = "inan_medium_vd_members2__inan_medium_al_members2"
  common = ["--dry_run", f"--job={spec}", "--budget_s=600", "--min_start_s=5", "--poll_s=0.5", "--check_steps=40",
            "--set=checkpoint_every_epochs=0", f"--run_dir={tmp_path / 'runs'}"]
  res = _queue([*common, f"--record_dir={tmp_path / 'records'}"], env)
  assert res.returncode == 0, res.stderr[-3000:]
  assert json.loads(res.stdout.strip().splitlines()[-1]) == {label: "finished"}
  rec = tmp_path / "records" / label
  status = json.loads((tmp_path / "records" / "status.json").read_text())
  job = status["jobs"][0]
  assert job["state"] == "finished" and job["members"] == 4
  _parsed_flags()
  monkeypatch.setenv("WT_JAX_DATA", str(shared_data_root))
  steps = gj.steps_of_job(gj.parse_job(spec), [*g.DRY_RUN_SET, "checkpoint_every_epochs=0"])
  member0 = [json.loads(line) for line in (tmp_path / "runs" / label / "members" / "0" / "metrics.jsonl"
                                                 ).read_text().splitlines()]
  train = {r["step"]: r["steps_per_s"] for r in member0 if r["kind"] == "train"}
  assert job["checks"] and all(train[c["step"]] == pytest.approx(c["steps_per_s"], abs=0.01) for c in job["checks"])
  files = sorted(p.relative_to(rec).as_posix() for p in rec.rglob("*") if p.is_file())
  assert files == ["log.txt"] + [f"members/{k}/{name}" for k in range(4) for name in (
      "curve.jsonl", "metrics.jsonl", "results.json", "run.json")] + ["run.json", "summary.json"]
  assert json.loads((rec / "run.json").read_text())["config"]["member_values"].startswith("name=inan_medium_vd_keep,")
  summary = json.loads((rec / "summary.json").read_text())
  assert summary["seeds"] == [0, 1, 0, 1] and summary["diverged"] == [] and summary["config"] == "inan_medium_vd_keep"
  assert summary["by_config"]["inan_medium_al_keep"]["members"] == [2, 3]
  for k, (seed, name, alpha) in enumerate([(0, "vd", 0.0), (1, "vd", 0.0), (0, "al", 13.0), (1, "al", 13.0)]):
    results = json.loads((rec / "members" / str(k) / "results.json").read_text())
    assert results["seed"] == seed and results["member"]["index"] == k and results["steps"] == steps
    assert results["config"] == f"inan_medium_{name}_keep"
    assert json.loads((rec / "members" / str(k) / "run.json").read_text())["config"]["al"]["alpha"] == alpha
    assert [json.loads(line)["epoch"] for line in (rec / "members" / str(k) / "curve.jsonl").read_text().splitlines()
            ] == [1, 2]
  assert sum(p.stat().st_size for p in rec.rglob("*") if p.is_file()) < 400_000  # (the run folder holds MBs)

  # The record as the report reads it: the medium VD and +AL rows get two seeds each.
  res = subprocess.run([sys.executable, "-m", "experiments.report", "inan_table1_2", f"--runs={tmp_path / 'records'}",
                        f"--out={tmp_path / 'results'}"], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=300)
  assert res.returncode == 0, res.stderr[-3000:]
  imported = tmp_path / "results" / "inan_table1_2"
  assert sorted(p.name for p in imported.iterdir() if p.is_dir()) == [f"{label}_m{k}" for k in range(4)]
  for variant in ("VD-LSTM", "+ AL"):
    row = next(line for line in res.stdout.splitlines()
               if f"| medium (650) | {variant} |" in line and "| PTB |" in line)
    assert "| 0, 1 |" in row and " ± " in row, row

  res = _queue([*common, f"--record_dir={tmp_path / 'records2'}"], env)
  assert res.returncode == 0, res.stderr[-3000:]
  status = json.loads((tmp_path / "records2" / "status.json").read_text())
  assert [e["event"] for e in status["jobs"][0]["events"]] == ["finished earlier"]
  assert (tmp_path / "records2" / label / "members" / "3" / "results.json").exists()


@pytest.mark.slow  # (whole driver runs: training processes)
def test_gpu_window_script_leaves_the_driver_running_past_its_call_and_later_calls_collect_and_start_anew(
    tmp_path, shared_data_root):
  """experiments/gpu/window.sh as a lent machine runs it (tiny shapes on the CPU, allowed by WT_GPU_BACKEND).
  A first call with no time to wait (WAIT_S counts from the script's start, so the preflight has used it up)
  sets up, passes the preflight, starts the driver in a session of its own and returns while it trains; a
  second call without flags starts nothing, moves the deadline, waits for the driver and packs its records; a
  third call with other jobs starts a second driver for them."""
  import tarfile
  root = tmp_path / "root"
  (root / "site").mkdir(parents=True)
  (root / "site" / ".installed").touch()  # the carried wheels (absent here) count as installed
  env = {**os.environ, "WT_GPU_ROOT": str(root), "WT_JAX_DATA": str(shared_data_root), "JAX_PLATFORMS": "cpu",
         "WT_GPU_BACKEND": "cpu", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
  out1, out2, out3 = tmp_path / "out1", tmp_path / "out2", tmp_path / "out3"
  res = subprocess.run(
      ["bash", "experiments/gpu/window.sh", "1", str(out1), "--dry_run", "--jobs=small_tied", "--parallel=1",
       "--budget_s=300", "--min_start_s=1", "--poll_s=0.5", "--precisions=tensorfloat32"],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
  assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
  assert "preflight passed" in res.stdout and "driver still running" in res.stdout, res.stdout[-3000:]
  assert (out1 / "records.tgz").exists()
  res = subprocess.run(["bash", "experiments/gpu/window.sh", "300", str(out2)], cwd=REPO,
                       env={**env, "EXTEND_TO": "240"}, capture_output=True, text=True, timeout=600)
  assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
  assert "preflight" not in res.stdout and "driver finished" in res.stdout, res.stdout[-3000:]
  assert float((root / "records" / "deadline_at").read_text()) > time.time()
  with tarfile.open(out2 / "records.tgz") as tar:
    names = set(tar.getnames())
  assert {"records/env.json", "records/status.json", "records/small_tied/results.json",
          "records/small_tied/run.json", "records/small_tied/curve.jsonl"} <= names
  status = json.loads((out2 / "status.json").read_text())
  assert status["jobs"][0]["state"] == "finished"
  assert any(e["event"] == "deadline moved" for e in status["events"])
  res = subprocess.run(
      ["bash", "experiments/gpu/window.sh", "300", str(out3), "--dry_run", "--jobs=small_tied,small:seed=1:members=2",
       "--budget_s=300", "--min_start_s=1", "--poll_s=0.5", "--precisions=tensorfloat32"],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
  assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
  assert "driver 2 started" in res.stdout and "driver finished" in res.stdout, res.stdout[-3000:]
  status = json.loads((out3 / "status.json").read_text())
  assert [(j["label"], j["state"]) for j in status["jobs"]] == [("small_tied", "finished"),
                                                                 ("small_seed1_members2", "finished")]
  assert [e["event"] for e in status["jobs"][0]["events"]] == ["finished earlier"]
  with tarfile.open(out3 / "records.tgz") as tar:
    names = set(tar.getnames())
  # a members job's record travels in the archive whole (its folders nested), without checkpoints
  assert {"records/small_tied/results.json", "records/driver2/status.json", "records/driver2/small_seed1_members2/"
          "summary.json", "records/driver2/small_seed1_members2/members/1/results.json",
          "records/driver2/small_seed1_members2/members/1/curve.jsonl"} <= names
  assert not any("checkpoints" in name for name in names)


@pytest.mark.slow  # (the window script's processes)
def test_gpu_window_script_refuses_a_machine_whose_jax_backend_is_not_the_gpu(tmp_path, shared_data_root):
  root = tmp_path / "root"
  (root / "site").mkdir(parents=True)
  (root / "site" / ".installed").touch()
  env = {**os.environ, "WT_GPU_ROOT": str(root), "WT_JAX_DATA": str(shared_data_root), "JAX_PLATFORMS": "cpu",
         "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
  env.pop("WT_GPU_BACKEND", None)
  res = subprocess.run(["bash", "experiments/gpu/window.sh", "60", str(tmp_path / "out"), "--jobs=small_tied"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
  assert res.returncode == 1, res.stdout[-3000:]
  assert "preflight failed: JAX's backend is 'cpu', not 'gpu'" in res.stdout, res.stdout[-3000:]
  assert not (root / "driver.pid").exists()
