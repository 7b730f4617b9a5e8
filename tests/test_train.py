"""The training loop: schedule, loss scaling, learning, resume, bad input, the entry point, the run folder's
record and deterministic GPU kernels. (Faults, from damaged checkpoints to a full disk: tests/test_faults.py.)"""
import json
import math
import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import experiments
from tests.conftest import (REPO, RESUMED, STEPS_PER_EPOCH, assert_same_numbers, entry_args, entry_config,
                            resumed_config, sigint_in_step, start_entry, tiny_config)
from wt_jax import losses, models, parallel, softmax, tying
from wt_jax.data import ptb
from wt_jax.errors import InputError
from wt_jax.train import lm, optim, trainer
from wt_jax.train import metrics as metrics_lib
from wt_jax.train.checkpoint import CheckpointMismatchError

# tiny_corpus, uninterrupted: tests/conftest.py


# --- schedule ------------------------------------------------------------------------------------

def _reference_lrs(lr, decay, max_epoch, max_max_epoch):
  """The authors' TensorFlow loop: for i in range(max_max_epoch): lr * decay ** max(i - max_epoch, 0)."""
  return [lr * decay ** max(i - max_epoch, 0.0) for i in range(max_max_epoch)]


@pytest.mark.parametrize("lr,decay,max_epoch,epochs", [(1.0, 0.5, 4, 13), (1.0, 0.8, 6, 39),
                                                        (1.0, 1 / 1.15, 14, 55)])
def test_schedule_matches_reference_off_by_one(lr, decay, max_epoch, epochs):
  ours = [optim.epoch_lr(e, lr, decay, max_epoch) for e in range(1, epochs + 1)]
  np.testing.assert_allclose(ours, _reference_lrs(lr, decay, max_epoch, epochs), rtol=1e-12)
  assert ours[max_epoch] == lr and ours[max_epoch + 1] == pytest.approx(lr * decay)  # epoch max_epoch+1 at lr
  spe = 7
  sched = optim.zaremba_schedule(lr, decay, max_epoch, spe)
  for e in range(1, epochs + 1):
    for step in ((e - 1) * spe, e * spe - 1):
      assert float(sched(step)) == pytest.approx(ours[e - 1], rel=1e-5)


# --- loss scaling --------------------------------------------------------------------------------

def test_train_step_uses_sum_over_time_mean_over_batch():
  """One SGD step (lr 1, no clipping) moves the parameters by exactly −∇[Σ_t mean_b NLL + penalty/B]."""
  config = tiny_config(clip_norm=1e9, learning_rate=1.0, words=dict(mode="tied_projection"))
  model = models.build(config)
  B, T = config.batch_size, config.bptt
  params = models.init_params(model, config, jax.random.key(0))
  x = jax.random.randint(jax.random.key(1), (B, T), 0, config.vocab_size)
  y = jax.random.randint(jax.random.key(2), (B, T), 0, config.vocab_size)

  def reference_cost(p):
    (logits, _), aux = model.apply({"params": p}, x, model.initial_carry(B), mutable=[tying.PENALTIES])
    per_sequence = jnp.stack([losses.token_nll(logits[b], y[b]).sum() for b in range(B)])
    penalty = config.words.pr_lambda * 0.5 * jnp.sum(p["words"]["proj_kernel"] ** 2)
    return per_sequence.mean() + penalty / B

  ref_grads = jax.jit(jax.grad(reference_cost))(params)
  expected = jax.tree_util.tree_map(lambda p, g: p - g, params, ref_grads)
  tx = optim.make_optimizer(config, steps_per_epoch=100)
  fresh = jax.tree_util.tree_map(jnp.copy, params)  # the step donates its inputs
  state = {"params": fresh, "opt_state": tx.init(fresh), "step": jnp.zeros((), jnp.int32),
           "carry": model.initial_carry(B)}
  step = lm.make_train_step(model, tx, losses.make_lm_cost(config), jax.random.key(3))
  state, sums = step(state, x, y)
  jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                         state["params"], expected)
  # the accumulated NLL (what perplexity is computed from) excludes the penalty
  logits, _ = model.apply({"params": params}, x, model.initial_carry(B))
  np.testing.assert_allclose(sums["nll"], losses.token_nll(logits, y).sum(), rtol=1e-5)
  assert int(sums["tokens"]) == B * T
  # the step reports the norm of the one (tied) embedding gradient
  assert sorted(k for k in sums if k.startswith("norm/grad/")) == ["norm/grad/words/embedding"]
  np.testing.assert_allclose(sums["norm/grad/words/embedding"], jnp.linalg.norm(ref_grads["words"]["embedding"]),
                             rtol=1e-5)
  # inputs and targets of different shapes are refused when the step is traced (chex), not broadcast
  with pytest.raises(AssertionError, match="shape"):
    step(state, x, y[:, :-1])
  cost = losses.make_lm_cost(config)
  with pytest.raises(AssertionError, match="shape"):
    cost(params, logits[:, :-1], y, {})


