"""Members (wt_jax.members): K models in one compiled program, each equal to a run trained alone.

Member k of a K-member run must train what a run of member k's config (its seed and values) trains alone: the
step is the same function, vmapped over a member axis, with the member's values bound as traced scalars. The
only allowed difference is the order of float32 sums inside batched matmuls (XLA may block a batched dot
differently from a single one): a few ulps per product (relative ~1e-7), carried through a handful of SGD
steps. The bound is the one tests/test_parallel.py argues for the same kind of difference: the parameter
vector within 1e-5 of its norm, each parameter within 1e-4 of the largest magnitude. A wrong value reaching a
member (another member's dropout rate, α, learning rate, key) moves parameters by whole update sizes, far
outside it.
"""
import json

import jax
import numpy as np
import pytest

from tests.conftest import STEPS_PER_EPOCH, tiny_config
from wt_jax import members
from wt_jax.train import lm, trainer
from wt_jax.train.checkpoint import Checkpoints


@pytest.fixture(scope="module")
def corpus(tiny_corpus):
  return tiny_corpus[0]


# One config per model family; member_values gives the two members different values of keys that enter the
# step as traced scalars (and different seeds: seed, seed + 1).
FAMILIES = {
    "lstm": dict(model="lstm_lm", words=dict(mode="tied"),
                 member_values="dropout=0.2,0.4;learning_rate=1.0,0.5;clip_norm=5,0.5"),
    "vd_lstm_al": dict(model="bd_lstm_lm", mask_per_gate=False, tie_state_masks=True, init_scale=0.1,
                       words=dict(mode="untied"), al=dict(alpha=2.0, tau=10.0),
                       member_values="al.alpha=2,6;al.tau=10,20;al.target_gradient=false,true;"
                                     "dropout_h=0.2,0.4;dropout_x=0.1,0.2;lr_decay=0.5,0.8"),
    "lstm_sampled": dict(model="lstm_lm", words=dict(mode="untied"),
                         softmax=dict(kind="sampled", num_samples=8, proposal="unigram"),
                         member_values="learning_rate=1.0,0.7"),  # (each member draws its own candidates)
    "rhn": dict(model="rhn_lm", words=dict(mode="tied"), num_layers=1, depth=2, init_scale=0.1,
                member_values="dropout_i=0.2,0.3;dropout_h=0.2,0.3;dropout_o=0.1,0.2;weight_decay=1e-3,2e-3"),
    "transformer": dict(model="transformer_lm", words=dict(mode="tied"), num_heads=2, mlp_size=32, test_window=5,
                        init_scale=0.05, weight_decay_mode="loss",  # (SGD: Adam's g/√v turns the rounding
                        #   of near-zero gradients into update-sized differences, tests/dp_worker.py's note)
                        member_values="dropout=0.1,0.3;learning_rate=0.5,1.0;weight_decay=1e-3,0"),
}
STEPS = 5


def _config(corpus, **overrides):
  return tiny_config(**{"vocab_size": corpus.vocab_size, "num_epochs": 1, **overrides})


def _train(task, steps=STEPS):
  """`steps` train steps of `task` from its initial state → (state on the host, [the steps' sums])."""
  state, all_sums = task.init_state(), []
  for (batch, _), _ in zip(task.batches(1, 0), range(steps)):
    state, sums = task.train_step(state, *batch)
    all_sums.append(jax.device_get(sums))
  return jax.device_get(state), all_sums


def _flat(params):
  return np.concatenate([np.ravel(np.asarray(p)) for p in jax.tree_util.tree_leaves(params)])


def _assert_same_training(got, want):
  g, w = _flat(got), _flat(want)
  assert np.linalg.norm(g - w) <= 1e-5 * np.linalg.norm(w), np.linalg.norm(g - w) / np.linalg.norm(w)
  np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * np.abs(w).max())


# (one family in the fast tier: the others repeat the check on other models)
@pytest.mark.parametrize("family", [f if f == "lstm" else pytest.param(f, marks=pytest.mark.slow)
                                    for f in sorted(FAMILIES)])
