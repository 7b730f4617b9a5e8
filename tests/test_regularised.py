"""Variational dropout, weight decay, the BD LSTM and the Recurrent Highway Network."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import large_bd, large_bd_tied, large_bd_wd, large_bd_wd_tied, rhn, rhn_tied
from tests.conftest import init_lm_params
from wt_jax import losses, models, tying
from wt_jax.models import bd_lstm_lm, rhn_lm, variational
from wt_jax.train import lm, optim


# --- masks ---------------------------------------------------------------------------------------

def test_keep_mask_is_inverted_bernoulli():
  m = variational.keep_mask(jax.random.key(0), 0.25, (200, 500))
  np.testing.assert_allclose(np.unique(np.asarray(m)), [0.0, 1 / 0.75], rtol=1e-6)
  assert abs(float((m == 0).mean()) - 0.25) < 0.01
  assert float(variational.keep_mask(jax.random.key(0), 0.0, (3,)).min()) == 1.0
  with pytest.raises(ValueError, match="dropout rate"):
    variational.keep_mask(jax.random.key(0), 1.0, (3,))


def test_word_type_mask_drops_whole_word_types_per_row():
  ids = jnp.array([[3, 5, 3, 3, 7, 5] * 5, [3, 3, 3, 9, 9, 9] * 5])
  found_drop = found_keep = False
  for seed in range(20):
    m = np.asarray(variational.word_type_mask(jax.random.key(seed), 0.5, ids, 10))
    for b in range(2):
      for w in set(np.asarray(ids[b]).tolist()):
        values = m[b][np.asarray(ids[b]) == w]
        assert len(set(values.tolist())) == 1  # every occurrence of a type in a row: same decision
        found_drop |= values[0] == 0
        found_keep |= values[0] == 2
  assert found_drop and found_keep
  # rows decide independently: over seeds, word 3 is kept in one row and dropped in the other sometimes
  differ = [np.asarray(variational.word_type_mask(jax.random.key(s), 0.5, ids, 10))[:, 0] for s in range(20)]
  assert any(d[0] != d[1] for d in differ)


def _identity_readout(model, params):
  """Set an untied model's output layer so that logits[..., :H] = the (masked) top-layer output."""
  V, H = params["words"]["out_embedding"].shape
  params = jax.tree_util.tree_map(jnp.array, params)
  params["words"]["out_embedding"] = jnp.eye(V, H)
  params["words"]["out_bias"] = jnp.zeros(V)
  return params


@pytest.mark.parametrize("kind", ["bd", "rhn"])
def test_output_mask_is_the_same_at_every_step_and_fresh_per_sequence_and_step(kind):
  V, H, B, T = 40, 24, 3, 12
  if kind == "bd":
    model = bd_lstm_lm.BDLSTMLM(vocab_size=V, hidden=H, num_layers=1, dropout_o=0.5, tying="untied")
  else:
    model = rhn_lm.RHNLM(vocab_size=V, hidden=H, depth=2, dropout_o=0.5, tying="untied")
  ids = jax.random.randint(jax.random.key(0), (B, T), 0, V)
  params = _identity_readout(model, init_lm_params(model, jax.random.key(1), B, T))

  @jax.jit
  def train_logits(step_key):
    return model.apply({"params": params}, ids, model.initial_carry(B), train=True, rngs={"dropout": step_key})[0]

  def dropped(step_key):
    return np.asarray(train_logits(step_key)[..., :H]) == 0.0  # [B, T, H]: exactly zero only where the mask dropped

  z = dropped(jax.random.key(2))
  assert z.any() and not z.all()
  for b in range(B):
    assert (z[b] == z[b, :1]).all()  # the same units dropped at every time step of the sequence
  assert (z[0, 0] != z[1, 0]).any()  # different sequences, different masks
  assert (dropped(jax.random.key(3))[0, 0] != z[0, 0]).any()  # a new training step, a new mask
  # evaluation: no masks at all, deterministic
  logits, _ = model.apply({"params": params}, ids, model.initial_carry(B), train=False)
  assert not (np.asarray(logits[..., :H]) == 0).any()


