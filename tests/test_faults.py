"""Runs that meet faults: damaged or unreadable checkpoints, outputs this user may not write, files and folders
in each other's places, divergence, a busy or killed workdir, damaged records, a full disk, and what the entry
points print for each (one line, never a lost checkpoint or result)."""
import json
import math
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import (REPO, RESUMED, STEPS_PER_EPOCH, assert_same_numbers, entry_args, resumed_config,
                            run_entry, start_entry, tiny_config)
from wt_jax import files, lm_eval
from wt_jax.errors import InputError
from wt_jax.train import lm, trainer

# tiny_corpus, uninterrupted: tests/conftest.py


# --- faults: damaged checkpoints, divergence, a busy workdir ----------------------------------------

def test_a_damaged_newest_checkpoint_is_moved_aside_and_the_run_resumes_from_the_one_before(tiny_corpus,
                                                                                            uninterrupted, tmp_path,
                                                                                            caplog):
  """Two epochs, then the newest `last` step (epoch 2's end) damaged — its data files cut to half — and the run
  resumed: the run says so in one warning line, moves that step aside (kept as `<step>.unreadable`, not deleted),
  resumes from the end of epoch 1 and trains epoch 2 again, saving its `last` and `best` again (the old `best` of
  that step, from the lost stretch, is moved aside as `.superseded` rather than clashing with the new save), and
  ends with the numbers of the uninterrupted run. (Every task saves through the same `Checkpoints`.)"""
  corpus, _ = tiny_corpus
  lm.fit(resumed_config(num_epochs=2, max_steps=0), corpus, tmp_path)
  ckpts = tmp_path / "checkpoints"
  epoch1, epoch2 = STEPS_PER_EPOCH, 2 * STEPS_PER_EPOCH
  assert sorted(int(p.name) for p in (ckpts / "last").iterdir()) == [epoch1, epoch2]
  assert sorted(int(p.name) for p in (ckpts / "best").iterdir()) == [epoch2]  # (epoch 2 validated better)
  for data in (ckpts / "last" / str(epoch2) / "state").rglob("d/*"):  # the arrays' data, each cut to half
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
  with caplog.at_level("WARNING"):
    res = lm.fit(resumed_config(), corpus, tmp_path)
  warnings = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
  assert len(warnings) == 1 and f"step {epoch2}" in warnings[0] and "\n" not in warnings[0], warnings
  assert res["resumed_from_step"] == epoch1
  assert (ckpts / "last" / f"{epoch2}.unreadable").is_dir() and (ckpts / "best" / f"{epoch2}.superseded").is_dir()
  assert any("superseded" in r.getMessage() for r in caplog.records)
  assert_same_numbers(res, uninterrupted)


def test_a_damaged_best_checkpoint_is_moved_aside_and_the_run_resumes_choosing_its_best_again(tiny_corpus, tmp_path,
                                                                                                caplog):
  """Two epochs, then `best` (epoch 2's) damaged and the run resumed for a third: one warning line, `best` moved
  aside (`<step>.unreadable`), the run resumes from `last` at once (no traceback, nothing to delete by hand), and
  its best is chosen again from the epochs validated after the resume: here epoch 3, saved as the new `best`."""
  corpus, _ = tiny_corpus
  lm.fit(resumed_config(num_epochs=2, max_steps=0), corpus, tmp_path)
  ckpts, epoch2 = tmp_path / "checkpoints", 2 * STEPS_PER_EPOCH
  assert sorted(int(p.name) for p in (ckpts / "best").iterdir()) == [epoch2]
  for data in (ckpts / "best" / str(epoch2) / "state").rglob("d/*"):
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
  with caplog.at_level("WARNING"):
    res = lm.fit(resumed_config(num_epochs=3, max_steps=0, allow_resume_changes=True), corpus, tmp_path)
  warnings = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
  assert len(warnings) == 1 and "best" in warnings[0] and "\n" not in warnings[0], warnings
  assert res["resumed_from_step"] == epoch2 and res["best_epoch"] == 3
  assert res["best_valid_ppl"] == res["history"][-1]["valid_ppl"]
  assert (ckpts / "best" / f"{epoch2}.unreadable").is_dir() and (ckpts / "best" / str(3 * STEPS_PER_EPOCH)).is_dir()


def _refused(monkeypatch, refused: dict) -> None:
  """This process may not read or write some paths: `refused` maps a path to the os.access mode bits refused
  there. Each path is chmod-ed so (which a non-root user's reads and writes obey) and `os.access` answers so
  (root passes every mode check of the kernel: for root the refusal is modelled, not real)."""
  real = os.access
  for path, mode in refused.items():
    bits = {os.R_OK: 0o444, os.W_OK: 0o222, os.X_OK: 0o111}
    os.chmod(path, os.stat(path).st_mode & ~sum(b for m, b in bits.items() if mode & m))
  monkeypatch.setattr(os, "access", lambda path, mode, **kw: (
      not (mode & refused.get(os.fspath(path), 0)) and real(path, mode, **kw)))