def test_member_k_trains_what_a_run_of_its_config_trains_alone(corpus, family):
  overrides = dict(FAMILIES[family])
  config = _config(corpus, seed=3, **overrides)
  task = lm.MembersTask(config, corpus)
  assert task.size == 2 and [c.seed for c in task.group.configs] == [3, 4]
  state, sums = _train(task)
  for k in range(2):
    alone_config = task.group.configs[k]
    assert alone_config.members == 0 and alone_config.member_values == ""
    alone = lm.LMTask(alone_config, corpus)
    alone_state, alone_sums = _train(alone)
    _assert_same_training(members.member(state["params"], k), alone_state["params"])
    np.testing.assert_allclose([s["nll"][k] for s in sums], [s["nll"] for s in alone_sums], rtol=1e-5)
  # the two members really differ (different seeds and values): not one model twice
  assert not np.allclose(_flat(members.member(state["params"], 0)), _flat(members.member(state["params"], 1)))


@pytest.mark.slow
@pytest.mark.parametrize("arm", ["untied", "tied"])
def test_a_tying_surface_cells_members_train_what_its_seeds_train_alone(corpus, arm):
  """configs/tying_surface.py as it is (Adam with warm-up, the input × √D, dropout), shrunk: two members train what
  each trains alone — two seeds, and two grid points (learning rate and dropout as member values, one seed) — so
  the surface's cells may run their seeds, and its grid its points, as one members program."""
  from configs import tying_surface
  config = tying_surface.get_config(f"{arm},64,1000")
  config.update_from_flattened_dict(dict(
      dataset="ptb", vocab_size=corpus.vocab_size, hidden_size=16, mlp_size=32, memory=4, bptt=5, batch_size=4,
      eval_batch_size=4, test_window=5, num_epochs=1, warmup_steps=2, log_every=1000, plot=False, seed=3, members=2))
  grid = config.copy_and_resolve_references()
  grid.member_values = "learning_rate=1e-3,4e-3;dropout=0.1,0.3;seed=3,3"
  for config in (config, grid):
    task = lm.MembersTask(config, corpus)
    state, _ = _train(task)
    for k in range(2):
      alone, _ = _train(lm.LMTask(task.group.configs[k], corpus))
      _assert_same_training(members.member(state["params"], k), alone["params"])
    assert not np.allclose(_flat(members.member(state["params"], 0)), _flat(members.member(state["params"], 1)))


@pytest.mark.slow  # (a members run; members.parse's tests read the values)
def test_the_members_values_reach_the_members(corpus):
  """Members that differ only in one traced value (α) train differently, and each as its config alone: the
  value is read per member, not the template's for all."""
  config = _config(corpus, **FAMILIES["vd_lstm_al"])
  config.member_values = "al.alpha=0,8;seed=5,5"
  task = lm.MembersTask(config, corpus)
  assert task.group.seeds == [5, 5] and task.group.varying == {"al.alpha": [0.0, 8.0]}
  state, _ = _train(task, 3)
  p0, p1 = (_flat(members.member(state["params"], k)) for k in range(2))
  assert np.linalg.norm(p0 - p1) > 1e-3 * np.linalg.norm(p0)
  alone, _ = _train(lm.LMTask(task.group.configs[0], corpus), 3)  # α = 0: a run without the AL at all
  _assert_same_training(members.member(state["params"], 0), alone["params"])


def test_member_values_are_parsed_and_checked():
  c = tiny_config()
  c.member_values = "al.alpha=1,2,3; dropout=0.1,0.2,0.3;al.target_gradient=true,false,1"
  group = members.parse(c)
  assert group.size == 3 and group.seeds == [0, 1, 2]
  assert [m.al.alpha for m in group.configs] == [1.0, 2.0, 3.0]
  assert [m.al.target_gradient for m in group.configs] == [True, False, True]
  assert group.template().dropout == 0.1 and group.template().al.alpha == 1.0
  assert members.parse(tiny_config()) is None
  assert members.parse(tiny_config(members=4)).seeds == [0, 1, 2, 3]
  for spec, match in [("hidden_size=8,16", "cannot differ between members"),
                      ("al.alpha=1,2;dropout=0.1", "one value per member"),
                      ("al.alpha", "is not KEY=V1,V2"),
                      ("dropout=0.1,1.5", "must be in \\[0, 1\\)"),
                      ("al.target_gradient=yes,no", "is not a bool"),
                      ("al.alpha=1,2;al.alpha=3,4", "given twice"),
                      ("seed=4,4", "members 0 and 1 are the same run"),  # one model twice under one name
                      ("seed=1,2,1;al.alpha=3,4,3", "members 0 and 2 are the same run")]:
    c = tiny_config()
    c.member_values = spec
    with pytest.raises(ValueError, match=match):
      members.parse(c)
  c = tiny_config(members=3)
  c.member_values = "al.alpha=1,2"
  with pytest.raises(ValueError, match="members=3 but member_values lists 2"):
    members.parse(c)
  c = tiny_config(member_values="name=a,b c")
  with pytest.raises(ValueError, match="is not a name"):
    members.parse(c)