def test_zaremba_cost_definition():
  nll = jnp.arange(12.0).reshape(3, 4)
  assert float(losses.zaremba_cost(nll)) == pytest.approx(nll.sum(axis=1).mean())


@pytest.mark.slow  # (a run, then its test perplexity by hand)
def test_reported_perplexity_excludes_penalty(tiny_corpus, tmp_path):
  corpus, _ = tiny_corpus
  config = tiny_config(max_steps=3, words=dict(mode="tied_projection", pr_lambda=1e6))
  res = lm.fit(config, corpus, tmp_path)
  model = models.build(config)
  from wt_jax.train.checkpoint import Checkpoints
  ck = Checkpoints(tmp_path / "checkpoints")
  params = models.init_params(model, config, jax.random.key(0))
  tx = optim.make_optimizer(config, 10)
  target = {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32),
            "carry": model.initial_carry(config.batch_size)}
  state, _ = ck.restore("last", target)
  ck.close()
  # recompute the batch-1 test perplexity by hand, with no penalty anywhere
  logits, _ = model.apply({"params": state["params"]}, corpus.test[None, :-1], model.initial_carry(1))
  nll = losses.token_nll(logits, corpus.test[None, 1:]).sum()
  assert res["test_ppl"] == pytest.approx(math.exp(float(nll) / (len(corpus.test) - 1)), rel=1e-4)


@pytest.mark.slow  # (two runs)
def test_eval_train_scores_the_training_text_as_validation_scores_its_text(tiny_corpus, uninterrupted, tmp_path):
  """eval_train: the training text read as validation is (no dropout, eval_batch_size streams, the tested
  parameters). The validation text does not touch training, so a second run whose validation text is the
  training text validates to what the first run's train_ppl_eval says; and neither is the running training
  perplexity, which has dropout on."""
  import dataclasses
  corpus, _ = tiny_corpus
  config = tiny_config(num_epochs=1, dropout=0.5, eval_train=True)
  res = lm.fit(config, corpus, tmp_path / "a")
  same = lm.fit(config, dataclasses.replace(corpus, valid=corpus.train), tmp_path / "b")
  assert res["train_ppl_eval"] == pytest.approx(same["valid_ppl"], rel=1e-5)
  assert abs(res["train_ppl_eval"] - res["valid_ppl"]) > 0.01 * res["valid_ppl"]
  assert abs(res["train_ppl_eval"] - res["train_ppl"]) > 0.01 * res["train_ppl"]
  assert "train_ppl_eval" not in uninterrupted  # (off by default)


# --- learning, resume, bad input -----------------------------------------------------------------

def test_tiny_model_learns(tiny_corpus, uninterrupted):
  """The resume tests' uninterrupted run (400 steps of a tied LSTM at hidden 8) learns the counting sentences far
  beyond their unigram perplexity. Measured: valid 28.8 after epoch 1, 24.2 after epoch 2, 11.3 at step 400,
  against a unigram perplexity of 27.3; a model that learns nothing stays near the unigram's."""
  corpus, _ = tiny_corpus
  counts = np.bincount(corpus.train, minlength=corpus.vocab_size) + 1
  p = counts / counts.sum()
  unigram_ppl = math.exp(-np.mean(np.log(p[corpus.valid])))
  assert uninterrupted["valid_ppl"] < unigram_ppl / 2, (uninterrupted["valid_ppl"], unigram_ppl)
  assert uninterrupted["history"][1]["valid_ppl"] < 0.9 * uninterrupted["history"][0]["valid_ppl"]
  for key in ("config", "num_params", "train_ppl", "valid_ppl", "test_ppl", "test_ppl_batched", "epochs",
              "steps", "wall_s", "train_tokens_per_s", "versions"):
    assert key in uninterrupted


