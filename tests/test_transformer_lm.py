"""The tied Transformer LM (`wt_jax.models.transformer_lm`): causality, context across windows, parameter
counts, the shared leaf, the embedding-scale options by hand, and the entry point on a tiny corpus."""
import json
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import transformer
from tests.conftest import REPO, write_corpus
from wt_jax import models, tying
from wt_jax.data import ptb
from wt_jax.errors import InputError
from wt_jax.models.transformer_lm import TransformerLM
from wt_jax.train import lm, optim

V, D, F, P = 23, 8, 16, 20  # vocabulary, model size, MLP, position slots


def _model(**kw):
  return TransformerLM(**{"vocab_size": V, "dim": D, "num_layers": 2, "num_heads": 2, "mlp_size": F, "max_len": P,
                          **kw})


def _params(model, batch=2, bptt=5):
  ids = jnp.zeros((batch, bptt), jnp.int32)
  return jax.jit(model.init)(jax.random.key(1), ids, model.initial_carry(batch))["params"]


_COMPILED = {}  # id(model) → (the model, kept so that its id is not reused; its apply, compiled)


def _apply(model, params, ids, carry=None):
  """model.apply, compiled once per model and shape (op by op, a call of these 2 blocks takes most of a second,
  and the tests call it many times over)."""
  if id(model) not in _COMPILED:
    _COMPILED[id(model)] = (model, jax.jit(model.apply))
  carry = model.initial_carry(ids.shape[0]) if carry is None else carry
  return _COMPILED[id(model)][1]({"params": params}, ids, carry)


def test_no_future_token_changes_a_past_logit():
  model = _model()
  params = _params(model)
  ids = jax.random.randint(jax.random.key(0), (2, 9), 0, V)
  base, _ = _apply(model, params, ids)
  for t in range(9):
    other, _ = _apply(model, params, ids.at[:, t].set((ids[:, t] + 1) % V))
    moved = np.abs(np.asarray(other - base)).max(axis=(0, 2)) > 1e-6
    assert moved.tolist() == [False] * t + [True] * (9 - t), t  # positions < t untouched, ≥ t moved


@pytest.mark.parametrize("memory", [pytest.param(0, marks=pytest.mark.slow), 3,
                                    pytest.param(7, marks=pytest.mark.slow)])  # (none; more than a window: padded)
def test_the_carry_is_the_last_memory_tokens_and_nothing_older(memory):
  """A window sees the previous window's last `memory` tokens (its carry) and no earlier one."""
  model = _model(memory=memory)
  params = _params(model)
  ids = jax.random.randint(jax.random.key(2), (2, 12), 0, V)
  first, carry = _apply(model, params, ids[:, :6])
  assert carry.shape == (1, 2, memory) and carry.dtype == jnp.int32
  np.testing.assert_array_equal(carry[0], ids[:, 6 - memory:6] if memory <= 6 else
                                np.concatenate([np.full((2, memory - 6), -1), ids[:, :6]], 1))
  second, _ = _apply(model, params, ids[:, 6:], carry)
  for t in range(6):  # change a token of the first window: the second window moves iff t is in the memory
    changed = ids.at[:, t].set((ids[:, t] + 1) % V)
    _, carry2 = _apply(model, params, changed[:, :6])
    other, _ = _apply(model, params, changed[:, 6:], carry2)
    assert bool(np.abs(np.asarray(other - second)).max() > 1e-6) == (t >= 6 - memory), (memory, t)


def test_the_stream_start_is_not_attended():
  """The initial carry (−1: no token yet) is masked: word 0's embedding row reaches a window without a 0
  only through word 0's own logit (the tied output row)."""
  model = _model(memory=4)
  params = _params(model)
  ids = jax.random.randint(jax.random.key(3), (2, 6), 1, V)  # no word 0
  base, _ = _apply(model, params, ids)
  moved = jax.tree_util.tree_map(lambda x: x, params)
  moved["words"]["embedding"] = params["words"]["embedding"].at[0].add(jnp.linspace(-1.0, 2.0, D))
  other, _ = _apply(model, moved, ids)
  np.testing.assert_allclose(other[..., 1:], base[..., 1:], rtol=0, atol=1e-6)
  assert np.abs(np.asarray(other[..., 0] - base[..., 0])).min() > 1e-3