def test_combine_spells_configs_that_share_every_shape_as_one_runs_members():
  """Inan et al.'s VD-LSTM and +AL rows differ only in α (and their names): `combine` lists them as the
  members of the first config, and `parse` gives back exactly each config; a tied and an untied model, or
  two schedules' lengths, cannot share a program."""
  from configs import inan, large_bd_tied, large_bd_wd
  from wt_jax.train import run_record
  configs = []
  for variant in ("vd", "al"):
    for seed in (0, 1):
      c = inan.get_config(f"medium,{variant}")
      c.seed = seed
      configs.append(c)
  values = members.combine(configs)
  assert values == ("name=inan_medium_vd_keep,inan_medium_vd_keep,inan_medium_al_keep,inan_medium_al_keep;"
                    "seed=0,1,0,1;al.alpha=0.0,0.0,13.0,13.0")
  run = inan.get_config("medium,vd")
  run.member_values = values
  group = members.parse(run)
  assert group.seeds == [0, 1, 0, 1] and group.varying == {"al.alpha": [0.0, 0.0, 13.0, 13.0]}  # (names: labels)
  for got, want in zip(group.configs, configs):
    assert run_record.config_changes(got.to_dict(), want.to_dict()) == {}
  assert group.template().al.alpha == 13.0  # the program holds the AL; member 0 computes it times 0
  with pytest.raises(ValueError, match="differ in 'words.mode'"):
    members.combine([large_bd_tied.get_config(), large_bd_wd.get_config()])
  longer = large_bd_tied.get_config()
  longer.num_epochs = 60
  with pytest.raises(ValueError, match="differ in 'num_epochs'"):
    members.combine([large_bd_tied.get_config(), longer])
  with pytest.raises(ValueError, match="trains members itself"):
    members.combine([tiny_config(members=2), tiny_config()])


def test_a_progress_line_summarises_each_configs_members_apart():
  """Members of one config: their mean and range. Members of different configs (the VD-LSTM and +AL rows
  in one program): each config's own mean and range, and a diverged member left out of its config's."""
  from wt_jax.train.metrics import summary_line
  shown = [{"train_ppl": 100.0}, {"train_ppl": 102.0}, {"train_ppl": 90.0}, {"train_ppl": float("nan")}]
  live = [True] * 3 + [False]
  assert summary_line(shown[:2], live[:2], ["vd", "vd"]) == "members 2 (0 diverged)  train_ppl 101 [100–102]"
  assert summary_line(shown, live, ["vd", "vd", "al", "al"]) == (
      "members 4 (1 diverged)  | vd: train_ppl 101 [100–102]  | al: train_ppl 90")


@pytest.mark.parametrize("how", ["nan_in_step", pytest.param("overflowing_perplexity", marks=pytest.mark.slow)])
def test_a_diverging_member_leaves_the_others_unchanged(corpus, tmp_path, how):
  """Member 1 diverges — a NaN gradient in its first step (the AL at τ = 1e-30: the step's guard freezes it and
  reports NaN sums), or a learning rate that sends its perplexity past float range while its loss stays finite —
  and the trainer's policy records it at its first progress check and leaves it out of the summary; member 0's
  numbers are bit for bit those of member 0 beside a healthy partner (the same program), and the run finishes."""
  values = {"nan_in_step": ("al.tau=20,10", "al.tau=20,1e-30"),
            "overflowing_perplexity": ("learning_rate=1,2", "learning_rate=1,1e30")}[how]
  al = dict(alpha=1.0 if how == "nan_in_step" else 0.0)
  runs = {}
  for name, spec in zip(("healthy", "sick"), values):
    runs[name] = lm.fit(_config(corpus, member_values=spec, al=al), corpus, tmp_path / name)
  assert runs["healthy"]["diverged"] == [] and runs["sick"]["diverged"] == [1]
  r0a, r0b, r1 = (json.loads((tmp_path / run / "members" / k / "results.json").read_text())
                  for run, k in (("healthy", "0"), ("sick", "0"), ("sick", "1")))
  for key in ("train_ppl", "valid_ppl", "test_ppl"):
    assert r0a[key] == r0b[key], key
  assert r0b["member"]["diverged"] is None
  assert runs["sick"]["stats"]["test_ppl"]["mean"] == r0b["test_ppl"]  # the mean is over the live member
  assert "2 members, 1 diverged" in runs["sick"]["line"]
  frozen = _flat(Checkpoints(tmp_path / "sick" / "members" / "1" / "checkpoints",
                             read_only=True).restore_saved("last")[0]["params"])
  assert np.all(np.isfinite(frozen))
  diverged = r1["member"]["diverged"]
  if how == "nan_in_step":  # frozen by the step itself, at its initial parameters
    assert diverged["step"] == 1 and "step 1" in diverged["reason"]
    alone = lm.LMTask(members.parse(_config(corpus, member_values=values[1], al=al)).configs[1], corpus)
    np.testing.assert_array_equal(frozen, _flat(jax.device_get(alone.init_state()["params"])))
  else:  # found at the first progress check (the epoch's end here); its parameters, finite, train on
    assert "train_ppl is inf" in diverged["reason"] and diverged["step"] > 1