@pytest.mark.parametrize("kind", ["bd", "rhn"])
def test_dropout_is_off_at_evaluation(kind):
  V, H, B, T = 30, 8, 2, 6
  kw = dict(vocab_size=V, hidden=H, dropout_x=0.3, dropout_i=0.5, dropout_h=0.3, dropout_o=0.5)
  model = bd_lstm_lm.BDLSTMLM(**kw) if kind == "bd" else rhn_lm.RHNLM(depth=3, **kw)
  plain = (bd_lstm_lm.BDLSTMLM(vocab_size=V, hidden=H) if kind == "bd"
           else rhn_lm.RHNLM(vocab_size=V, hidden=H, depth=3))
  ids = jax.random.randint(jax.random.key(0), (B, T), 0, V)
  params = init_lm_params(model, jax.random.key(1), B, T)
  a, _ = model.apply({"params": params}, ids, model.initial_carry(B), train=False)
  b, _ = plain.apply({"params": params}, ids, plain.initial_carry(B), train=True, rngs={"dropout": jax.random.key(5)})
  np.testing.assert_allclose(a, b, rtol=1e-6)  # eval with dropout configured == train with none


def test_bd_input_and_state_masks_change_the_output_per_gate():
  """With per-gate masks, each gate's input is masked separately: not the same as one shared mask."""
  V, H, B, T = 30, 8, 2, 5
  ids = jax.random.randint(jax.random.key(0), (B, T), 0, V)
  kw = dict(vocab_size=V, hidden=H, num_layers=1, dropout_i=0.5, dropout_h=0.5)
  per_gate = bd_lstm_lm.BDLSTMLM(mask_per_gate=True, **kw)
  shared = bd_lstm_lm.BDLSTMLM(mask_per_gate=False, **kw)
  params = init_lm_params(per_gate, jax.random.key(1), B, T)
  key = {"dropout": jax.random.key(2)}
  a, _ = per_gate.apply({"params": params}, ids, per_gate.initial_carry(B), train=True, rngs=key)
  b, _ = shared.apply({"params": params}, ids, shared.initial_carry(B), train=True, rngs=key)
  assert np.isfinite(a).all() and not np.allclose(a, b)


# --- weight decay --------------------------------------------------------------------------------

def _sgd_config(**kw):
  c = large_bd_wd_tied.get_config()
  c.clip_norm = 1e9
  for k, v in kw.items():
    setattr(c, k, v)
  return c


def test_decoupled_weight_decay_touches_the_tied_leaf_once_per_step():
  """p ← (p − lr·g)(1 − wd), applied once to the one tied matrix (Gal / Press & Wolf Torch code)."""
  wd, lr = 0.01, 0.5
  config = _sgd_config(weight_decay=wd, learning_rate=lr)
  tx = optim.make_optimizer(config, steps_per_epoch=10)
  params = {"words": {"embedding": jnp.full((4, 3), 2.0), "out_bias": jnp.ones(4)}}
  grads = {"words": {"embedding": jnp.full((4, 3), 0.4), "out_bias": jnp.zeros(4)}}
  updates, _ = tx.update(grads, tx.init(params), params)
  new = jax.tree_util.tree_map(lambda p, u: p + u, params, updates)
  np.testing.assert_allclose(new["words"]["embedding"], (2.0 - lr * 0.4) * (1 - wd), rtol=1e-6)
  np.testing.assert_allclose(new["words"]["out_bias"], 1.0 * (1 - wd), rtol=1e-6)