@pytest.mark.parametrize("mode", tying.MODES)
def test_parameter_counts_by_formula(mode):
  L = 2
  block = (3 * D * D + 3 * D) + (D * D + D) + (D * F + F) + (F * D + D) + 2 * 2 * D  # qkv, out, MLP, 2 LNs
  words = {"untied": 2 * V * D + V, "tied": V * D + V, "projection": 2 * V * D + V + D * D + D,
           "tied_projection": V * D + V + D * D + D}[mode]
  params = _params(_model(tying=mode))
  assert tying.count_params(params) == L * block + 2 * D + P * D + words  # + final LN, positions
  leaves = list(tying.embedding_leaves(params))
  assert leaves == (["words/embedding"] if mode.startswith("tied") else ["words/embedding", "words/out_embedding"])


def test_tied_gradient_is_the_sum_of_both_uses():
  """One leaf: its gradient is the lookup's plus the softmax's — those of an untied model holding two copies
  of the same matrix (Press & Wolf 2017, Section 3)."""
  tied, untied = _model(), _model(tying="untied")
  params = _params(tied)
  copies = {**params, "words": {**params["words"], "out_embedding": params["words"]["embedding"]}}
  ids = jax.random.randint(jax.random.key(4), (2, 5), 0, V)
  def loss(model, p):
    return jnp.sum(jax.nn.log_softmax(_apply(model, p, ids)[0])[..., 3])
  np.testing.assert_allclose(loss(tied, params), loss(untied, copies), rtol=1e-6)
  g_tied = jax.jit(jax.grad(lambda p: loss(tied, p)))(params)["words"]
  g_two = jax.jit(jax.grad(lambda p: loss(untied, p)))(copies)["words"]
  assert set(g_tied) == {"embedding", "out_bias"}
  np.testing.assert_allclose(g_tied["embedding"], g_two["embedding"] + g_two["out_embedding"], rtol=1e-5, atol=1e-6)
  assert np.abs(np.asarray(g_two["embedding"])).max() > 1e-4  # both shares are there to be summed


def _layer_norm(x):
  mu = x.mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-6)


@pytest.mark.parametrize("scale", ["none", "sqrt_d", "logits"])
def test_each_scale_option_by_hand(scale):
  """With no blocks the forward is logits = LN(E[w]·s_in + P)·Eᵀ·s_out + b: each option, by hand."""
  model = _model(num_layers=0, input_scale=scale == "sqrt_d", logit_scale=scale == "logits", memory=0)
  params = _params(model, bptt=4)
  params = {**params, "words": {**params["words"],
                                "out_bias": jnp.arange(V, dtype=jnp.float32) / V}}  # a visible bias
  ids = jnp.array([[1, 5, 7, 2]])
  logits, _ = _apply(model, params, ids)
  E, b = np.asarray(params["words"]["embedding"], np.float64), np.asarray(params["words"]["out_bias"], np.float64)
  s_in = math.sqrt(D) if scale == "sqrt_d" else 1.0
  s_out = 1 / math.sqrt(D) if scale == "logits" else 1.0
  x0 = E[np.asarray(ids)] * s_in + np.asarray(params["positions"], np.float64)[:4]
  np.testing.assert_allclose(logits, _layer_norm(x0) @ E.T * s_out + b, rtol=1e-4, atol=1e-5)


def test_positions_cap_the_input():
  model = _model(memory=4, max_len=10)
  params = _params(model)
  _apply(model, params, jnp.zeros((2, 6), jnp.int32))  # 4 + 6 = 10 slots: fine
  with pytest.raises(ValueError, match="at most bptt"):
    _apply(model, params, jnp.zeros((2, 7), jnp.int32))
  c = transformer.get_config()
  c.test_window = c.bptt + 1
  with pytest.raises(ValueError, match="test_window"):
    models.build(c)


def test_configs_parse_and_build():
  c = transformer.get_config()
  assert (c.model, c.words.mode, c.words.input_scale, c.words.logit_scale) == ("transformer_lm", "tied", False, False)
  c = transformer.get_config("untied,sqrt_d,wikitext2")
  assert (c.words.mode, c.words.input_scale, c.dataset, c.vocab_size) == ("untied", True, "wikitext2", 33278)
  assert transformer.get_config("tied,logits").words.logit_scale
  m = models.build(transformer.get_config("tied_projection"))
  assert isinstance(m, TransformerLM) and m.tying == "tied_projection" and m.memory == 32
  with pytest.raises(ValueError, match="SCALE"):
    transformer.get_config("tied,sqrt")
  lstm_with_scale = transformer.get_config("tied,sqrt_d")
  lstm_with_scale.model = "lstm_lm"
  with pytest.raises(InputError, match="words.input_scale is only implemented for transformer_lm"):
    lm.check(lstm_with_scale)  # (the one config check, before anything is built)