def test_a_signal_in_the_training_steps_saves_last_there_and_the_run_resumes_to_the_same_numbers(
    tiny_corpus, uninterrupted, tmp_path):
  """SIGINT in the middle of epoch 2 (sent by this process to itself from inside a training step, so at a known
  step): the trainer ends that step, saves `last` at it and stops with `Interrupted`, which a training tool ends
  with as one line (`one_line` with the trainer's STOPS); the same config then resumes from that step and ends
  with the numbers of the uninterrupted run. (The signal from outside, to the entry point's process:
  test_a_signal_to_the_entry_point_saves_a_checkpoint_and_the_run_resumes.)"""
  corpus, _ = tiny_corpus
  stop = STEPS_PER_EPOCH + STEPS_PER_EPOCH // 2
  with sigint_in_step(lm.LMTask, stop) as not_deferred, pytest.raises(SystemExit) as ended:
    experiments.one_line(lambda argv: lm.fit(resumed_config(), corpus, tmp_path), ["entry"], trainer.STOPS)
  assert not_deferred == []
  last = tmp_path / "checkpoints" / "last"
  assert ended.value.code == (f"Interrupted at step {stop} by SIGINT; saved a checkpoint in {last}. Re-run the same "
                              "command to resume.")
  assert max(int(p.name) for p in last.iterdir()) == stop
  resumed = lm.fit(resumed_config(), corpus, tmp_path)
  assert resumed["resumed_from_step"] == stop
  assert_same_numbers(resumed, uninterrupted)


def test_restoring_tied_into_untied_fails_clearly(tiny_corpus, tmp_path):
  corpus, _ = tiny_corpus
  lm.fit(tiny_config(max_steps=2, words=dict(mode="tied")), corpus, tmp_path)
  with pytest.raises(CheckpointMismatchError, match="out_embedding"):
    lm.fit(tiny_config(max_steps=4, words=dict(mode="untied")), corpus, tmp_path)


def test_reopening_checkpoints_removes_a_killed_saves_temporary_directory(tmp_path):
  """A run killed while orbax writes leaves `<step>.orbax-checkpoint-tmp` beside the good steps (seen in a
  real run); the resumed run restores the last complete step and, by its next save, has removed the debris
  (orbax starts the clean-up when the checkpoints are reopened and finishes it before any save)."""
  from wt_jax.train.checkpoint import Checkpoints
  tree = {"params": {"w": jnp.arange(6.0).reshape(2, 3)}, "step": jnp.asarray(3, jnp.int32)}
  ck = Checkpoints(tmp_path)
  ck.save("best", 3, tree, {"epoch": 1})
  ck.close()
  killed = tmp_path / "best" / "7.orbax-checkpoint-tmp"
  (killed / "state.orbax-checkpoint-tmp").mkdir(parents=True)
  (killed / "_CHECKPOINT_METADATA").write_text("{}")
  # a reader (an analysis beside a running run) leaves a writer's unfinished save alone
  reader = Checkpoints(tmp_path, read_only=True)
  assert reader.restore_saved("best")[1] == {"epoch": 1}
  reader.close()
  time.sleep(1.0)  # a clean-up, had the reader started one, runs in the background
  assert killed.exists()
  ck = Checkpoints(tmp_path)
  assert ck.latest_step("best") == 3
  state, meta = ck.restore("best", tree)
  np.testing.assert_array_equal(state["params"]["w"], tree["params"]["w"])
  assert meta == {"epoch": 1}
  ck.save("best", 9, tree, {"epoch": 2})
  ck.close()
  assert not killed.exists()
  assert sorted(p.name for p in (tmp_path / "best").iterdir()) == ["9"]


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tiny_corpus, tmp_path):
  corpus, _ = tiny_corpus
  lm.fit(tiny_config(max_steps=5), corpus, tmp_path)
  before = sorted(p.name for p in (tmp_path / "checkpoints" / "last").iterdir())
  diverging = dict(learning_rate=1e20, clip_norm=1e9, allow_resume_changes=True)  # (a NaN rate is refused)
  with pytest.raises(trainer.NonFiniteLossError, match=r"the last good checkpoint \(step 5\) is kept"):
    lm.fit(tiny_config(max_steps=20, **diverging), corpus, tmp_path)
  after = sorted(p.name for p in (tmp_path / "checkpoints" / "last").iterdir())
  assert before == after == ["5"]
  with pytest.raises(trainer.NonFiniteLossError, match="no checkpoint had been saved yet"):  # a fresh run
    lm.fit(tiny_config(max_steps=20, **diverging), corpus, tmp_path / "fresh")
  # and the run can go on from it with a sane config
  res = lm.fit(tiny_config(max_steps=8), corpus, tmp_path)
  assert res["resumed_from_step"] == 5 and math.isfinite(res["valid_ppl"])