def test_a_checkpoint_this_user_may_not_read_stops_the_run_and_is_not_moved(tmp_path, monkeypatch):
  """A step whose read fails while one of its files is one this process may not read is a permission to
  fix, not damage: `CheckpointUnreadableError` names the file, the step stays in place (not `.unreadable`,
  which would start the run over from an older step) and, readable again, it is the step resumed."""
  from wt_jax.train import checkpoint
  state = {"params": {"w": jnp.arange(6.0).reshape(2, 3)}, "step": jnp.int32(0)}
  ckpts = checkpoint.Checkpoints(tmp_path / "checkpoints")
  for step in (2, 4):
    ckpts.save("last", step, {**state, "step": jnp.int32(step)}, {"step": step})
  step4 = tmp_path / "checkpoints" / "last" / "4"
  largest = max((p for p in step4.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
  _refused(monkeypatch, {os.fspath(largest): os.R_OK})
  if os.geteuid() == 0:  # root reads it anyway: the read fails as orbax's fails for another user
    mngr = ckpts._managers["last"]
    def refused_read(step, *a, **kw):
      raise KeyError("Unknown key: state. Available keys: dict_keys([])")
    monkeypatch.setattr(mngr, "item_metadata", refused_read)
  with pytest.raises(checkpoint.CheckpointUnreadableError, match=f"step 4.*permission denied: {largest}"):
    ckpts.restore_intact(state)
  assert sorted(p.name for p in step4.parent.iterdir()) == ["2", "4"]
  monkeypatch.undo()
  largest.chmod(0o644)
  ckpts.close()
  restored, meta, kind, step = checkpoint.Checkpoints(tmp_path / "checkpoints").restore_intact(state)
  assert (kind, step, int(restored["step"]), meta) == ("last", 4, 4, {"step": 4})


def test_a_run_whose_outputs_this_user_may_not_write_stops_before_training(tiny_corpus, tmp_path, monkeypatch):
  """A resumed run whose results.json (or a checkpoint folder) this process may not write stops at once with
  a PermissionError naming it, before a step is trained or a line written — not at the end, after training."""
  corpus, _ = tiny_corpus
  lm.fit(tiny_config(max_steps=2), corpus, tmp_path)
  for name in ("results.json", "checkpoints/best"):
    lines = (tmp_path / "metrics.jsonl").read_text()
    with monkeypatch.context() as m:
      _refused(m, {os.fspath(tmp_path / name): os.W_OK})
      with pytest.raises(PermissionError) as refused:
        lm.fit(tiny_config(max_steps=4, allow_resume_changes=True), corpus, tmp_path)
    (tmp_path / name).chmod(0o755)
    assert refused.value.filename == os.fspath(tmp_path / name)
    assert (tmp_path / "metrics.jsonl").read_text() == lines
  assert lm.fit(tiny_config(max_steps=4, allow_resume_changes=True), corpus, tmp_path)["steps"] == 4


@pytest.mark.parametrize("error, says", [
    (InputError("Unknown optimizer 'adamw'; expected 'sgd' or 'adam'."),
     "Unknown optimizer 'adamw'; expected 'sgd' or 'adam'."),
    (PermissionError(13, "Permission denied", "/data/ptb/ptb.train.txt"),
     "Permission denied: '/data/ptb/ptb.train.txt'; check the owner and mode of it and of the folders above it."),
    (OSError(28, "No space left on device", "/runs/x/results.json"),
     "No space left on device: '/runs/x/results.json'; free some space or use another folder.")])
def test_an_entry_point_refused_by_the_machine_ends_with_one_line(error, says):
  """`experiments.run_main`: a value the library refuses (`InputError`), or an OSError that says the machine
  refused (a permission, a full or read-only disk), ends the process with its message (and path) as one line,
  exit status 1; any other error keeps its traceback."""
  import experiments

  def main(argv):
    raise error

  with pytest.raises(SystemExit) as ended:  # (`run_main` = absl's app.run of `one_line(main)`)
    experiments.one_line(main, ["entry"])
  assert ended.value.code == says
  def other(argv):
    raise FileNotFoundError(2, "No such file or directory", "/nowhere")
  with pytest.raises(FileNotFoundError):
    experiments.one_line(other, ["entry"])


def test_a_file_where_a_folder_is_needed_ends_with_one_line(tmp_path):
  """`one_line`: a folder that cannot be made because a file has its name (mkdir's EEXIST) or stands above it
  (ENOTDIR) is one line; an EEXIST on something that is not a file keeps its traceback."""
  import experiments
  (tmp_path / "a_file").write_text("x")

  for path in (tmp_path / "a_file", tmp_path / "a_file" / "below"):
    with pytest.raises(SystemExit) as ended:
      experiments.one_line(lambda argv: Path(path).mkdir(parents=True, exist_ok=True), ["entry"])
    assert "is a file (or under one) where a folder is needed" in ended.value.code and str(path) in ended.value.code

  def exists(argv):
    (tmp_path / "a_folder").mkdir()
    (tmp_path / "a_folder").mkdir()  # (a folder made twice: a bug, not the user's file)
  with pytest.raises(FileExistsError):
    experiments.one_line(exists, ["entry"])


@pytest.mark.parametrize("name", ["run.lock", "run.json", "results.json", "checkpoints", "checkpoints/last"])
def test_a_folder_where_a_runs_file_goes_or_a_file_where_its_folder_goes_is_one_line(tiny_corpus, tmp_path, name):
  """A folder in the place of the run's lock, of its record (at a resume) or of an output, or a file in the
  place of its checkpoints' folders: the run fails with EISDIR or ENOTDIR naming it, which a training tool
  (`one_line` with the trainer's STOPS) ends with as one line, not a traceback or "permission denied"; before any
  training (`files.check_writable`: not at the end, after the whole run); the thing in the way is left as it
  was."""
  import experiments
  corpus, _ = tiny_corpus
  workdir = tmp_path / "run"
  if name == "run.json":  # a run that has saved, so the next start is a resume that reads its record
    lm.fit(resumed_config(max_steps=2), corpus, workdir)
    (workdir / name).unlink()
  path = workdir / name
  if name.startswith("checkpoints"):  # a file where a folder goes
    path.parent.mkdir(parents=True)
    path.write_text("x")
    says = f"Not a directory: {str(path)!r} is a file (or under one) where a folder is needed; move it or give "
  else:
    (path / "inside").mkdir(parents=True)
    says = f"Is a directory: {str(path)!r} is a folder where a file is needed; move it or give "
  with pytest.raises(SystemExit) as ended:
    experiments.one_line(lambda argv: lm.fit(resumed_config(max_steps=4), corpus, workdir), ["entry"], trainer.STOPS)
  assert ended.value.code == says + "another folder."
  assert (path / "inside").is_dir() if path.is_dir() else path.read_text() == "x"
  if name != "run.json":  # refused before any training
    assert not (workdir / "metrics.jsonl").exists()


def test_an_output_folder_that_is_a_file_is_one_line_naming_the_flag(tmp_path):
  """`experiments.check_folder`, which every entry point calls on each folder it writes before any work (each
  tool's process: test_an_output_folder_that_is_a_file_is_refused_before_any_work): a file at the folder's place,
  or above it, is one line naming the flag; a folder that is not there yet, or a bucket's, passes."""
  import experiments
  (tmp_path / "a_file").write_text("x")
  for path in (tmp_path / "a_file", tmp_path / "a_file" / "run"):
    with pytest.raises(SystemExit) as ended:
      experiments.one_line(lambda argv: experiments.check_folder(path, "--workdir"), ["entry"])
    assert ended.value.code == (f"--workdir={path}: {tmp_path / 'a_file'} is a file, not a folder; move it or give "
                                "another folder.")
  experiments.check_folder(tmp_path / "new" / "run", "--workdir")
  experiments.check_folder("gs://bucket/run", "--workdir")
  assert (tmp_path / "a_file").read_text() == "x" and not (tmp_path / "new").exists()


@pytest.mark.slow  # (a process per tool)
@pytest.mark.parametrize("args", [
    ["experiments.ptb", "--config=configs/small.py", "--workdir={file}/run"],
    ["experiments.word2vec", "--config=configs/w2v_tied.py", "--workdir={file}"],
    ["experiments.nmt", "--config=configs/nmt_multi30k_baseline.py", "--workdir={file}"],
    ["experiments.studies.inan_sweep", "--workdir={file}"],
    ["experiments.embeddings", "--lm_untied={dir}", "--lm_tied={dir}", "--tables_dir={file}"],
    ["experiments.export", "--workdir={dir}", "--out={file}/export"],
    ["experiments.compile", "--config=configs/small.py", "--topology=v5e:1x1", "--dump_dir={file}"],
    ["experiments.report", "ptb_table6", "--out={file}"]])
def test_an_output_folder_that_is_a_file_is_refused_before_any_work(args, tmp_path):
  """Every entry point that writes a folder checks it first (`experiments.check_folder`): a file in its place is
  one line naming the flag, before a corpus is read, a run trained or a table computed (the folders and data
  given here would fail later, with another message)."""
  (tmp_path / "a_file").write_text("x")
  args = [a.format(file=tmp_path / "a_file", dir=tmp_path / "no_run") for a in args]
  env = dict(os.environ, WT_JAX_DATA=str(tmp_path / "empty"), JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env, capture_output=True, text=True,
                        timeout=300)
  flag = next(a for a in args if "a_file" in a).split("=")[0]
  assert proc.returncode == 1, proc.stderr[-3000:]
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith(f"{flag}=") and "is a file, not a folder" in last, proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr and (tmp_path / "a_file").read_text() == "x"


@pytest.mark.parametrize("damage", ["cut", "flipped"])
def test_a_step_that_is_not_as_saved_is_found_before_orbax_reads_it(tmp_path, monkeypatch, damage):
  """Each saved step lists its files (`checkpoint.MANIFEST`: bytes, CRC-32): a step whose largest file was cut in half,
  or has one byte changed at the same length, is moved aside without orbax being asked to read it (whose reads of a
  damaged step fail part way and report the abandoned rest later); a step without the list is read by orbax."""
  from wt_jax.train import checkpoint
  state = {"params": {f"w{i}": jnp.full((64, 64), float(i)) for i in range(3)}, "step": jnp.int32(0)}
  ckpts = checkpoint.Checkpoints(tmp_path / "checkpoints")
  for step in (2, 4):
    ckpts.save("last", step, state, {"step": step})
  asked = []
  read = checkpoint.Checkpoints.restore
  monkeypatch.setattr(checkpoint.Checkpoints, "restore", lambda self, kind, target, step=None: (
      asked.append(step), read(self, kind, target, step))[1])
  largest = max((p for p in (tmp_path / "checkpoints" / "last" / "4").rglob("*") if p.is_file()),
                key=lambda p: p.stat().st_size)
  data = largest.read_bytes()
  largest.write_bytes(data[: len(data) // 2] if damage == "cut" else data[:100] + bytes([data[100] ^ 1]) + data[101:])
  assert ckpts.restore_intact(state)[2:] == ("last", 2) and asked == [2]
  assert (tmp_path / "checkpoints" / "last" / "4.unreadable").is_dir()
  (tmp_path / "checkpoints" / "last" / "2" / checkpoint.MANIFEST).unlink()  # (a step saved before the lists)
  assert ckpts.restore_intact(state)[2:] == ("last", 2) and asked == [2, 2]
  ckpts.close()


def test_a_damaged_step_falls_back_and_leaves_the_users_hooks_and_loggers_as_they_were(tmp_path, monkeypatch):
  """Reading a damaged newest `last` (its largest file cut in half) moves it aside and restores the one before;
  `sys.unraisablehook` and the asyncio and absl loggers' filters are what the user had, intact read or not (orbax's
  own reports of its abandoned reads are orbax's: they may reach them)."""
  import logging as std_logging
  from absl import logging as absl_logging
  from wt_jax.train.checkpoint import Checkpoints
  state = {"params": {f"w{i}": jnp.full((64, 64), float(i)) for i in range(6)}, "step": jnp.int32(0)}
  ckpts = Checkpoints(tmp_path / "checkpoints")
  for step in (2, 4):
    ckpts.save("last", step, state, {"step": step})
  recorder = lambda u: None
  monkeypatch.setattr(sys, "unraisablehook", recorder)
  loggers = (std_logging.getLogger("asyncio"), absl_logging.get_absl_logger())
  filters = [list(l.filters) for l in loggers]
  assert ckpts.restore_intact(state)[2:] == ("last", 4)
  largest = max((p for p in (tmp_path / "checkpoints" / "last" / "4").rglob("*") if p.is_file()),
                key=lambda p: p.stat().st_size)
  largest.write_bytes(largest.read_bytes()[: largest.stat().st_size // 2])
  assert ckpts.restore_intact(state)[2:] == ("last", 2)
  ckpts.close()
  assert (tmp_path / "checkpoints" / "last" / "4.unreadable").is_dir()
  assert sys.unraisablehook is recorder and [list(l.filters) for l in loggers] == filters


# lr 1e3: the perplexity overflows; 1e20: the loss itself becomes inf/NaN
@pytest.mark.parametrize("lr", [1e3, pytest.param(1e20, marks=pytest.mark.slow)])
def test_a_diverged_run_stops_with_an_error_and_keeps_the_last_finite_checkpoint(tiny_corpus, tmp_path, lr):
  """A loss or perplexity that is no longer finite stops the run before the next save: every checkpoint left
  holds finite parameters, results.json is the previous run's, and the JSON lines hold no NaN/Infinity."""
  from wt_jax.train.checkpoint import Checkpoints
  import re
  corpus, _ = tiny_corpus
  diverging = lambda **kw: tiny_config(num_epochs=3, learning_rate=lr, clip_norm=1e9, allow_resume_changes=True, **kw)
  # The first step whose training loss or perplexity is not finite: the same runs, checked after every step.
  lm.fit(tiny_config(max_steps=3), corpus, tmp_path / "probe")
  with pytest.raises(trainer.NonFiniteLossError) as first:
    lm.fit(diverging(log_every=1, checkpoint_every_steps=0), corpus, tmp_path / "probe")
  first_bad = int(re.search(r"(?:before|at) step (\d+)", str(first.value)).group(1))
  lm.fit(tiny_config(max_steps=3), corpus, tmp_path)
  results = (tmp_path / "results.json").read_text()
  with pytest.raises(trainer.NonFiniteLossError, match="diverged|non-finite"):
    lm.fit(diverging(checkpoint_every_steps=1, log_every=5), corpus, tmp_path)
  ck = Checkpoints(tmp_path / "checkpoints", read_only=True)
  assert max(ck.steps("last")) == first_bad - 1  # saved every step up to, and not including, the first bad one
  for kind in ("last", "best"):
    for step in ck.steps(kind):
      state, meta = ck.restore_saved(kind, step)
      assert all(np.isfinite(x).all() for x in jax.tree_util.tree_leaves(state["params"])), (kind, step)
      sums = meta["epoch_sums"] or {"nll": 0.0, "tokens": 0}
      assert math.isfinite(lm_eval.perplexity(sums["nll"], int(sums["tokens"]))), (kind, step, sums)
  ck.close()
  assert (tmp_path / "results.json").read_text() == results
  for line in (tmp_path / "metrics.jsonl").read_text().splitlines():  # valid JSON for every reader
    json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in metrics.jsonl"))


_HOLD_LOCK = ("import os, sys, time\nfrom etils import epath\nfrom wt_jax.train import workdir_lock\n"
              "with workdir_lock.workdir_lock(epath.Path(sys.argv[1])):\n"
              "  if sys.argv[3] and os.fork() == 0:  # a child that shares the lock until the file argv[3] exists\n"
              "    while not os.path.exists(sys.argv[3]):\n      time.sleep(0.01)\n    os._exit(0)\n"
              "  print('held', flush=True)\n  time.sleep(float(sys.argv[2]))\n")


def _lock_holder(workdir, seconds, shared_until=None):
  """A live process of this host that holds `workdir`'s lock for `seconds` (returns once it holds it). With
  `shared_until` (a path), a child it forks holds the same lock (the kernel's lock belongs to the open file, which
  the child inherits) until that file exists, however the holder itself ends."""
  proc = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(workdir), str(seconds), str(shared_until or "")],
                          cwd=REPO,
                          env=dict(os.environ, JAX_PLATFORMS="cpu"), stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
  assert proc.stdout.readline().strip() == "held"
  return proc


@pytest.fixture
def lock_waits(monkeypatch):
  """The pauses `workdir_lock` makes while it waits for a holder (a list of seconds, empty if it waited for
  none): what a test reads instead of a clock."""
  from wt_jax.train import workdir_lock
  waits = []

  class _Time:  # workdir_lock's `time`, counting its sleeps
    def __getattr__(self, name):
      return getattr(time, name)

    def sleep(self, seconds):
      waits.append(seconds)
      time.sleep(seconds)

  monkeypatch.setattr(workdir_lock, "time", _Time())
  return waits


def test_a_live_holder_is_refused_and_a_dead_ones_lock_taken_over(tiny_corpus, tmp_path, caplog, lock_waits):
  corpus, _ = tiny_corpus
  tmp_path.mkdir(exist_ok=True)
  holder = _lock_holder(tmp_path, 60)
  try:
    with pytest.raises(trainer.WorkdirBusyError, match=f"in use by PID {holder.pid} "):
      lm.fit(tiny_config(max_steps=2), corpus, tmp_path)
    assert lock_waits == []  # a live holder that is not exiting is refused at once, not waited for
  finally:
    holder.kill()
    holder.wait()
  lock = tmp_path / "run.lock"
  dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
  lock.write_text(json.dumps({"host": __import__("socket").gethostname(), "pid": int(dead.stdout), "started": "x"}))
  with caplog.at_level("WARNING"):
    res = lm.fit(tiny_config(max_steps=2), corpus, tmp_path)
  assert res["steps"] == 2 and any("Taking over the lock" in r.getMessage() for r in caplog.records)
  assert not lock.exists()  # released at the end


def test_a_killed_holders_lock_is_free_at_once_and_one_still_held_as_it_exits_is_waited_for(tmp_path, caplog,
                                                                                             lock_waits):
  """A holder killed with SIGKILL and not reaped (a zombie for as long as its parent does not wait, as under a
  container's init that never reaps: here, this test) has had its files closed by the kernel once its last thread
  has exited: the lock is taken at once, with a warning naming the holder its file named. A holder killed while
  the lock is still held — here by a child it forked, which lets go when told — is one on its way out: it is
  waited for, not refused.
  (Through the entry point, the same command again after kill -9: test_a_run_killed_with_sigkill_resumes_...)"""
  import signal
  from etils import epath
  from wt_jax.train import workdir_lock
  holder = _lock_holder(tmp_path, 60)
  os.kill(holder.pid, signal.SIGKILL)  # (not reaped: a zombie until the end of the test)
  # The kernel marks the main thread a zombie when it has exited, and closes the process's files when its last
  # thread has (the holder has a dozen: jax's): wait for both, or the lock may still be held (BUILD_NOTES §60).
  while (Path(f"/proc/{holder.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
         or len(os.listdir(f"/proc/{holder.pid}/task")) > 1):
    time.sleep(0.01)
  try:
    with caplog.at_level("WARNING"), workdir_lock.workdir_lock(epath.Path(tmp_path), wait_s=120):
      assert lock_waits == [] and json.loads((tmp_path / "run.lock").read_text())["pid"] == os.getpid()
    assert any(f"Taking over the lock of PID {holder.pid} " in r.getMessage() for r in caplog.records)
  finally:
    holder.wait()
  release = tmp_path / "release"
  holder = _lock_holder(tmp_path, 60, shared_until=release)
  os.kill(holder.pid, signal.SIGKILL)
  taken = []
  waiter = threading.Thread(target=lambda: _take_lock(workdir_lock, epath.Path(tmp_path), taken))
  try:
    waiter.start()
    while not lock_waits and waiter.is_alive():  # until it waits for the dying holder (or ends without waiting)
      time.sleep(0.01)
    assert lock_waits and not taken  # waiting, not refused, while the child holds the lock
    release.touch()  # the child lets go
    waiter.join(120)
    assert taken == [os.getpid()], taken
  finally:
    release.touch()
    holder.wait()


def _take_lock(lock_module, workdir, taken):
  """Take `workdir`'s lock (waiting up to 120 s for a dying holder), appending the PID its file then names."""
  with lock_module.workdir_lock(workdir, wait_s=120):
    taken.append(json.loads((workdir / "run.lock").read_text())["pid"])


def test_a_holder_that_has_not_written_who_it_is_is_refused_as_such(tmp_path):
  """A lock held by a process that has not written run.lock (another run starting, another program) is waited for
  `wait_s`, then refused with a message that says so, not "PID None on None". (The holder is this process: flock
  belongs to the open file, so a second open of run.lock is refused as another process would be.)"""
  import fcntl
  from etils import epath
  from wt_jax.train import workdir_lock
  fd = os.open(tmp_path / "run.lock", os.O_RDWR | os.O_CREAT)
  try:
    fcntl.flock(fd, fcntl.LOCK_EX)
    with pytest.raises(trainer.WorkdirBusyError, match="in use by a process that has not written who it is"):
      with workdir_lock.workdir_lock(epath.Path(tmp_path), wait_s=0.5):
        pass
  finally:
    os.close(fd)


@pytest.mark.slow  # (two training processes; the lock's part alone: test_a_killed_holders_lock_is_free_at_once_...)
def test_a_run_killed_with_sigkill_resumes_at_once_to_the_same_numbers(tiny_corpus, uninterrupted, tmp_path):
  """SIGKILL a training process after its first checkpoint and, without waiting for it (not even reaping it: it
  may be a zombie for a while), run the same command again: it starts at once, resumes from a checkpoint the
  killed process saved and ends with the numbers of the uninterrupted run."""
  import signal
  _, root = tiny_corpus
  args = [*entry_args(**RESUMED, checkpoint_every_steps=20, log_every=50), f"--workdir={tmp_path}"]
  last = tmp_path / "checkpoints" / "last"
  proc = start_entry(args, root)
  try:
    t_end = time.time() + 120
    while time.time() < t_end and proc.poll() is None and not (last.is_dir() and
                                                               any(p.name.isdigit() for p in last.iterdir())):
      time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    again = run_entry(args, root)
  finally:
    proc.wait()
  assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
  assert again.returncode == 0 and "in use by" not in again.stderr, again.stderr[-3000:]
  resumed = json.loads((tmp_path / "results.json").read_text())
  assert resumed["resumed_from_step"] and resumed["resumed_from_step"] % 20 == 0
  assert_same_numbers(resumed, uninterrupted)


_HOLD_SILENTLY = ("import fcntl, os, sys, time\nfd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
                  "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)\n")


@pytest.mark.parametrize("signame", [pytest.param("SIGINT", marks=pytest.mark.slow), "SIGTERM"])
def test_a_signal_while_a_run_sets_up_ends_it_as_pythons_default_does(tiny_corpus, tmp_path, signame):
  """Before the training loop no handler is set (nothing is trained yet, so nothing waits to be saved): SIGINT and
  SIGTERM end the tool at once, by the kernel's default action (`experiments.start` sets SIGINT's: a KeyboardInterrupt
  raised in a garbage collector's callback would be dropped), and no checkpoint is left. The run is held in set-up: its lock is taken by a process that has not yet written who it
  is, which a run waits for (`workdir_lock.LOCK_WAIT_S`) before its loop; the signal is sent once the tool has logged
  its config."""
  import signal
  _, root = tiny_corpus
  holder = subprocess.Popen([sys.executable, "-c", _HOLD_SILENTLY, str(tmp_path / "run.lock")],
                            stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == "held"
    proc = start_entry([*entry_args(num_epochs=2), f"--workdir={tmp_path}"], root, stderr=subprocess.PIPE)
    seen = []
    for line in proc.stderr:
      seen.append(line)
      if "Config:" in line:
        break
    proc.send_signal(getattr(signal, signame))
    _, rest = proc.communicate(timeout=60)
  finally:
    holder.kill()
    holder.wait()
  err = "".join(seen) + rest
  assert not (tmp_path / "checkpoints").exists(), err[-3000:]
  assert proc.returncode == -getattr(signal, signame) and "Traceback" not in err, err[-3000:]


def test_a_second_signal_in_the_training_loop_meets_pythons_default():
  """Inside the loop the first signal is noted (`trainer.deferred`: the step ends and `last` is saved) and the
  handler before it put back; a second SIGINT, while that save runs, is Python's KeyboardInterrupt: one line, exit
  status 1 (`one_line`)."""
  import signal
  import experiments
  from wt_jax.train import trainer
  reached = []

  def main(argv):
    with trainer.deferred() as caught:
      os.kill(os.getpid(), signal.SIGINT)
      reached.append(list(caught))
      reached.append(signal.getsignal(signal.SIGINT) is signal.default_int_handler)
      os.kill(os.getpid(), signal.SIGINT)
      reached.append("not stopped")
  before = signal.signal(signal.SIGINT, signal.default_int_handler)
  try:
    with pytest.raises(SystemExit) as ended:
      experiments.one_line(main, ["entry"])
  finally:
    signal.signal(signal.SIGINT, before)
  assert reached == [[signal.SIGINT], True]
  assert ended.value.code.startswith("Stopped by SIGINT outside the training steps")


# --- damaged records, a full disk ---------------------------------------------------------------

@pytest.mark.parametrize("damage", ['{"config": {"learning_',
                                    pytest.param('["not", "a", "record"]', marks=pytest.mark.slow)])
def test_a_damaged_run_json_is_moved_aside_and_rebuilt_from_the_checkpoints_config(tiny_corpus, tmp_path, damage):
  """A run.json that cannot be read as a run's record (a write cut short) is moved aside, never deleted, and
  rebuilt from the config the checkpoint saved: a resume that changes what the run computes is still refused,
  one that only extends it goes on and is recorded."""
  corpus, _ = tiny_corpus
  lm.fit(tiny_config(max_steps=3, checkpoint_every_steps=3), corpus, tmp_path)
  (tmp_path / "run.json").write_text(damage)
  with pytest.raises(trainer.ConfigChangedError, match=r"learning_rate 1\.0 → 0\.5"):
    lm.fit(tiny_config(max_steps=6, learning_rate=0.5), corpus, tmp_path)
  assert (tmp_path / "run.json.damaged").read_text() == damage
  record = json.loads((tmp_path / "run.json").read_text())
  assert record["config"]["learning_rate"] == 1.0 and record["rebuilt"]["damaged"] == "run.json.damaged"
  (tmp_path / "run.json").write_text(damage)  # damaged again: the first copy is kept
  assert lm.fit(tiny_config(max_steps=6, checkpoint_every_steps=3), corpus, tmp_path)["steps"] == 6
  assert (tmp_path / "run.json.damaged").read_text() == (tmp_path / "run.json.damaged.1").read_text() == damage
  record = json.loads((tmp_path / "run.json").read_text())
  assert record["config"]["words"]["mode"] == "untied" and [r["step"] for r in record["resumes"]] == [3]


def test_a_metrics_line_cut_mid_write_is_set_aside_when_the_run_resumes(tiny_corpus, tmp_path):
  """A metrics.jsonl whose last line was cut mid-write (a process killed while it appended): the resume moves
  the fragment to metrics.jsonl.cut and appends after the last whole line, so every line still parses and the
  run finishes (the fragment had glued itself to the next record, and reading the file for the curves failed
  at the end of every later attempt, before a members run's summary). A damaged line elsewhere is left out of
  the curves."""
  from wt_jax.train import metrics
  corpus, _ = tiny_corpus
  lm.fit(tiny_config(max_steps=3, checkpoint_every_steps=3, log_every=1), corpus, tmp_path)
  whole = (tmp_path / "metrics.jsonl").read_text()
  (tmp_path / "metrics.jsonl").write_text(whole + '{"kind": "train", "st')
  res = lm.fit(tiny_config(max_steps=6, checkpoint_every_steps=3, log_every=1, plot=True), corpus, tmp_path)
  assert res["steps"] == 6
  assert (tmp_path / "metrics.jsonl.cut").read_text() == '{"kind": "train", "st\n'
  text = (tmp_path / "metrics.jsonl").read_text()
  records, bad = files.read_jsonl(tmp_path / "metrics.jsonl")
  assert text.startswith(whole) and bad == 0 and [r["step"] for r in records if r["kind"] == "train"][-1] == 6
  # A damaged line inside the file is left out of the curves, with a warning; the run still finishes.
  (tmp_path / "metrics.jsonl").write_text(whole + "not a record\n" + text[len(whole):])
  assert lm.fit(tiny_config(max_steps=9, checkpoint_every_steps=3, plot=True), corpus, tmp_path)["steps"] == 9
  assert metrics.plot_curves(tmp_path / "metrics.jsonl", tmp_path / "c.png") is None  # (no epoch ended yet)
  for kept in ("", "{}\n"):  # an empty file, or one ending in a whole line, is left alone
    (tmp_path / "m.jsonl").write_text(kept)
    files.mend_cut_line(tmp_path / "m.jsonl")
    assert (tmp_path / "m.jsonl").read_text() == kept and not (tmp_path / "m.jsonl.cut").exists()


def test_a_checkpoint_the_full_disk_refused_is_one_line_and_the_run_resumes_from_the_one_before(
    tiny_corpus, uninterrupted, tmp_path, monkeypatch):
  """A save that fails for a full disk — orbax reports it as TensorStore's RESOURCE_EXHAUSTED in a ValueError,
  from its commit threads (the message here is the one a 2 MiB tmpfs gave) — becomes OSError(ENOSPC) naming the
  folder and the step kept, which a training tool (`one_line` with the trainer's STOPS) ends with as one line;
  the same config then resumes from that step to the numbers of the uninterrupted run. Any other failure of a
  save propagates unchanged."""
  import orbax.checkpoint as ocp
  import experiments
  corpus, _ = tiny_corpus
  save = ocp.CheckpointManager.save

  def full_at_step_6(self, step, *args, **kwargs):  # (step 6 is never written, as on the full disk)
    if step == 6:
      raise ValueError('RESOURCE_EXHAUSTED: Error writing local file "…/last/6.orbax-checkpoint-tmp/state/'
                       'manifest.ocdbt": Failed writing: "…manifest.ocdbt.__lock": Failed to write 113 bytes')
    return save(self, step, *args, **kwargs)
  with monkeypatch.context() as m:
    m.setattr(ocp.CheckpointManager, "save", full_at_step_6)
    with pytest.raises(SystemExit) as ended:
      experiments.one_line(lambda argv: lm.fit(resumed_config(checkpoint_every_steps=3), corpus, tmp_path), ["entry"],
                           trainer.STOPS)
  folder = tmp_path / "checkpoints" / "last"
  assert ended.value.code.startswith("No space left on device (checkpoint last step 6 not written; step 3 is kept")
  assert ended.value.code.endswith(f": {str(folder)!r}; free some space or use another folder.")
  assert "\n" not in ended.value.code and sorted(p.name for p in folder.iterdir()) == ["3"]
  resumed = lm.fit(resumed_config(), corpus, tmp_path)
  assert resumed["resumed_from_step"] == 3
  assert_same_numbers(resumed, uninterrupted)

  def broken(self, step, *args, **kwargs):
    raise ValueError("INTERNAL: something else")
  with monkeypatch.context() as m:
    m.setattr(ocp.CheckpointManager, "save", broken)
    with pytest.raises(ValueError, match="INTERNAL: something else"):
      lm.fit(resumed_config(max_steps=3, checkpoint_every_steps=3), corpus, tmp_path / "other")


def test_a_record_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
  """`files.write_json` (results.json, run.json, summary.json): a write the disk refuses halfway leaves the
  previous file as it was and nothing beside it (on a full 2 MiB tmpfs, writing in place had left the first
  4,096 bytes of the new file: a results.json no reader could parse)."""
  import errno
  path = tmp_path / "results.json"
  files.write_json(path, {"test_ppl": 80.0, "nan": float("nan")})
  assert json.loads(path.read_text()) == {"test_ppl": 80.0, "nan": None}
  write_text = Path.write_text

  def full(self, text, *args, **kwargs):  # the first half reaches the disk, then the disk is full (a failed
    write_text(self, text[:len(text) // 2], *args, **kwargs)  # write() names no file)
    raise OSError(errno.ENOSPC, "No space left on device")
  monkeypatch.setattr(Path, "write_text", full)
  with pytest.raises(OSError, match="No space left") as refused:
    files.write_json(path, {"test_ppl": 79.0, "more": "x" * 1000})
  monkeypatch.undo()
  assert refused.value.filename == str(path)  # (so the entry point's one line names it)
  assert json.loads(path.read_text())["test_ppl"] == 80.0 and sorted(tmp_path.iterdir()) == [path]


def test_tensorboard_events_a_full_disk_refuses_are_one_warning_and_the_run_goes_on(tmp_path, caplog):
  """TensorBoard's events are a view beside metrics.jsonl: once their file's disk is full (/dev/full) the
  writer warns once and writes no more events, every record still reaches metrics.jsonl, closing (which the
  trainer does however a run ends) raises nothing, and the event file is closed then, not left to report its
  unwritten bytes when the collector reaches it. Events are written in the calling thread, so nothing can
  block behind a writer thread that died (tensorboardX's SummaryWriter: the 11th add_scalar after its thread
  died blocked for ever)."""
  from tensorboardX import record_writer
  from wt_jax.train import metrics
  if not os.path.exists("/dev/full"):
    pytest.skip("no /dev/full")
  writer = metrics.MetricsWriter(tmp_path / "metrics.jsonl", tmp_path)
  writer.write(kind="train", step=0, loss=2.0)
  writer.flush()
  writer._tb.records = record_writer.RecordWriter("/dev/full")  # (the disk is full from here on)
  with caplog.at_level("WARNING"):
    for step in range(1, 201):
      writer.write(kind="train", step=step, loss=2.0)
      if step % 50 == 0:
        writer.flush()
    writer.close()
  assert caplog.text.count("TensorBoard events could not be written") == 1, caplog.text
  assert [r["step"] for r in files.read_jsonl(tmp_path / "metrics.jsonl")[0]] == list(range(201))
  open_files = [os.path.realpath(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")]
  assert "/dev/full" not in open_files  # (closed, though the warning's error, kept by the log capture, holds it)


# --- the real orbax on a full disk --------------------------------------------------------------------

_SAVE = textwrap.dedent("""
    import sys
    import numpy as np, jax.numpy as jnp
    from wt_jax.train import checkpoint
    rng = np.random.default_rng(0)
    state = {"params": {f"w{i}": jnp.asarray(rng.standard_normal((128, 128)), jnp.float32) for i in range(6)}}
    try:
      checkpoint.Checkpoints(sys.argv[1]).save("last", 1, state, {"step": 1})
    except OSError as e:
      print(f"error: {e}", file=sys.stderr, flush=True)
      sys.exit(1)
    """)


@pytest.mark.slow  # (three child processes)
@pytest.mark.parametrize("free_kib", [2, 16, 120])
def test_a_save_the_full_disk_refuses_prints_one_line_and_exits(tmp_path, free_kib):
  """The real orbax on a full disk (a 2 MiB tmpfs, `free_kib` left): the process that saves a checkpoint there
  exits with status 1, having printed the project's line naming the step not written, within the timeout (orbax
  0.12.4 could wait 300 s at exit for writer threads still at work). orbax's own reports of the refused save
  (its writers' tracebacks, abandoned writes reported whenever the garbage collector reaches them) may come
  before or after that line: they are orbax's, and their order depends on timing."""
  disk = tmp_path / "disk"
  disk.mkdir()
  if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)],
                                         capture_output=True).returncode != 0:
    pytest.skip("mounting a tmpfs needs root")
  try:
    stat = os.statvfs(disk)
    (disk / "filler").write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - free_kib * 1024))
    child = subprocess.run([sys.executable, "-c", _SAVE, str(disk / "checkpoints")], capture_output=True, text=True,
                           timeout=120, cwd=REPO, env={**os.environ, "JAX_PLATFORMS": "cpu"})
  finally:
    subprocess.run(["umount", str(disk)], check=True)
  shown = child.stderr if len(child.stderr) < 6000 else f"{child.stderr[:3000]}\n[…]\n{child.stderr[-3000:]}"
  assert child.returncode == 1, shown
  # (orbax's writer threads print to the same stderr while the line is written: another library's lines may
  # interleave with ours, so the line is looked for as text, not as the start of a line)
  assert "error: [Errno 28] No space left on device (checkpoint last step 1 not written" in child.stderr, shown