def test_warmup_scales_the_schedule():
  c = transformer.get_config()
  c.warmup_steps, c.learning_rate = 4, 1.0
  sched = optim.with_warmup(optim.zaremba_schedule(1.0, 0.5, 0, 10), 4)
  np.testing.assert_allclose([float(sched(s)) for s in (0, 1, 3, 9, 10)], [0.25, 0.5, 1.0, 1.0, 0.5])
  c.warmup_steps = -1
  with pytest.raises(ValueError, match="warmup_steps must be ≥ 0"):  # (InputError is a ValueError)
    lm.check(c)


def _tiny(c, **kw):
  c.vocab_size, c.hidden_size, c.num_layers, c.num_heads, c.mlp_size, c.memory = 31, 16, 1, 2, 32, 4
  c.batch_size, c.eval_batch_size, c.bptt, c.test_window = 8, 8, 10, 10
  c.dropout, c.learning_rate, c.warmup_steps, c.num_epochs, c.decay_after_epoch = 0.0, 1e-2, 10, 4, 10
  c.log_every, c.plot, c.checkpoint_every_steps = 1000, False, 0
  c.update_from_flattened_dict(kw)
  return c


@pytest.mark.slow
def test_fit_on_a_tiny_corpus(tmp_path):
  corpus = ptb.load(str(write_corpus(tmp_path / "data" / "ptb").parent), download=False)
  res = lm.fit(_tiny(transformer.get_config("tied,sqrt_d")), corpus, tmp_path / "run")
  # the counting corpus is predictable from the current word except at sentence ends (unigram: ~31)
  assert res["valid_ppl"] < 10 and res["test_ppl"] < 10, res
  assert res["history"][-1]["valid_ppl"] < res["history"][0]["valid_ppl"]