def test_weight_decay_on_the_loss_adds_half_l2_of_every_leaf_once():
  """RHN code: cost += wd · Σ_v l2_loss(v); one SGD step must equal the hand-computed update."""
  V, H, B, T = 20, 6, 2, 4
  config = rhn_tied.get_config()
  for k, v in dict(vocab_size=V, hidden_size=H, depth=2, batch_size=B, bptt=T, clip_norm=1e9,
                   learning_rate=1.0, weight_decay=0.05, dropout_x=0.0, dropout_i=0.0, dropout_h=0.0,
                   dropout_o=0.0).items():
    setattr(config, k, v)
  model = models.build(config)
  params = init_lm_params(model, jax.random.key(0), B, T)
  x = jax.random.randint(jax.random.key(1), (B, T), 0, V)

  def cost_without_decay(p):
    (logits, _) = model.apply({"params": p}, x, model.initial_carry(B))
    from wt_jax import losses
    return losses.zaremba_cost(losses.token_nll(logits, x))

  g = jax.jit(jax.grad(cost_without_decay))(params)
  expected = jax.tree_util.tree_map(lambda p, gi: p - (gi + 0.05 * p), params, g)  # ∂(wd·½p²)/∂p = wd·p
  tx = optim.make_optimizer(config, 10)
  fresh = jax.tree_util.tree_map(jnp.copy, params)
  state = {"params": fresh, "opt_state": tx.init(fresh), "step": jnp.zeros((), jnp.int32),
           "carry": model.initial_carry(B)}
  step = lm.make_train_step(model, tx, losses.make_lm_cost(config), jax.random.key(2))
  state, _ = step(state, x, x)
  jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                         state["params"], expected)


def test_unknown_weight_decay_mode_is_rejected():
  with pytest.raises(ValueError, match="weight_decay_mode"):
    lm.check(_sgd_config(weight_decay_mode="l2"))


# --- RHN -----------------------------------------------------------------------------------------

def test_rhn_depth_one_matches_the_paper_formula_by_hand():
  """Depth 1: s' = h·t + s·(1 − t), h = tanh(x W_H + s R_H + b_H), t = σ(x W_T + s R_T + b_T)."""
  H = 2  # (input width 3: x below)
  layer = rhn_lm.RHNLayer(hidden=H, depth=1, init_scale=0.5)
  x = jnp.array([[[0.5, -1.0, 2.0]]])  # [T=1, B=1, I]
  s0 = jnp.array([[0.3, -0.2]])
  params = layer.init(jax.random.key(0), x, s0)["params"]
  W, R, b = (np.asarray(params[k], np.float64) for k in ("w_in", "w_rec", "bias"))
  assert np.allclose(b[0, H:], -2.0)  # transform-gate bias starts at -2
  xv, sv = np.asarray(x[0, 0], np.float64), np.asarray(s0[0], np.float64)
  z_h = xv @ W[:, :H] + sv @ R[0][:, :H] + b[0, :H]
  z_t = xv @ W[:, H:] + sv @ R[0][:, H:] + b[0, H:]
  h, t = np.tanh(z_h), 1 / (1 + np.exp(-z_t))
  carry_gate = 1 - t  # coupled: c = 1 − t
  expected = h * t + sv * carry_gate
  y, s = layer.apply({"params": params}, x, s0)
  np.testing.assert_allclose(s[0], expected, rtol=1e-5)
  np.testing.assert_allclose(y[0, 0], expected, rtol=1e-5)


def test_rhn_remat_gives_the_same_gradients():
  V, H, B, T = 20, 6, 2, 4
  ids = jax.random.randint(jax.random.key(0), (B, T), 0, V)
  grads = []
  for remat in (False, True):
    model = rhn_lm.RHNLM(vocab_size=V, hidden=H, depth=3, remat=remat)
    params = init_lm_params(model, jax.random.key(1), B, T)
    f = lambda p: model.apply({"params": p}, ids, model.initial_carry(B))[0].sum()
    grads.append(jax.jit(jax.grad(f))(params))
  jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), *grads)


@pytest.mark.parametrize("config_module,expected", [
    (rhn, 31_782_400), (rhn_tied, 23_482_400),
    # Gal's cell: per gate a Linear on x and one on h, each with a bias → 8H biases per layer
    (large_bd, 66_034_000), (large_bd_wd, 66_034_000), (large_bd_tied, 51_034_000),
    (large_bd_wd_tied, 51_034_000)])
