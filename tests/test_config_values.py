"""The configs carry the papers' hyperparameters: each value below is pinned to its source, so a changed default
fails here (the training tests use small shapes and would not notice), and each paper row's parameter count
is read off the model the config builds.

Sources: Zaremba et al. (2014) and their TensorFlow code (small and large); Press & Wolf (2017) and their code
(projection regularisation λ: `l2_loss(P) / (batch · 6.5)`); Gal's BayesianRNN code (the BD rows); Zilly et
al.'s RHN code `ptb_sota` settings (the RHN rows).
"""
import importlib

import jax
import pytest

from wt_jax import models, tying

PINNED = {
    "small": dict(hidden_size=200, num_layers=2, dropout=0.0, init_scale=0.1, learning_rate=1.0, lr_decay=0.5,
                  decay_after_epoch=4, num_epochs=13, clip_norm=5.0, batch_size=20, bptt=20, vocab_size=10000,
                  optimizer="sgd", weight_decay=0.0, test_params="final", **{"words.mode": "untied",
                  "words.pr_lambda": 1.0 / 6.5, "words.proj_bias": True, "words.output_bias": True}),
    "small_tied_pr": {"words.mode": "tied_projection", "words.pr_lambda": 1.0 / 6.5, "hidden_size": 200},
    "large": dict(hidden_size=1500, num_layers=2, dropout=0.65, init_scale=0.04, learning_rate=1.0,
                  lr_decay=1.0 / 1.15, decay_after_epoch=14, num_epochs=55, clip_norm=10.0, batch_size=20,
                  bptt=35, test_params="final", **{"words.mode": "untied"}),
    "large_tied": {"words.mode": "tied", "hidden_size": 1500, "dropout": 0.65, "num_epochs": 55},
    "large_bd_wd": dict(model="bd_lstm_lm", hidden_size=1500, dropout_x=0.3, dropout_i=0.5, dropout_h=0.3,
                        dropout_o=0.5, mask_per_gate=True, init_scale=0.04, learning_rate=1.0, lr_decay=1.0 / 1.15,
                        decay_after_epoch=10, num_epochs=55, clip_norm=10.0, bptt=35, weight_decay=1e-7,
                        weight_decay_mode="decoupled"),
    "large_bd_tied": {"words.mode": "tied", "weight_decay": 0.0, "model": "bd_lstm_lm"},
    "rhn": dict(model="rhn_lm", num_layers=1, depth=10, hidden_size=830, dropout_x=0.25, dropout_i=0.75,
                dropout_h=0.25, dropout_o=0.75, init_scale=0.04, transform_bias=-2.0, learning_rate=0.2,
                lr_decay=1.0 / 1.02, decay_after_epoch=19, num_epochs=500, clip_norm=10.0, batch_size=20, bptt=35,
                weight_decay=1e-7, weight_decay_mode="loss", test_params="best"),
    "rhn_tied": {"words.mode": "tied", "depth": 10, "hidden_size": 830},
}

# Parameter counts of the models the configs build (the papers print 4.65M, 2.65M, 66M, 51M, 32M, 24M).
PARAMS = {"small": 4_651_600, "small_tied": 2_651_600, "small_pr": 4_691_800, "small_tied_pr": 2_691_800,
          "large": 66_022_000, "large_tied": 51_022_000, "large_bd_wd": 66_034_000, "large_bd_tied": 51_034_000,
          "rhn": 31_782_400, "rhn_tied": 23_482_400}


def _config(name):
  return importlib.import_module(f"configs.{name}").get_config()


@pytest.mark.parametrize("name", sorted(PINNED))
def test_configs_carry_the_papers_values(name):
  config = _config(name)
  for key, want in PINNED[name].items():
    node = config
    for part in key.split(".")[:-1]:
      node = node[part]
    got = node[key.split(".")[-1]]
    assert got == (pytest.approx(want, rel=1e-12) if isinstance(want, float) else want), (name, key, got)


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_parameter_counts_of_the_paper_rows(name):
  config = _config(name)
  model = models.build(config)
  shapes = jax.eval_shape(lambda k: models.init_params(model, config, k), jax.random.key(0))
  assert tying.count_params(shapes) == PARAMS[name]