def test_a_run_stops_when_every_member_diverged(corpus, tmp_path):
  config = _config(corpus, member_values="learning_rate=1e30,1e31")
  with pytest.raises(trainer.NonFiniteLossError, match="All 2 members diverged"):
    lm.fit(config, corpus, tmp_path)


# A members run of two configs (a learning rate and a dropout rate each; the second config twice, by seed), 2
# epochs, tested with each member's best parameters: trained once, without a stop, for the tests below.
MEMBERS_RUN = dict(num_epochs=2, dropout=0.3, test_params="best",
                   member_values="learning_rate=1,0.5,0.5;dropout=0.2,0.4,0.4;name=small_lr1,small_lr05,small_lr05")


@pytest.fixture(scope="module")
def members_run(corpus, tmp_path_factory):
  """(summary.json of MEMBERS_RUN trained without a stop, its workdir)."""
  workdir = tmp_path_factory.mktemp("members_run")
  return lm.fit(_config(corpus, **MEMBERS_RUN), corpus, workdir), workdir


@pytest.mark.slow  # (a resume check repeated on members: test_train's shows it on one model)
def test_a_members_run_resumed_mid_epoch_ends_with_the_same_numbers(corpus, members_run, tmp_path):
  """Stopped in the middle of epoch 2 and resumed, each member ends with the numbers, history and tested
  parameters it has in the run that was never stopped."""
  whole, whole_dir = members_run
  stop = STEPS_PER_EPOCH + STEPS_PER_EPOCH // 2
  lm.fit(_config(corpus, max_steps=stop, **MEMBERS_RUN), corpus, tmp_path)
  resumed = lm.fit(_config(corpus, **MEMBERS_RUN), corpus, tmp_path)
  for key in ("train_ppl", "valid_ppl", "test_ppl", "test_ppl_batched", "best_valid_ppl"):
    assert resumed["stats"][key]["each"] == pytest.approx(whole["stats"][key]["each"], rel=1e-5), key
  for k in range(3):
    r = json.loads((tmp_path / "members" / str(k) / "results.json").read_text())
    f = json.loads((whole_dir / "members" / str(k) / "results.json").read_text())
    assert r["resumed_from_step"] == stop
    assert [h["valid_ppl"] for h in r["history"]] == pytest.approx([h["valid_ppl"] for h in f["history"]], rel=1e-5)
    assert r["test_params"] == f["test_params"]


@pytest.mark.slow  # (three members runs)
def test_a_resume_is_recorded_in_each_members_run_json_and_a_lost_one_rebuilt(corpus, tmp_path):
  """Each member's run.json follows the run's: a resume and its changes are appended to it as to the run's
  own; one that is missing or damaged (moved aside, kept) is rebuilt from the member's config."""
  lm.fit(_config(corpus, **{**MEMBERS_RUN, "max_steps": 3}), corpus, tmp_path)
  (tmp_path / "members" / "1" / "run.json").unlink()
  (tmp_path / "members" / "2" / "run.json").write_text('{"config": {"lear')
  lm.fit(_config(corpus, **{**MEMBERS_RUN, "max_steps": 5}), corpus, tmp_path)
  records = [json.loads((tmp_path / "members" / str(k) / "run.json").read_text()) for k in range(3)]
  assert [r["resumes"][-1]["step"] for r in records] == [3, 3, 3]
  assert records[0]["resumes"][-1]["changed"] == {"max_steps": [3, 5]} and "rebuilt" not in records[0]
  for k in (1, 2):
    assert records[k]["config"]["learning_rate"] == 0.5 and records[k]["config"]["seed"] == k
    assert records[k]["member"] == {"index": k, "of": 3, "run": str(tmp_path)}
    assert records[k]["rebuilt"]["step"] == 3
  assert records[1]["rebuilt"]["damaged"] is None and records[2]["rebuilt"]["damaged"] == "run.json.damaged"
  assert (tmp_path / "members" / "2" / "run.json.damaged").read_text() == '{"config": {"lear'


