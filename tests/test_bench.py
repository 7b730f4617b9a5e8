"""The benchmark entry point: its FLOP formula and one tiny run (its timings are not asserted)."""
import json
import subprocess
import sys

import pytest


from tests.conftest import REPO

from configs import rhn_tied, small, small_tied_pr
from experiments import bench


def test_flop_formula_small_model():
  """Zaremba small: per token 2·(200+200)·800 per layer × 2 layers + 2·200·10,000 for the output layer,
  × 400 tokens × 3 (forward + backward) = 6.336 GFLOP (the issue's ≈ 6.3)."""
  assert bench.matmul_flops_per_step(small.get_config()) == 3 * 400 * (2 * 2 * 400 * 800 + 2 * 200 * 10_000)
  pr = small_tied_pr.get_config()
  assert bench.matmul_flops_per_step(pr) - bench.matmul_flops_per_step(small.get_config()) == 3 * 400 * 2 * 200**2
  c = rhn_tied.get_config()  # 1 layer, depth 10, H 830, 20 × 35 tokens
  assert bench.matmul_flops_per_step(c) == 3 * 700 * (2 * (830 * 1660 + 10 * 830 * 1660) + 2 * 830 * 10_000)


def test_flop_formula_counts_the_augmented_loss_target():
  c = small.get_config()
  plain = bench.matmul_flops_per_step(c)
  c.al.alpha = 13.0
  assert bench.matmul_flops_per_step(c) - plain == 400 * 2 * 200 * 10_000  # ỹ's L·u_y, forward only
  c.al.target_gradient = True
  assert bench.matmul_flops_per_step(c) - plain == 3 * 400 * 2 * 200 * 10_000


def test_flop_formula_counts_the_output_layer_each_softmax_computes():
  """tiny_config: 2 × 16 LSTM, V = 31, 4 × 5 = 20 tokens. Per token: the layers 2 · 2·(16 + 16)·64 = 8,192; the
  output layer full 2·16·31 = 992; sampled and NCE with K = 7: 7 candidates and the target, 2·16·8 = 256; class
  with bins (0, 3, 10, 31): 3 class rows and a window of the largest class's 21 rows, 2·16·24 = 768. × 20 × 3."""
  from tests.conftest import tiny_config
  assert bench.matmul_flops_per_step(tiny_config()) == 3 * 20 * (8_192 + 992) == 551_040
  for kind in ("sampled", "nce"):
    assert bench.matmul_flops_per_step(tiny_config(softmax=dict(kind=kind, num_samples=7))) == 3 * 20 * (8_192 + 256)
  resolved = tiny_config(softmax=dict(kind="class", class_bounds=(0, 3, 10, 31)))
  assert bench.matmul_flops_per_step(resolved) == 3 * 20 * (8_192 + 768) == 537_600
  assert bench.matmul_flops_per_step(tiny_config(softmax=dict(kind="class"))) is None  # bins not known yet
  pr = tiny_config(words=dict(mode="tied_projection"), softmax=dict(kind="sampled", num_samples=7))
  assert bench.matmul_flops_per_step(pr) == 3 * 20 * (8_192 + 2 * 16 * 16 + 256)  # the projection stays


@pytest.mark.slow
def test_bench_times_the_step_fit_trains_with():
  """With the augmented loss on, the compiled step does its extra V×H product per token (the benchmark once
  built its own step without it; XLA's count would then not move)."""
  import numpy as np
  from tests.conftest import tiny_config
  from wt_jax import models
  from wt_jax.data import batching
  config = tiny_config(vocab_size=50, hidden_size=16, words=dict(mode="tied"))
  windows = batching.lm_windows(np.arange(2000, dtype=np.int32) % 50, config.batch_size, config.bptt)
  flops = []
  for alpha in (0.0, 13.0):
    config.al.alpha = alpha
    step = bench.compiled_train_step(config, models.build(config), windows)[0]
    flops.append(bench._xla_flops(step))
  assert flops[1] - flops[0] >= config.batch_size * config.bptt * 2 * 16 * 50, flops