def test_a_run_that_stops_closes_its_metrics_writers(tiny_corpus, tmp_path, monkeypatch):
  """The metrics writers (TensorBoard's events) are closed however the run ends, here by divergence: left
  open, tensorboardX closes them at interpreter exit, which Python >= 3.12 refuses when the writer's thread
  never started (a traceback at exit, and the queued events lost)."""
  corpus, _ = tiny_corpus
  closed = []
  close = metrics_lib.MetricsWriter.close
  monkeypatch.setattr(metrics_lib.MetricsWriter, "close", lambda self: (closed.append(str(self.path)), close(self)))
  with pytest.raises(trainer.NonFiniteLossError):
    lm.fit(tiny_config(max_steps=5, learning_rate=1e20, clip_norm=1e9), corpus, tmp_path)
  assert closed == [str(tmp_path / "metrics.jsonl")]


def test_max_steps_on_a_checkpoint_step_finishes(tiny_corpus, tmp_path):
  """A smoke run whose last step is also a mid-epoch checkpoint step must not write that step twice."""
  corpus, _ = tiny_corpus
  res = lm.fit(tiny_config(max_steps=4, checkpoint_every_steps=2), corpus, tmp_path)
  assert res["steps"] == 4 and math.isfinite(res["valid_ppl"])
  assert sorted(p.name for p in (tmp_path / "checkpoints" / "last").iterdir()) == ["2", "4"]  # (the newest two kept)


def test_a_vocabulary_size_or_an_optimizer_the_run_cannot_use_is_refused(tiny_corpus, tmp_path):
  corpus, _ = tiny_corpus
  with pytest.raises(InputError, match="vocab_size"):
    lm.fit(tiny_config(vocab_size=10_000), corpus, tmp_path)
  with pytest.raises(InputError, match=r"^Unknown optimizer 'adamw'; expected one of sgd, adam\.$"):
    lm.fit(tiny_config(optimizer="adamw"), corpus, tmp_path)


@pytest.mark.parametrize("override,says", [
    (dict(model="lstm"), "Unknown model 'lstm'; expected one of bd_lstm_lm, lbl, lstm_lm, nnlm, rhn_lm, "
     "transformer_lm."),
    (dict(words=dict(mode="tie")), "Unknown words.mode 'tie'; expected one of untied, tied, projection, "
     "tied_projection."),
    (dict(model="rhn_lm", words=dict(init_scale=0.1)), "words.init_scale is only implemented for lstm_lm and "
     "transformer_lm, not 'rhn_lm'; leave it at 0.")])
def test_a_model_or_tying_mode_the_config_check_does_not_know_is_one_line(override, says):
  """`lm.check`, the one config check, names what `models.build` and `tying.WordEmbeddings` then trust."""
  with pytest.raises(InputError) as refused:
    lm.check(tiny_config(**override))
  assert str(refused.value) == says


def test_a_resume_on_a_corpus_with_other_words_stops_and_a_lost_vocab_txt_is_written_again(tiny_corpus, tmp_path):
  """vocab.txt says which word each embedding row is. A resume on a corpus of the same size whose words differ
  (another copy or version of it) would train every row on to another word: it stops with one line naming the
  first word that differs, and leaves the run as it was. A vocab.txt that was lost is written again."""
  corpus, root = tiny_corpus
  other_root = tmp_path / "other"
  (other_root / "ptb").mkdir(parents=True)
  for f in (root / "ptb").iterdir():  # the same text with every word renamed: the same sizes, other words
    (other_root / "ptb" / f.name).write_text(f.read_text().replace(" w", " v"))
  other = ptb.load(str(other_root), download=False)
  assert other.vocab_size == corpus.vocab_size and other.vocab.words != corpus.vocab.words
  config = lambda steps: tiny_config(max_steps=steps, checkpoint_every_steps=2)
  lm.fit(config(2), corpus, tmp_path / "run")
  vocab = (tmp_path / "run" / "vocab.txt").read_text()
  with pytest.raises(InputError, match=r"lists another vocabulary than this corpus's \(ptb\): word \d+ was 'w"):
    lm.fit(config(4), other, tmp_path / "run")
  assert (tmp_path / "run" / "vocab.txt").read_text() == vocab
  (tmp_path / "run" / "vocab.txt").unlink()
  assert lm.fit(config(4), corpus, tmp_path / "run")["resumed_from_step"] == 2
  assert (tmp_path / "run" / "vocab.txt").read_text() == vocab