@pytest.mark.slow  # (a members run's records)
def test_each_member_folder_is_a_run_folder(corpus, members_run, tmp_path):
  """A member's folder holds what a run alone writes — run.json with the member's own config, vocab.txt,
  metrics.jsonl, results.json, checkpoints — and export reads it; the run's summary has mean and sd."""
  from wt_jax import export
  summary, workdir = members_run
  assert summary["members"] == 3 and summary["seeds"] == [0, 1, 2]
  tests = [json.loads((workdir / "members" / str(k) / "results.json").read_text())["test_ppl"] for k in range(3)]
  assert summary["stats"]["test_ppl"]["each"] == tests
  assert summary["stats"]["test_ppl"]["mean"] == pytest.approx(np.mean(tests))
  assert summary["stats"]["test_ppl"]["sd"] == pytest.approx(np.std(tests, ddof=1))
  assert json.loads((workdir / "summary.json").read_text())["stats"] == summary["stats"]
  for k in range(3):
    folder = workdir / "members" / str(k)
    run = json.loads((folder / "run.json").read_text())
    assert run["config"]["seed"] == k and run["config"]["members"] == 0 and run["member"]["index"] == k
    assert (folder / "vocab.txt").read_text().split() == list(corpus.vocab.words)
    epochs = [json.loads(l) for l in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in epochs if r["kind"] == "epoch"] == [1, 2]
    result = json.loads((folder / "results.json").read_text())
    assert result["seed"] == k and result["epochs"] == 2
    assert result["num_params"] == summary["stats"]["num_params"]["each"][0]
  out, manifest = export.export_run(workdir / "members" / "1", tmp_path / "export")
  assert manifest["step"] == summary["stats"]["steps"]["each"][1]
  member_state, _ = Checkpoints(workdir / "members" / "1" / "checkpoints", read_only=True).restore_saved()
  exported = np.load(out / "embeddings.npz")
  np.testing.assert_array_equal(exported[sorted(k for k in exported.files if k != "words")[0]].shape,
                                member_state["params"]["words"]["embedding"].shape)


@pytest.mark.slow  # (a members run's records)
def test_a_members_run_of_several_configs_records_each_under_its_own_name(members_run):
  """member_values with a `name` per member: each member's run.json and results.json carry its own config and
  name, and the summary gives each config's members, seeds and statistics apart."""
  summary, workdir = members_run
  assert summary["line"].startswith("3 members of 2 configs, 0 diverged: small_lr1 (1); test_ppl ")
  runs = [json.loads((workdir / "members" / k / "run.json").read_text())["config"] for k in "012"]
  assert [(c["learning_rate"], c["dropout"], c["name"], c["seed"]) for c in runs] == [
      (1.0, 0.2, "small_lr1", 0), (0.5, 0.4, "small_lr05", 1), (0.5, 0.4, "small_lr05", 2)]
  results = [json.loads((workdir / "members" / k / "results.json").read_text()) for k in "012"]
  assert [r["config"] for r in results] == ["small_lr1", "small_lr05", "small_lr05"]  # each under its own name
  assert summary["config"] == "small" and summary["configs"] == ["small_lr1", "small_lr05", "small_lr05"]
  assert summary["stats"]["test_ppl"]["mean"] == pytest.approx(np.mean([r["test_ppl"] for r in results]))
  own = summary["by_config"]["small_lr05"]
  assert own["members"] == [1, 2] and own["seeds"] == [1, 2]
  assert own["stats"]["test_ppl"]["mean"] == pytest.approx((results[1]["test_ppl"] + results[2]["test_ppl"]) / 2)
  assert summary["by_config"]["small_lr1"]["stats"]["test_ppl"]["sd"] is None  # (one member: no spread)