def test_parameter_counts(config_module, expected):
  c = config_module.get_config()
  model = models.build(c)
  shapes = jax.eval_shape(lambda: init_lm_params(model, jax.random.key(0), 2, 3))
  assert tying.count_params(shapes) == expected
  if c.words.mode == "tied":
    assert len(tying.embedding_leaves(shapes)) == 1


@pytest.mark.parametrize("mode", ["untied", "tied"])
def test_rhn_parameter_count_is_the_layer_formula(mode):
  """Zilly et al.'s RHN layer: the input's transforms into the candidate and the transform gate (I × 2H) once,
  then at each of the d micro-steps the state's (H × 2H) and their biases (2H): 2H(I + dH + d) per layer, with
  I = H. Then the V × H embedding and the V output biases, and untied a V × H output matrix of its own. Built at
  small sizes with 2 layers, so that each term is told apart from the others."""
  V, H, d, L = 11, 6, 3, 2
  model = rhn_lm.RHNLM(vocab_size=V, hidden=H, depth=d, num_layers=L, tying=mode)
  shapes = jax.eval_shape(lambda: init_lm_params(model, jax.random.key(0), 2, 3))
  layer = 2 * H * (H + d * H + d)
  assert tying.count_params(shapes) == V * H + L * layer + V + (V * H if mode == "untied" else 0)


# --- end to end ----------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("config_name,extra", [
    ("rhn_tied", ["--config.depth=2"]),
    ("large_bd_wd_tied", ["--config.num_layers=2", "--config.eval_max_tokens=300"])])
def test_entry_point_runs_regularised_configs(tmp_path, config_name, extra):
  import json
  from tests.conftest import run_entry, write_corpus
  root = tmp_path / "data"
  write_corpus(root / "ptb")
  work = tmp_path / "run"
  proc = run_entry([f"--config=configs/{config_name}.py", f"--workdir={work}", "--config.max_steps=4",
                    "--config.vocab_size=31", "--config.hidden_size=8", "--config.batch_size=4",
                    "--config.bptt=5", "--config.eval_batch_size=4", "--config.test_window=64", *extra],
                   root)
  assert proc.returncode == 0, proc.stderr[-3000:]
  res = json.loads((work / "results.json").read_text())
  assert res["config"] == config_name and res["steps"] == 4 and math.isfinite(res["test_ppl"])
  assert res["eval_max_tokens"] == (300 if "--config.eval_max_tokens=300" in extra else None)
  assert res["test_params"] == ("final (test_params='best', but no epoch has ended yet)"
                                if config_name.startswith("rhn") else "final")


@pytest.mark.slow
def test_mc_dropout_evaluation_and_best_params(tmp_path):
  """eval_mc_samples > 0 adds test_ppl_mc (dropout on, averaged probabilities); test_params='best' is
  recorded; with dropout rates 0 the MC estimate equals the deterministic one."""
  from tests.conftest import tiny_config, write_corpus
  from wt_jax.data import ptb
  write_corpus(tmp_path / "data" / "ptb")
  corpus = ptb.load(str(tmp_path / "data"), download=False)
  base = rhn_tied.get_config()
  config = tiny_config(**{k: base[k] for k in ("model", "depth", "dropout_x", "dropout_i", "dropout_h",
                                              "dropout_o", "transform_bias", "remat")})
  config.num_layers, config.test_params, config.eval_mc_samples, config.num_epochs = 1, "best", 3, 1
  res = lm.fit(config, corpus, tmp_path / "run")
  assert res["test_params"] == "best (epoch 1)" and "MC dropout, 3 samples" in res["eval_dropout"]
  assert math.isfinite(res["test_ppl_mc"]) and res["test_ppl_mc"] != res["test_ppl"]
  for k in ("dropout_x", "dropout_i", "dropout_h", "dropout_o"):
    config[k] = 0.0
  res = lm.fit(config, corpus, tmp_path / "run_nodrop")
  assert res["test_ppl_mc"] == pytest.approx(res["test_ppl"], rel=1e-5)