# --- the entry point -----------------------------------------------------------------------------

@pytest.mark.slow  # (a process; what it computes and refuses is shown in this process by the tests around)
def test_entry_point_end_to_end_with_deterministic_kernels(tiny_corpus, tmp_path):
  """`python -m experiments.ptb` trains and records what ran: the config's name, the parameters, the versions and
  commit, the host; `--config.deterministic=true` reaches XLA_FLAGS before JAX starts (only a new process shows
  that: XLA reads the flags once) beside the caller's own flags, and both records say so."""
  _, root = tiny_corpus
  env = dict(os.environ, WT_JAX_DATA=str(root), JAX_PLATFORMS="cpu",
             XLA_FLAGS="--xla_force_host_platform_device_count=1")
  proc = subprocess.run([sys.executable, "-m", "experiments.ptb", *entry_args(max_steps=5, deterministic=True),
                         f"--workdir={tmp_path}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  res = json.loads((tmp_path / "results.json").read_text())
  run = json.loads((tmp_path / "run.json").read_text())
  assert res["config"] == "small_tied" and res["steps"] == 5
  assert res["num_params"] == 31 * 8 + 31 + 2 * (4 * 16 * 8 + 4 * 8)
  assert set(res["versions"]) == {"jax", "flax", "optax", "wt_jax_commit"}
  head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
  if head.returncode == 0:  # a git checkout: the run records the commit it came from
    assert res["versions"]["wt_jax_commit"].split("+")[0] == head.stdout.strip()
  assert res["host"]["cpu_count"] >= 1 and res["host"]["platform"] == "cpu"
  assert run["config"]["deterministic"] is True
  flags = parallel.xla_flags_with_determinism("--xla_force_host_platform_device_count=1", True)
  assert [r["host"]["xla_flags"] for r in (run, res)] == [flags, flags]  # (the caller's flags kept)


@pytest.mark.slow  # (two runs)
def test_a_class_softmax_takes_its_bins_from_the_training_counts_and_resumes(tiny_corpus, tmp_path):
  """softmax.kind=class with no bins given: the bins are computed from the training counts (`softmax.class_bounds`)
  and go into run.json; resuming with the same config (which still gives no bins) is not a config change."""
  corpus, _ = tiny_corpus
  config = lambda epochs: entry_config(num_epochs=epochs, **{"softmax.kind": "class", "softmax.num_classes": 4})
  lm.fit(config(1), corpus, tmp_path)
  bounds = json.loads((tmp_path / "run.json").read_text())["config"]["softmax"]["class_bounds"]
  assert bounds == list(softmax.class_bounds(softmax.counts(corpus.train, 31), 4, 0.5))
  assert bounds[0] == 0 and bounds[-1] == 31 and len(bounds) == 5
  res = lm.fit(config(2), corpus, tmp_path)
  assert res["resumed_from_step"] == STEPS_PER_EPOCH and res["epochs"] == 2
  assert res["softmax"] == "class" and res["train_ppl_from"].startswith("exact")
  assert res["num_params"] == 31 * 8 + 31 + 2 * (4 * 16 * 8 + 4 * 8) + (len(bounds) - 1) * (8 + 1)


@pytest.mark.parametrize("key, value", [("dropout", 1.5), ("dropout_h", -0.1), ("dropout_x", 1.0),
                                        ("num_epochs", 0), ("batch_size", 0), ("bptt", 0), ("eval_batch_size", 0),
                                        ("num_layers", 0), ("hidden_size", -1), ("learning_rate", math.nan),
                                        ("learning_rate", -1.0), ("learning_rate", math.inf)])
def test_a_value_no_run_can_train_with_is_refused_before_anything_is_built(tiny_corpus, tmp_path, key, value):
  """`lm.check`: a count below 1 (a 0 batch or window divides by zero, 0 layers builds no model, 0
  epochs writes results of an untrained model), a drop probability outside [0, 1), a learning rate that is not
  a finite number ≥ 0: `InputError` naming the key, and the workdir is not even made."""
  corpus, _ = tiny_corpus
  with pytest.raises(InputError, match=f"^{key} "):
    lm.fit(tiny_config(**{key: value}), corpus, tmp_path / "run")
  assert not (tmp_path / "run").exists()
  lm.check(tiny_config(learning_rate=0.0, dropout=0.0, dropout_h=0.99))  # the edges that are allowed


def test_a_one_device_task_builds_no_mesh_and_refuses_a_members_config(tiny_corpus):
  """On one device of one process `LMTask` places nothing itself (no `DataParallel`: `parallel.data_parallel` is
  None); a members config is refused in one line, since `LMTask` trains one model (`lm.fit` trains members as
  `MembersTask`)."""
  corpus, _ = tiny_corpus
  assert jax.device_count() == 1 and lm.LMTask(tiny_config(), corpus).dp is None
  for members in (dict(members=2), dict(member_values="learning_rate=1,0.5")):
    with pytest.raises(InputError, match="asks for members"):
      lm.LMTask(tiny_config(**members), corpus)


@pytest.mark.slow  # (three processes that stop while parsing their flags)
def test_entry_point_rejects_unknown_config_key(tiny_corpus, tmp_path):
  """A mistyped key (ml_collections raises it while absl parses the flags) or a config file that is not there:
  one line, its "did you mean" or the file's error kept, no traceback; a bug inside a config file keeps its
  traceback."""
  _, root = tiny_corpus
  run = lambda args: subprocess.run([sys.executable, "-m", "experiments.ptb", *args, f"--workdir={tmp_path}"],
                                    cwd=REPO, env=dict(os.environ, WT_JAX_DATA=str(root), JAX_PLATFORMS="cpu"),
                                    capture_output=True, text=True, timeout=300)
  for args, says in ((["--config=configs/small_tied.py", "--config.num_epoch=1"],
                      '--config: no such key \'num_epoch\'; Did you mean "num_epochs" instead of "num_epoch"?'),
                     (["--config=configs/smal_tied.py"],
                      "--config: [Errno 2] No such file or directory: 'configs/smal_tied.py'")):
    proc = run(args)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == says, proc.stderr[-3000:]
  # The same AttributeError from inside a config file's get_config is that file's bug: its traceback is kept.
  (tmp_path / "buggy.py").write_text("def get_config():\n  return None.hidden_size\n")
  proc = run([f"--config={tmp_path / 'buggy.py'}"])
  assert proc.returncode == 1 and "Traceback" in proc.stderr and "buggy.py" in proc.stderr, proc.stderr[-3000:]


def test_a_missing_corpus_ends_the_tool_with_one_line_naming_the_variable(tmp_path, monkeypatch):
  """The corpus a language-model tool reads (`lm_corpora.load_corpus`, as experiments.ptb and bench do) is not
  under $WT_JAX_DATA and may not be downloaded: `one_line` with the trainer's STOPS ends the tool with one line
  that names the variable. (Each tool's own process: test_every_entry_point_that_reads_a_corpus_stops_...)"""
  from wt_jax.data import lm_corpora
  monkeypatch.setenv("WT_JAX_DATA", str(tmp_path / "empty"))
  config = entry_config(download=False)
  with pytest.raises(SystemExit) as ended:
    experiments.one_line(lambda argv: lm_corpora.load_corpus(config), ["entry"], trainer.STOPS)
  assert "WT_JAX_DATA" in ended.value.code and "\n" not in ended.value.code, ended.value.code


@pytest.mark.slow  # (a process per tool)
@pytest.mark.parametrize("module, config", [("experiments.ptb", "configs/small_tied.py"),
                                            ("experiments.word2vec", "configs/w2v_tied.py"),
                                            ("experiments.nmt", "configs/nmt_multi30k_baseline.py"),
                                            ("experiments.studies.inan_sweep", "configs/inan_sec62.py"),
                                            ("experiments.bench", "configs/small_tied.py")])
def test_every_entry_point_that_reads_a_corpus_stops_with_one_line_without_it(module, config, tmp_path):
  env = dict(os.environ, WT_JAX_DATA=str(tmp_path / "empty"), JAX_PLATFORMS="cpu")
  args = [f"--config={config}", "--config.download=false"] + ([] if module == "experiments.bench" else
                                                               [f"--workdir={tmp_path / 'run'}"])
  proc = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env, capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 1, proc.stderr[-3000:]
  assert "WT_JAX_DATA" in proc.stderr.strip().splitlines()[-1] and "Traceback" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.slow  # (a process started and signalled; the same in this process: test_a_signal_in_the_training_...)
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])  # Ctrl-C; a preempted machine or a scheduler
def test_a_signal_to_the_entry_point_saves_a_checkpoint_and_the_run_resumes(tiny_corpus, uninterrupted, tmp_path,
                                                                           signame):
  """The signal reaches a real training process mid-epoch: it ends with one line and exit status 1, with `last`
  saved at the step it reached; the same config resumed from there ends with the uninterrupted run's numbers."""
  import signal
  corpus, root = tiny_corpus
  proc = start_entry([*entry_args(**RESUMED, log_every=10), f"--workdir={tmp_path}"], root, stderr=subprocess.PIPE)
  deadline = time.time() + 120
  while time.time() < deadline and proc.poll() is None and not (tmp_path / "metrics.jsonl").exists():
    time.sleep(0.02)  # (the first line is written at step 10)
  proc.send_signal(getattr(signal, signame))
  _, err = proc.communicate(timeout=120)
  assert proc.returncode == 1, err[-2000:]
  assert f"by {signame}; saved a checkpoint" in err.splitlines()[-1], err[-2000:]
  steps = [int(p.name) for p in (tmp_path / "checkpoints" / "last").iterdir() if p.name.isdigit()]
  assert len(steps) == 1 and 0 < steps[0] < RESUMED["max_steps"], (steps, err[-3000:])
  resumed = lm.fit(resumed_config(log_every=10), corpus, tmp_path)
  assert resumed["resumed_from_step"] == steps[0]
  assert_same_numbers(resumed, uninterrupted)