@pytest.mark.slow
def test_entry_point_runs_the_transformer(tmp_path):
  root = write_corpus(tmp_path / "data" / "ptb").parent
  env = dict(os.environ, WT_JAX_DATA=str(root), JAX_PLATFORMS="cpu")
  args = ["--config=configs/transformer.py:untied,logits", f"--workdir={tmp_path / 'run'}", "--config.max_steps=3",
          "--config.vocab_size=31", "--config.hidden_size=16", "--config.num_layers=1", "--config.num_heads=2",
          "--config.mlp_size=32", "--config.memory=4", "--config.bptt=10", "--config.test_window=10"]
  proc = subprocess.run([sys.executable, "-m", "experiments.ptb", *args], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  res = json.loads((tmp_path / "run" / "results.json").read_text())
  assert res["config"] == "transformer_untied_logits" and res["steps"] == 3 and res["model"] == "transformer_lm"
  assert math.isfinite(res["test_ppl"])


def test_shapes_are_checked_at_trace_time():
  model = _model(memory=3)
  params = _params(model)
  with pytest.raises(AssertionError, match="shape"):
    _apply(model, params, jnp.zeros((2, 5), jnp.int32), jnp.full((1, 2, 4), -1, jnp.int32))  # memory 4 ≠ 3


def test_t5_scale_draws_the_embedding_at_std_1():
  """configs/transformer.py:tied,t5 is the 1/√D logit scale with T5's embedding init (std 1 = U(−√3, √3));
  the blocks keep the model's init."""
  c = transformer.get_config("tied,t5")
  assert c.words.logit_scale and not c.words.input_scale and c.words.init_scale == pytest.approx(math.sqrt(3))
  model = models.build(c)
  init = jax.jit(model.init)  # (one compiled program: op by op, the init of this 4-block model takes seconds)
  params = init(jax.random.PRNGKey(0), jnp.zeros((2, 4), jnp.int32), model.initial_carry(2))["params"]
  E = np.asarray(params["words"]["embedding"])
  assert 0.95 < E.std() < 1.05 and np.abs(E).max() <= math.sqrt(3)
  assert np.abs(np.asarray(params["block_0"]["qkv"]["kernel"])).max() <= c.init_scale


def test_t5_steps_scales_only_the_word_matrices_steps():
  """configs/transformer.py:tied,t5_steps: Adam's step of the word matrix × its init scale over the blocks'
  (√3 / 0.035), every other step unchanged — one optimiser step from equal parameters and gradients."""
  base, scaled = transformer.get_config("tied,t5"), transformer.get_config("tied,t5_steps")
  assert scaled.words.lr_scale == pytest.approx(math.sqrt(3) / 0.035) and base.words.lr_scale == 1.0
  params = {"words": {"embedding": jnp.ones((5, 3)), "out_bias": jnp.zeros(5)}, "block": {"w": jnp.ones((3, 3))}}
  grads = jax.tree_util.tree_map(lambda p: jnp.full(p.shape, 0.1), params)
  steps = {}
  for name, c in (("t5", base), ("t5_steps", scaled)):
    tx = optim.make_optimizer(c, steps_per_epoch=10)
    steps[name], _ = tx.update(grads, tx.init(params), params)
  ratio = jax.tree_util.tree_map(lambda a, b: np.asarray(b / a), steps["t5"], steps["t5_steps"])
  np.testing.assert_allclose(ratio["words"]["embedding"], scaled.words.lr_scale, rtol=1e-6)
  np.testing.assert_allclose(ratio["block"]["w"], 1.0, rtol=1e-6)
  np.testing.assert_allclose(ratio["words"]["out_bias"], 1.0, rtol=1e-6)
  with pytest.raises(ValueError, match="lr_scale"):
    optim.scale_word_matrices(2.0).update({"w": jnp.ones(2)}, None)
  with pytest.raises(ValueError, match="> 0"):
    optim.scale_word_matrices(0.0)


@pytest.mark.parametrize("cell,V", [("untied,64,1000", 1000), ("tied_wide,128,4000", 4000), ("tied_wide,64,words", 33278)])
def test_a_tying_surface_cell_counts_its_parameters_as_the_model_has_them(cell, V):
  """configs/tying_surface.py: `transformer_params` equals the built model's count (so `matched_width`'s widened
  tied model is matched to the untied one by the model's own parameters, here within 5%); a grid point's `lr=` and
  `dropout=` set those two and name the run; a malformed cell is refused."""
  from configs import tying_surface
  c = tying_surface.get_config(cell)
  c.vocab_size = V
  model = models.build(c)
  shapes = jax.eval_shape(lambda k: models.init_params(model, c, k), jax.random.key(0))
  built = sum(x.size for x in jax.tree_util.tree_leaves(shapes))
  assert built == tying_surface.transformer_params(c.hidden_size, V, tied=c.words.mode == "tied")
  arm, width, _ = cell.split(",")
  untied = tying_surface.transformer_params(int(width), V, tied=False)
  assert c.hidden_size % c.num_heads == 0 and c.mlp_size == 4 * c.hidden_size
  if arm == "tied_wide":
    assert c.hidden_size > int(width) and abs(built - untied) / untied < 0.05
  for bad in ("tied,128", "tied,128,4000,lr=fast", "tied,128,4000,momentum=0.9"):
    with pytest.raises(ValueError, match="ARM,D,VOCAB"):
      tying_surface.get_config(bad)
  grid = tying_surface.get_config(f"{cell},lr=2e-3,dropout=0.1")  # a grid point: the two settings, and its name
  assert (grid.learning_rate, grid.dropout, grid.hidden_size) == (2e-3, 0.1, c.hidden_size)
  assert grid.name == f"{c.name}_lr2e-3_dropout0.1"


def test_a_tying_surface_cell_takes_its_arms_chosen_values_and_tied_wide_takes_tieds(monkeypatch):
  """configs/tying_surface.py: a cell without `lr=`/`dropout=` takes its arm's `CHOSEN` values (tied_wide: tied's),
  the Transformer study's where its arm has none; a grid point's own settings win."""
  from configs import tying_surface
  monkeypatch.setattr(tying_surface, "CHOSEN", {"untied": (2e-3, 0.1), "tied": (1e-3, 0.1)})
  got = lambda cell: (lambda c: (c.learning_rate, c.dropout, c.name))(tying_surface.get_config(cell))
  assert got("untied,64,4000") == (2e-3, 0.1, "surface_untied_d64_4000")
  assert got("tied_wide,128,1000")[:2] == got("tied,64,16000")[:2] == (1e-3, 0.1)
  assert got("untied,64,4000,lr=1e-3")[:2] == (1e-3, 0.1)
  monkeypatch.setattr(tying_surface, "CHOSEN", {})
  assert got("tied,64,4000")[:2] == (1e-3, 0.3)
