"""Tying bugs other projects shipped, each shown absent here (the README's "Tying pitfalls" lists them with the
reports and the older tests that cover the rest: one optimiser slot, data parallelism, parameter counts)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tests.conftest import tiny_config
from wt_jax import convert, export, losses, models, trained_lm
from wt_jax.train import lm, optim
from wt_jax.train.checkpoint import Checkpoints

V = 31  # tiny_corpus's vocabulary


def _tied(**overrides):
  return tiny_config(vocab_size=V, words=dict(mode="tied"), **overrides)


def _window(config, seed=1):
  k1, k2 = jax.random.split(jax.random.key(seed))
  shape = (config.batch_size, config.bptt)
  return jax.random.randint(k1, shape, 0, V), jax.random.randint(k2, shape, 0, V)


def _gradient(config, model, params):
  """The gradient of `config`'s training cost at `params` on one window (no dropout)."""
  x, y = _window(config)
  cost = losses.make_lm_cost(config)

  def total(p):
    logits, _ = model.apply({"params": p}, x, model.initial_carry(config.batch_size), train=False)
    return cost(p, logits, y, {}, jax.random.key(0))[0]
  return jax.grad(total)(params)


def _uses_one_matrix(model, params):
  """The lookup is rows of words/embedding and the logits are h·Sᵀ + b with that same S."""
  S, b = params["words"]["embedding"], params["words"]["out_bias"]
  assert set(params["words"]) == {"embedding", "out_bias"}
  ids = jnp.array([[1, 5, 7]])
  np.testing.assert_array_equal(model.apply({"params": params}, ids, method=lambda m, i: m.words.embed(i)), S[ids])
  h = jax.random.normal(jax.random.key(3), (2, S.shape[1]))
  np.testing.assert_allclose(model.apply({"params": params}, h, method=lambda m, x: m.words.logits(x)),
                             h @ S.T + b, rtol=1e-6, atol=1e-6)


def test_clipping_by_global_norm_counts_the_shared_matrix_once():
  """NVIDIA/Megatron-LM PR #7227: a tied matrix counted in the global norm once per role, so every gradient was
  clipped too hard. Here the clip scales the gradient by c / ‖g‖ with ‖g‖ over the leaves, the shared one once,
  and the step reports that norm; counting it twice would scale by a clearly smaller factor."""
  config = _tied(clip_norm=0.05, init_scale=1.0)  # (at 0.1 the embedding's share of the norm is 1e-6)
  model = models.build(config)
  params = models.init_params(model, config, jax.random.key(0))
  g = _gradient(config, model, params)
  norm = float(optax.tree.norm(g))
  twice = float(np.sqrt(norm ** 2 + float(jnp.sum(g["words"]["embedding"] ** 2))))
  assert norm > config.clip_norm and twice > 1.01 * norm  # (the clip acts, and the two readings differ)
  tx = optim.make_optimizer(config, steps_per_epoch=100)  # (SGD at lr 1 in the first epoch)
  updates, _ = tx.update(g, tx.init(params), params)
  np.testing.assert_allclose(updates["words"]["embedding"], -g["words"]["embedding"] * config.clip_norm / norm,
                             rtol=1e-5, atol=1e-9)
  state = lm.initial_state(config, model, tx, jax.random.key(0))
  _, sums = lm.make_train_step(model, tx, losses.make_lm_cost(config), jax.random.key(1))(state, *_window(config))
  assert float(sums["norm/grad"]) == pytest.approx(norm, rel=1e-5)


def test_after_training_the_tied_matrix_is_one_leaf_with_one_optimizer_slot_used_in_both_roles():
  """NVIDIA/Megatron-LM #656, paiml/entrenar #314: a tied matrix that came untied during training, or took two
  optimiser steps with two states. After steps of Adam the parameters still hold one V×D leaf, Adam's moments
  one slot for it, and the lookup and the logits both read the trained matrix (which moved)."""
  config = _tied(optimizer="adam", learning_rate=1e-2)
  model = models.build(config)
  tx = optim.make_optimizer(config, steps_per_epoch=100)
  state = lm.initial_state(config, model, tx, jax.random.key(0))
  before = np.asarray(state["params"]["words"]["embedding"])
  step = lm.make_train_step(model, tx, losses.make_lm_cost(config), jax.random.key(1))
  for seed in range(3):
    state, _ = step(state, *_window(config, seed))
  params = state["params"]
  matrices = lambda tree: [l for l in jax.tree_util.tree_leaves(tree) if l.shape == (V, config.hidden_size)]
  assert len(matrices(params)) == 1 and not np.allclose(params["words"]["embedding"], before)
  assert len(matrices(state["opt_state"])) == 2  # Adam's mu and nu: one slot each, for the one matrix
  _uses_one_matrix(model, params)


def test_a_train_step_moves_the_shared_matrix_by_exactly_one_optimizer_update():
  """A tied matrix stepped twice in one train step (once per role, or the update applied twice) trains faster than
  it should and looks fine in every other test. Here the step's new matrix is optax's Adam applied once, by hand,
  to the one summed gradient of both roles (two updates of Adam would move it about twice as far)."""
  config = _tied(optimizer="adam", learning_rate=1e-2, clip_norm=1e9)
  model = models.build(config)
  tx = optim.make_optimizer(config, steps_per_epoch=100)
  state = lm.initial_state(config, model, tx, jax.random.key(0))
  params = jax.tree_util.tree_map(jnp.copy, state["params"])  # (the step donates its state)
  g = _gradient(config, model, params)
  updates, _ = optax.adam(1e-2).update(g, optax.adam(1e-2).init(params), params)
  want = optax.apply_updates(params, updates)["words"]["embedding"]
  state, _ = lm.make_train_step(model, tx, losses.make_lm_cost(config), jax.random.key(1))(state, *_window(config))
  got = state["params"]["words"]["embedding"]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
  assert float(jnp.max(jnp.abs(want - params["words"]["embedding"]))) > 1e-3  # (the update is not negligible)