def test_tensorboard_events_and_a_profile_are_written(tiny_corpus, tmp_path):
  """TensorBoard's own reader finds the run's scalars (train and epoch records, as in metrics.jsonl), and
  profile_steps traces steps with jax.profiler into <workdir>/profile."""
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
  corpus, _ = tiny_corpus
  res = lm.fit(tiny_config(num_epochs=1, log_every=5, profile_steps=2), corpus, tmp_path)
  acc = EventAccumulator(str(tmp_path))
  acc.Reload()
  tags = acc.Tags()["scalars"]
  assert {"train/train_ppl", "train/lr", "train/tokens_per_s", "epoch/valid_ppl"} <= set(tags), tags
  valid = acc.Scalars("epoch/valid_ppl")
  assert [e.step for e in valid] == [res["steps"]] and valid[0].value == pytest.approx(res["valid_ppl"], rel=1e-6)
  logged = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert [e.step for e in acc.Scalars("train/train_ppl")] == [r["step"] for r in logged if r["kind"] == "train"]
  assert any(p.name.endswith(".xplane.pb") for p in (tmp_path / "profile").rglob("*"))


def test_tensorboard_events_are_flushed_for_the_live_view_before_the_writer_closes(tmp_path):
  """The events file is flushed once `Events.FLUSH_S` seconds of writes have passed (0 here), so TensorBoard reads a
  run's scalars while it trains, not only at its checkpoints and end."""
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
  writer = metrics_lib.MetricsWriter(tmp_path / "metrics.jsonl", tmp_path)
  writer._tb.FLUSH_S = 0.0
  writer.write(kind="train", step=3, loss=2.5)
  acc = EventAccumulator(str(tmp_path))
  acc.Reload()
  assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(3, 2.5)]
  writer.write(kind="epoch", step=4, valid_ppl=[1.5, 2.5])  # a members run's numbers: one scalar a member
  acc.Reload()
  assert [[(e.step, e.value) for e in acc.Scalars(f"epoch/valid_ppl/{k}")] for k in (0, 1)] == [[(4, 1.5)], [(4, 2.5)]]
  writer.close()