@pytest.mark.slow
def test_bench_prints_one_json_line():
  r = subprocess.run(
      [sys.executable, "-m", "experiments.bench", "--config=configs/small_tied.py", "--synthetic",
       "--steps=2", "--warmup=1", "--repeats=1", "--eval_windows=2", "--peak=false", "--breakdown",
       "--config.hidden_size=16", "--config.vocab_size=50"],
      cwd=REPO, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  out = json.loads(r.stdout.strip().splitlines()[-1])
  assert out["matmul_flops_per_step"] == 3 * 400 * (2 * 2 * 32 * 64 + 2 * 16 * 50)
  assert out["xla_flops_per_step"] > 0
  assert out["train_ms_per_step"] > 0 and out["eval_tok_per_s"] > 0
  assert "fraction_of_peak" not in out  # --peak=false
  assert out["head_loss_fwd_bwd_ms"] > 0 and out["optimizer_update_ms"] > 0  # --breakdown


@pytest.mark.slow
def test_counts_a_benchmark_cannot_run_with_are_refused_in_its_flags():
  """--steps=0 (no timed step), a members list that is not whole numbers, an interpreter that is not there:
  absl's one-line flags error naming the flag, before anything is built."""
  for flag, says in (("--steps=0", "--steps must be ≥ 1."), ("--members_sweep=0,-1", "--members_sweep lists whole"),
                     ("--torch_python=/no/such/python", "--torch_python: no such interpreter.")):
    r = subprocess.run([sys.executable, "-m", "experiments.bench", "--config=configs/small_tied.py", flag],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "FATAL Flags parsing error" in r.stderr and says in r.stderr, r.stderr[-2000:]


@pytest.mark.slow  # (the skip-gram trainer's bench: the LM's is the fast tier's)
def test_skipgram_bench_reports_words_per_second_per_epoch():
  """The skip-gram mode trains the real pipeline on a small corpus; one entry per epoch, words counted
  in vocabulary (as experiments.word2vec and gensim_reference.py count them)."""
  from configs import w2v_tied
  c = w2v_tied.get_config()
  c.dim, c.batch_size, c.min_count, c.sample = 8, 16, 1, 0.0  # no subsampling on a 5-word corpus
  sentences = [["a", "b", "c", "d", "e", "a", "b"]] * 40
  out = bench.bench_skipgram(c, sentences, epochs=2)
  assert out["words_per_epoch"] == 280 and out["vocab"] == 5
  assert len(out["words_per_s_by_epoch"]) == 2 and out["words_per_s"] == out["words_per_s_by_epoch"][-1] > 0
  assert c.num_epochs == 5  # the caller's config is left alone


@pytest.mark.slow
def test_nmt_bench_reports_training_tokens_and_decoding_sentences_per_second(tmp_path):
  """The translation mode runs the real pipeline on a prefix of the data: tokens/s per epoch, sentences/s."""
  from configs import nmt_multi30k
  from tests.conftest import write_parallel
  from wt_jax.data import multi30k
  c = nmt_multi30k.get_config("decoder")
  c.bpe_vocab_size, c.emb_size, c.hidden_size, c.dropout = 80, 16, 16, 0.0
  c.batch_size, c.eval_batch_size, c.buckets, c.max_len, c.beam_size = 20, 20, (16,), 15, 2
  data = multi30k.load_pair("en", "de", str(write_parallel(tmp_path / "multi30k").parent))
  out = bench.bench_nmt(c, data, train_pairs=200, epochs=2, eval_sentences=10)
  assert (out["train_pairs"], out["valid_sentences"], out["test_sentences"], out["beam"]) == (200, 10, 10, 2)
  assert len(out["target_tokens_per_s_by_epoch"]) == 2
  assert out["target_tokens_per_s"] == out["target_tokens_per_s_by_epoch"][-1] > 0
  assert out["decode_sentences_per_s"] > 0 and out["valid_decode_sentences_per_s_with_compile"] > 0
  assert c.num_epochs == 10  # the caller's config is left alone


def test_roofline_counts_agree_with_the_bench_formula():
  """The roofline's step (BUILD_NOTES, "Roofline") splits the bench's matmul FLOPs into the dependent chain
  (RHN: 35 steps × 10 micro-layers, forward and backward; LSTM: 35 × 2 layers, both ways) and the rest."""
  from configs import large_bd_wd_tied, rhn_tied
  from experiments.bench_helpers import roofline
  rhn, lstm = roofline.steps()
  assert (rhn.chain_stages, lstm.chain_stages) == (700, 140)
  # the chain is the recurrent part of the bench's count: forward and backward loops (2 of its 3 passes), and the
  # rest is the input projections, the output layer and the recurrent weight gradients after the loop
  for step, config, recurrent_per_token in ((rhn, rhn_tied.get_config(), 2 * 10 * 830 * 1660),
                                            (lstm, large_bd_wd_tied.get_config(), 2 * 2 * 1500 * 6000)):
    assert step.total_flops == bench.matmul_flops_per_step(config)
    assert step.chain_stages * step.stage_flops == 2 * 700 * recurrent_per_token
  assert rhn.stage_weights == 830 * 1660 and lstm.stage_weights == 1500 * 6000
  e = roofline.estimate(rhn, roofline.CHIPS[0], "bfloat16", 0.0)  # v5e: 2.76 MB per stage at 819 GB/s
  assert abs(e["stage_mem_us"] - 830 * 1660 * 2 / 819e9 * 1e6) < 0.01 and e["chain_bound"].startswith("HBM")
  assert roofline.estimate(rhn, roofline.CHIPS[0], "bfloat16", 10.0)["chain_bound"] == "per-stage latency"


def test_each_model_family_is_compared_with_its_own_pytorch_reference():
  small = "/refs/torch_small_lm.py"  # where the references live (../shared/bench, or a copy on a GPU host)
  assert bench.torch_reference("lstm_lm", small) == small
  assert bench.torch_reference("rhn_lm", small) == "/refs/torch_rhn_lm.py"
  assert bench.torch_reference("bd_lstm_lm", small).endswith("experiments/bench_helpers/torch_vd_lstm.py")
  assert bench.torch_reference("bd_lstm_lm", "/mine/other.py") == "/mine/other.py"  # any other script as given


@pytest.mark.slow
def test_members_sweep_times_each_k_in_its_own_process_against_one_model():
  """--members_sweep=0,2: the plain run and 2 members (the members' step and state of `lm.fit`), each in a
  process of its own; the record gives each K's ms per step and its ratio to the plain run's, and the members'
  run counts both members' FLOPs and tokens."""
  r = subprocess.run(
      [sys.executable, "-m", "experiments.bench", "--config=configs/small_tied.py", "--synthetic",
       "--steps=2", "--warmup=1", "--repeats=1", "--eval_windows=2", "--peak=false", "--rounds=1",
       "--members_sweep=0,2", "--config.hidden_size=16", "--config.vocab_size=50"],
      cwd=REPO, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-2000:]
  out = json.loads(r.stdout.strip().splitlines()[-1])
  assert out["bench"] == "members_sweep" and out["members"] == [0, 2]
  one, two = out["runs"]["0"][0], out["runs"]["2"][0]
  assert one["members"] == 0 and two["members"] == 2
  assert two["matmul_flops_per_step"] == 2 * one["matmul_flops_per_step"]
  # The record rounds the step's time to 0.01 ms and the rate, from the unrounded time, to 0.1 token/s: the rate
  # lies between those of the rounded time ± 0.005 ms, ± 0.05 (a bound that holds at any speed of the machine).
  ms, tokens = two["train_ms_per_step"], 2 * 400  # both members' tokens
  assert tokens / ((ms + 0.005) / 1000) - 0.05 <= two["train_tok_per_s"] <= tokens / ((ms - 0.005) / 1000) + 0.05
  assert out["time_of_one"]["2"] == round(two["train_ms_per_step"] / one["train_ms_per_step"], 3)
  assert len(two["warmup_nll"][0]) == 2  # one mean NLL per member


def test_members_profile_classes_the_compiled_ops_as_products_or_not():
  """hlo_ops reads the compiled module: the op that computes a @ b (a dot, or a fusion holding one) is a
  product, the sine after it is not, each with its output shape and the JAX operation it came from."""
  import jax
  import jax.numpy as jnp
  from experiments.bench_helpers import members_profile
  a = jnp.ones((64, 32))
  compiled = jax.jit(lambda a, b: jnp.sin(a @ b)).lower(a, a.T).compile()
  ops = members_profile.hlo_ops(compiled.as_text()).values()
  products = [op for op in ops if op["product"] and "dot_general" in op["source"]]
  assert products and all(op["shape"] == "f32[64,64]" for op in products)
  assert any(not op["product"] and op["source"].endswith("sin") for op in ops)


@pytest.mark.slow
def test_members_profile_splits_a_members_step_into_products_and_the_rest():
  """One model and 2 members of a tiny LM, each step traced: the traced ops are the compiled module's, their
  times split into products and the rest, and the output layer's forward product carries the member axis."""
  import numpy as np
  from experiments.bench_helpers import members_profile
  from tests.conftest import tiny_config
  train = np.random.default_rng(0).integers(0, 31, 4000).astype(np.int32)
  for K in (0, 2):
    step, state, prep, windows = members_profile.build_step(tiny_config(members=K), train, train[:1000])
    ops = members_profile.hlo_ops(step.as_text())
    measured, _ = members_profile.profile(step, state, prep, windows, steps=2, warmup=1)
    line = members_profile.summarise("tiny", K, 0, measured, ops, top=500)
    assert line["members"] == K and line["product_ms"] > 0 and line["other_ms"] > 0
    assert line["op_ms_per_step"] == pytest.approx(line["product_ms"] + line["other_ms"], abs=0.02)
    logits = [op for op in line["top_ops"] if op["product"] and op["source"].endswith("words.logits/dot_general")
              and "transpose" not in op["source"]]
    assert logits and all(op["shape"].startswith("f32[2," if K else "f32[20,") for op in logits), logits


@pytest.mark.parametrize("model", ["lstm_lm", "transformer_lm"])
def test_sampling_speed_times_the_scan_and_the_step_loop_on_the_same_draws(model):
  """`--sample_len`'s two loops draw the same tokens (the comparison is of one computation), and each is timed."""
  from tests.conftest import tiny_config
  extra = dict(num_heads=2, mlp_size=32, memory=3, test_window=5) if model == "transformer_lm" else {}
  out = bench.bench_sampling(tiny_config(model=model, **extra), max_len=12, num_samples=3, repeats=2)
  assert out["same_tokens"] is True and out["max_len"] == 12 and out["num_samples"] == 3
  assert out["scan_tokens_per_s"] > 0 and out["step_loop_tokens_per_s"] > 0


@pytest.mark.slow  # (three compiled passes)
def test_adaptation_speed_times_plain_cache_and_dynamic_scoring_of_one_stream():
  from tests.conftest import tiny_config
  out = bench.bench_adaptation(tiny_config(), tokens=300, cache_size=20, repeats=2)
  assert set(out["tokens_per_s"]) == {"plain", "cache", "dynamic_sgd"} and min(out["tokens_per_s"].values()) > 0
  assert (out["tokens"], out["cache_size"], out["segment"]) == (300, 20, 5)


@pytest.mark.slow
def test_corpus_bench_prepares_then_maps_the_cached_ids(shared_data_root):
  """--corpus_tokens: WikiText-2's training text repeated (here once), prepared in one process and started from the
  cache in another; both give the same tokens and the same vocabulary (its timings are not asserted)."""
  c = small.get_config()
  c.data_dir, c.vocab_size, c.download = str(shared_data_root), 40_000, False
  out = bench.bench_corpus(c, 1000)
  assert out["copies_of_wikitext2_train"] == 1 and out["train_tokens"] == 2_088_628
  assert out["prepare"]["tokens"] == out["cached"]["tokens"] == 2_088_628 + 217_646 + 245_569
  assert out["prepare"]["vocab"] == out["cached"]["vocab"] == 33_278
  assert out["cache_bytes"] >= 4 * out["prepare"]["tokens"]