def test_each_member_has_its_own_shared_matrix(tiny_corpus):
  """Data parallelism's replicas are tests/test_parallel.py's (a tied RHN on 4 devices trains the one-device
  model); here the members of one program: member 1 at learning rate 0 keeps its own initial matrix while
  member 0's trains, and the two start from their own seeds."""
  corpus, _ = tiny_corpus
  task = lm.MembersTask(_tied(member_values="learning_rate=1.0,0.0"), corpus)
  state = task.init_state()
  before = np.asarray(state["params"]["words"]["embedding"])
  assert before.shape == (2, V, 16) and not np.allclose(before[0], before[1])
  for (batch, _), _ in zip(task.batches(1, 0), range(3)):
    state, _ = task.train_step(state, *batch)
  after = np.asarray(state["params"]["words"]["embedding"])
  np.testing.assert_array_equal(after[1], before[1])
  assert not np.allclose(after[0], before[0])


def test_weight_decay_reaches_the_shared_matrix_once():
  """karpathy/nanoGPT PR #21: tying broke the optimiser's decay groups. The loss-side L2 term adds
  wd·½‖θ‖² with the shared matrix counted once (an untied copy with U = V = S adds ½‖S‖² more); decoupled decay
  multiplies it by (1 − wd) once per step (twice would be (1 − wd)²)."""
  config = _tied(weight_decay=0.1, weight_decay_mode="loss")
  model = models.build(config)
  params = models.init_params(model, config, jax.random.key(0))
  x, y = _window(config)
  logits, _ = model.apply({"params": params}, x, model.initial_carry(config.batch_size), train=False)
  cost = lambda c: float(losses.make_lm_cost(c)(params, logits, y, {}, jax.random.key(0))[0])
  once = 0.5 * sum(float(jnp.sum(p ** 2)) for p in jax.tree_util.tree_leaves(params))
  assert cost(config) - cost(_tied()) == pytest.approx(0.1 * once, rel=1e-4)
  untied = convert.untie(params)
  S = params["words"]["embedding"]
  assert float(losses.weight_l2(untied)) == pytest.approx(once + 0.5 * float(jnp.sum(S ** 2)), rel=1e-5)
  tx = optim.make_optimizer(_tied(weight_decay=0.1, weight_decay_mode="decoupled", learning_rate=0.0), 100)
  zero = jax.tree_util.tree_map(jnp.zeros_like, params)
  updates, _ = tx.update(zero, tx.init(params), params)
  np.testing.assert_allclose(optax.apply_updates(params, updates)["words"]["embedding"],
                             0.9 * params["words"]["embedding"], rtol=1e-6)


@pytest.fixture(scope="module")
def tied_run(tiny_corpus, tmp_path_factory):
  folder = tmp_path_factory.mktemp("tied_run")
  lm.fit(_tied(max_steps=6), tiny_corpus[0], folder)
  return folder


def test_every_reader_of_a_tied_run_sees_one_matrix_in_both_roles_and_round_trips_change_no_logit(tied_run,
                                                                                                 tmp_path):
  """vllm-project/vllm #53019, sgl-project/sglang PR #1508, huggingface/transformers #48154: loaders that left
  a tied model's output layer random, or filled an embedding from the wrong matrix. The checkpoint restored into
  the trainer's state, `trained_lm.load` and the exporter read the same single matrix, used for the lookup and
  the logits; untying it (`export.convert_run`, what `experiments.export --convert` runs) gives an untied model
  with the same logits, and tying that back gives the same parameters."""
  run = trained_lm.load(tied_run)
  _uses_one_matrix(run.model, run.params)
  config = run.config
  model = models.build(config)
  tx = optim.make_optimizer(config, steps_per_epoch=100)
  target = jax.eval_shape(lambda k: lm.initial_state(config, model, tx, k), jax.random.key(0))
  state, _ = Checkpoints(tied_run / "checkpoints", read_only=True).restore("last", jax.tree_util.tree_map(
      lambda a: jnp.zeros(a.shape, a.dtype), target))
  S = np.asarray(run.params["words"]["embedding"])
  np.testing.assert_array_equal(state["params"]["words"]["embedding"], S)
  assert export.embedding_matrices(run.params).keys() == {"tied"}
  np.testing.assert_array_equal(export.embedding_matrices(run.params)["tied"], S)
  folder, manifest = export.convert_run(tied_run, tmp_path / "init", "untie")
  untied_config = config.copy_and_resolve_references()
  untied_config.words.mode = "untied"
  untied_model = models.build(untied_config)
  like = jax.device_get(models.init_params(untied_model, untied_config, jax.random.key(5)))
  untied = convert.load_init(folder, like=like)
  np.testing.assert_array_equal(untied["words"]["embedding"], S)
  np.testing.assert_array_equal(untied["words"]["out_embedding"], S)
  x, _ = _window(config)
  carry = model.initial_carry(config.batch_size)
  tied_logits, _ = model.apply({"params": run.params}, x, carry, train=False)
  untied_logits, _ = untied_model.apply({"params": untied}, x, carry, train=False)
  np.testing.assert_allclose(untied_logits, tied_logits, rtol=1e-6, atol=1e-6)
  jax.tree_util.tree_map(np.testing.assert_array_equal, convert.tie(untied), jax.device_get(run.params))
  assert manifest["same_logits"] and manifest["tying"] == "untied"