def test_a_members_checkpoint_in_the_old_layout_is_refused_not_resumed(tiny_corpus, tmp_path, monkeypatch):
  """A checkpoint whose meta holds a "members" list (each member's record: a members run saved before the trainer
  kept the record itself, BUILD_NOTES §77) would resume with no history or best: it is refused in one line."""
  from wt_jax.train.checkpoint import Checkpoints
  corpus, _ = tiny_corpus
  old = lambda self, state, kinds: (state, {"members": [], "config": {}}, "last", 5) if kinds == ("last",) else None
  monkeypatch.setattr(Checkpoints, "restore_intact", old)
  with pytest.raises(InputError, match="saved by an older wt_jax's members run"):
    lm.fit(tiny_config(max_steps=1), corpus, tmp_path)


# --- a run folder that describes itself ------------------------------------------------------------

def test_a_run_folder_describes_itself_and_a_changed_config_does_not_resume(tiny_corpus, tmp_path, caplog):
  """The first start writes run.json (the whole config, command, code, versions, host) and vocab.txt; a
  resume that changes what the run computes stops with one line naming the keys, one that only extends it
  goes on, and each resume is recorded."""
  corpus, _ = tiny_corpus
  lm.fit(tiny_config(max_steps=3, checkpoint_every_steps=3), corpus, tmp_path)
  record = json.loads((tmp_path / "run.json").read_text())
  assert record["config"]["learning_rate"] == 1.0 and record["config"]["words"]["mode"] == "untied"
  assert record["versions"]["jax"] == jax.__version__ and record["host"]["cpu_count"] and record["command"]
  assert (tmp_path / "vocab.txt").read_text().splitlines() == corpus.vocab.words
  with pytest.raises(trainer.ConfigChangedError, match=r"dropout 0\.0 → 0\.3, learning_rate 1\.0 → 0\.5\)") as e:
    lm.fit(tiny_config(max_steps=6, learning_rate=0.5, dropout=0.3), corpus, tmp_path)
  assert "\n" not in str(e.value)
  res = lm.fit(tiny_config(max_steps=6, checkpoint_every_steps=3), corpus, tmp_path)  # longer: fine
  assert res["resumed_from_step"] == 3 and res["steps"] == 6
  with caplog.at_level("WARNING"):
    lm.fit(tiny_config(max_steps=8, learning_rate=0.5, allow_resume_changes=True), corpus, tmp_path)
  resumes = json.loads((tmp_path / "run.json").read_text())["resumes"]
  assert [r["step"] for r in resumes] == [3, 6]
  assert resumes[1]["changed"]["learning_rate"] == [1.0, 0.5]
  assert json.loads((tmp_path / "run.json").read_text())["config"]["learning_rate"] == 1.0  # the first start's


# --- deterministic GPU kernels: the setting reaches XLA_FLAGS and the records ----------------------

def test_the_determinism_flag_is_set_replaced_and_read_as_xla_reads_it():
  assert parallel.xla_flags_with_determinism("", True) == "--xla_gpu_deterministic_ops=true"
  assert parallel.xla_flags_with_determinism(
      "--xla_gpu_deterministic_ops=false --xla_gpu_autotune_level=0", True) == \
      "--xla_gpu_autotune_level=0 --xla_gpu_deterministic_ops=true"
  assert parallel.determinism_in("--xla_gpu_deterministic_ops=true --xla_gpu_deterministic_ops=0") is False
  assert parallel.determinism_in("--xla_gpu_deterministic_ops") is True
  assert parallel.determinism_in("--xla_gpu_deterministic_ops_x=true") is None  # another flag


def test_a_deterministic_run_without_the_flag_in_xla_flags_stops(tiny_corpus, tmp_path, monkeypatch):
  """A run asked to be deterministic whose XLA_FLAGS do not ask XLA for it stops with one line, not a silently
  non-deterministic run; `apply_determinism` (the entry points', before JAX starts) adds the flag and keeps the
  others; a config that does not ask leaves XLA_FLAGS alone. (That the flag reaches XLA when set before the
  backends start: test_entry_point_end_to_end_with_deterministic_kernels.)"""
  monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
  corpus, _ = tiny_corpus
  with pytest.raises(RuntimeError, match="config.deterministic is set"):
    lm.fit(tiny_config(max_steps=2, deterministic=True), corpus, tmp_path)
  experiments.apply_determinism(tiny_config())  # not asked for: nothing to do
  assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=1"
  experiments.apply_determinism(tiny_config(deterministic=True))
  assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=1 --xla_gpu_deterministic_ops=true"
