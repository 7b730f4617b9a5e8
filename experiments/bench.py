"""Throughput benchmark of a language-model, word2vec or translation config: prints one JSON line.

    python -m experiments.bench --config=configs/small_tied.py [--steps=200 --warmup=20 --repeats=3]
    python -m experiments.bench --config=configs/small_tied.py --torch_python=PATH --rounds=3   # vs PyTorch
    python -m experiments.bench --config=configs/w2v_untied.py [--w2v_epochs=2] [--gensim_python=PATH]
    python -m experiments.bench --config=configs/nmt_multi30k_three_way.py [--nmt_train_pairs=2000]
    python -m experiments.bench --config=configs/small_tied.py --members_sweep=0,1,2,4,8 --rounds=2
    python -m experiments.bench --config=configs/small_tied.py --sample_len=200 --sample_batch=1
    python -m experiments.bench --config=configs/small_tied.py --adapt_tokens=20000 --adapt_cache_size=500
    python -m experiments.bench --config=configs/small_tied.py --corpus_tokens=100000000   # a text corpus's start

An LM config: the train step's compile time, steady-state ms/step and tokens/s (median over --repeats blocks of
--steps steps after --warmup), batched evaluation tokens/s, and the step's matmul FLOPs against this machine's
measured float32 matmul rate. A reference (PyTorch, gensim) or several K of members run interleaved, each in its
own process: compare speeds only within one such run. What each mode measures: experiments/bench_helpers/README.md.
"""
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import app, flags
from ml_collections import config_flags

from experiments import run_main
import wt_jax.adapt as adapt
import wt_jax.lm_eval as lm_eval
import wt_jax.losses as losses
import wt_jax.members as members
import wt_jax.models as models
import wt_jax.precision as precision
import wt_jax.sampling as sampling
import wt_jax.softmax as softmax
import wt_jax.trained_lm as trained_lm
import wt_jax.tying as tying
from wt_jax.data import batching, lm_corpora, paths, ptb, translation, vocab, wikitext2
from wt_jax.train import lm, nmt, optim, run_record, skipgram, trainer

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file.", lock_config=True)
_STEPS = flags.DEFINE_integer("steps", 200, "Timed train steps per repeat.")
_WARMUP = flags.DEFINE_integer("warmup", 20, "Untimed train steps after compilation.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed blocks; the median is reported.")
_EVAL_WINDOWS = flags.DEFINE_integer("eval_windows", 100, "Validation windows timed for eval tokens/s (0: none).")
_SYNTHETIC = flags.DEFINE_bool("synthetic", False, "Use a random token stream instead of PTB.")
_TORCH_PYTHON = flags.DEFINE_string("torch_python", None, "Python with torch: run the interleaved comparison.")
_TORCH_SCRIPT = flags.DEFINE_string(
    "torch_script", str(Path(__file__).resolve().parents[1].parent / "shared" / "bench" / "torch_small_lm.py"),
    "The PyTorch reference benchmark script: torch_small_lm.py (where the references live; an RHN or "
    "variational-LSTM config then runs its own, see torch_reference) or any other script, run as given.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Interleaved rounds (with --torch_python or --gensim_python).")
_W2V_EPOCHS = flags.DEFINE_integer("w2v_epochs", 2, "Skip-gram configs: epochs to train (the last is timed).")
_GENSIM_PYTHON = flags.DEFINE_string("gensim_python", None,
                                     "Skip-gram configs: a Python with gensim, for the interleaved comparison.")
_BREAKDOWN = flags.DEFINE_bool("breakdown", False, "Also time the output layer + loss (forward and backward) "
                                 "and the optimizer update alone, to show where a step's time goes.")
_NMT_TRAIN_PAIRS = flags.DEFINE_integer("nmt_train_pairs", 2000, "Translation configs: training pairs used.")
_NMT_EPOCHS = flags.DEFINE_integer("nmt_epochs", 2, "Translation configs: epochs to train (the last is timed).")
_NMT_EVAL = flags.DEFINE_integer("nmt_eval_sentences", 200,
                                 "Translation configs: validation and test sentences decoded.")
_PEAK = flags.DEFINE_bool("peak", True, "Measure the float32 matmul peak and report the fraction reached.")
_SAMPLE_LEN = flags.DEFINE_integer("sample_len", 0, "Time sampling this many tokens per sequence instead (0: off).")
_SAMPLE_BATCH = flags.DEFINE_integer("sample_batch", 1, "With --sample_len: sequences drawn as one batch.")
_ADAPT_TOKENS = flags.DEFINE_integer("adapt_tokens", 0, "Time scoring a stream of this many tokens plain, with the "
                                     "cache and with dynamic evaluation instead (0: off).")
_ADAPT_CACHE_SIZE = flags.DEFINE_integer("adapt_cache_size", 500, "With --adapt_tokens: the cache's n.")
_CORPUS_TOKENS = flags.DEFINE_integer("corpus_tokens", 0, "Time preparing a text corpus of this many training tokens "
                                     "(WikiText-2's training text repeated), then its cached start (0: off).")
_MEMBERS_SWEEP = flags.DEFINE_list("members_sweep", [], "Numbers of members K (0: one plain run) to time, each in "
                                   "its own process, --rounds times interleaved; prints their ratios to K = 0.")
flags.mark_flag_as_required("config")
# Counts a benchmark cannot run with 0 of (no timed step, no repeat, no round), and the members' list: each
# an absl validator, so a bad value is one line before anything is built.
for _flag in ("steps", "repeats", "rounds", "w2v_epochs", "nmt_epochs", "nmt_train_pairs"):
  flags.register_validator(_flag, lambda v: v >= 1, message=f"--{_flag} must be ≥ 1.")
for _flag in ("warmup", "eval_windows", "nmt_eval_sentences"):
  flags.register_validator(_flag, lambda v: v >= 0, message=f"--{_flag} must be ≥ 0.")
flags.register_validator("members_sweep", lambda ks: all(k.strip().isdigit() for k in ks),
                         message="--members_sweep lists whole numbers ≥ 0 (0: one plain run), e.g. 0,2,4.")
for _flag in ("torch_python", "gensim_python"):
  flags.register_validator(_flag, lambda v: v is None or Path(v).is_file() or shutil.which(v) is not None,
                           message=f"--{_flag}: no such interpreter.")


def torch_reference(model: str | None, script: str) -> str:
  """The PyTorch reference for a config's model family, given --torch_script. `torch_small_lm.py` (Zaremba's
  LSTM, cuDNN's on a GPU) stands for the set of references: an RHN config runs `torch_rhn_lm.py` from the
  same folder, a variational-LSTM config `bench_helpers/torch_vd_lstm.py` (cuDNN's LSTM cannot apply a mask
  fixed per sequence to h; no published PyTorch reference exists for Gal's LSTM). Any other script runs as
  given, whatever the model."""
  if Path(script).name != "torch_small_lm.py":
    return script
  if model == "rhn_lm":
    return str(Path(script).with_name("torch_rhn_lm.py"))
  if model == "bd_lstm_lm":
    return str(Path(__file__).resolve().parent / "bench_helpers" / "torch_vd_lstm.py")
  return script


def _memory(compiled) -> dict:
  """XLA's memory analysis of the compiled train step, in MiB: live temporaries (activations kept for the
  backward pass, workspace) and the arguments/outputs (parameters, optimizer state, batch)."""
  try:
    m = compiled.memory_analysis()
  except Exception:  # not every backend implements it
    return {}
  if m is None:
    return {}
  mib = lambda b: round(b / 2**20, 1)
  return {"step_temp_mib": mib(m.temp_size_in_bytes), "step_args_mib": mib(m.argument_size_in_bytes),
          "step_output_mib": mib(m.output_size_in_bytes)}


def matmul_flops_per_step(config) -> int | None:
  """Matmul FLOPs of one training step (forward + backward = 3 × forward; 2 per multiply-add), by formula.

  Forward per token: LSTM layer 2·(I + H)·4H; RHN layer 2·(I·2H + depth·H·2H); projection (PR) 2·H²; the output
  layer by `config.softmax` (`head_flops_per_token`); with the augmented loss, 2·H·V more for its target (× 3 if
  its gradient is taken). (XLA's own `cost_analysis` counts the body of a `lax.scan` once, not once per time
  step, so it under-counts the recurrences; it is reported beside this as `xla_flops_per_step`.) None for a
  model family without a formula, or a class-factored softmax whose bins are not resolved yet.
  """
  H, L, tokens = config.hidden_size, config.num_layers, config.batch_size * config.bptt
  if config.model in ("lstm_lm", "bd_lstm_lm"):
    body = L * 2 * (H + H) * 4 * H
  elif config.model == "rhn_lm":
    body = L * 2 * (H * 2 * H + config.depth * H * 2 * H)
  else:
    return None
  head = head_flops_per_token(config)
  if head is None:
    return None
  head += 2 * H * H if config.words.mode in ("projection", "tied_projection") else 0
  # Inan's augmented loss: its target ỹ = softmax(L·u_y / τ) costs one more V×H product per token, forward
  # only unless the gradient flows through ỹ.
  augmented = (2 * H * config.vocab_size * (3 if config.al.target_gradient else 1)) if config.al.alpha else 0
  return 3 * tokens * (body + head) + tokens * augmented


def head_flops_per_token(config) -> int | None:
  """Forward matmul FLOPs per token of the output layer as the training cost computes it (`wt_jax.softmax`):
  full 2·H·V (every row); sampled and NCE 2·H·(K + 1) (the K candidates shared by the batch, and the token's
  own target row); class 2·H·(C + M) (the C class rows, then the window of M = the largest class's size rows
  that `softmax.class_nll` reads for every token). None for a class softmax without its bins."""
  H, kind = config.hidden_size, softmax.kind_of(config)
  if kind == "full":
    return 2 * H * config.vocab_size
  if kind in ("sampled", "nce"):
    return 2 * H * (config.softmax.num_samples + 1)
  bounds = config.softmax.class_bounds
  if not bounds:
    return None
  return 2 * H * (len(bounds) - 1 + max(b - a for a, b in zip(bounds, bounds[1:])))


def matmul_peak_gflops(n: int = 2048, repeats: int = 5) -> float:
  """Measured float32 matmul rate of this machine through XLA ([n, n] @ [n, n], median of `repeats`)."""
  a = jnp.asarray(np.random.default_rng(0).standard_normal((n, n)), jnp.float32)
  f = jax.jit(lambda a, b: a @ b)
  f(a, a).block_until_ready()
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    f(a, a).block_until_ready()
    times.append(time.perf_counter() - t0)
  return 2 * n**3 / statistics.median(times) / 1e9


def _xla_flops(compiled) -> float | None:
  try:
    cost = compiled.cost_analysis()
  except Exception:  # not every backend implements it
    return None
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return (cost or {}).get("flops")


def bench_corpus(config, tokens: int) -> dict:
  """A text folder whose training text is WikiText-2's repeated to at least `tokens` tokens (valid and test
  WikiText-2's), read by `text_corpus.load` twice, each in a process of its own (`bench_helpers/corpus_prep.py`):
  first with an empty id cache (the preparation), then with the ids it cached (a later start, a resume)."""
  source = wikitext2.ensure(config.data_dir or None, config.download)
  with tempfile.TemporaryDirectory() as tmp:
    folder, cache = Path(tmp) / "text", Path(tmp) / "cache"
    folder.mkdir()
    lines = paths.read_lines(wikitext2.split_file(source, "train"))
    per_copy = sum(len(line.split()) + 1 for line in lines)
    copies = -(-tokens // per_copy)
    with open(folder / "train.txt", "w", encoding="utf-8") as f:
      for _ in range(copies):
        f.writelines(lines)
    for split in ("valid", "test"):
      (folder / f"{split}.txt").write_text("".join(paths.read_lines(wikitext2.split_file(source, split))))
    del lines
    env = dict(os.environ, WT_JAX_CACHE=str(cache))
    cmd = [sys.executable, str(Path(__file__).parent / "bench_helpers" / "corpus_prep.py"), f"--data_dir={folder}",
           f"--tokenizer={config.tokenizer}", f"--vocab_size={config.vocab_size}"]
    runs = [_json_line(cmd, env) for _ in ("prepare", "cached")]
    cached_bytes = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
    return {"bench": "text_corpus", "train_tokens": copies * per_copy, "copies_of_wikitext2_train": copies,
            "train_text_bytes": (folder / "train.txt").stat().st_size, "cache_bytes": cached_bytes,
            "tokenizer": config.tokenizer, "vocab_size_cap": config.vocab_size, "prepare": runs[0], "cached": runs[1],
            "cpu": run_record.host()["cpu"], "python": sys.version.split()[0]}


def bench_sampling(config, max_len: int, num_samples: int, repeats: int) -> dict:
  """Sampled tokens per second (module docstring): `num_samples` sequences of `max_len` tokens after a one-token
  prompt, at temperature 1, by `sampling.decode` (one compiled scan) and by a Python loop of one jitted step per
  token (`sampling.next_logits`, then `choose` with the same keys: the same tokens). The median of `repeats`
  timings of each, the two interleaved."""
  model = models.build(config)
  params = jax.jit(lambda k: models.init_params(model, config, k))(jax.random.key(0))
  window, key, temperature = sampling.window_of(model, config), jax.random.key(1), jnp.float32(1.0)
  prompt = jnp.zeros((1,), jnp.int32)

  def scan():
    return sampling.decode(params, prompt, key, temperature, model=model, window=window, num_samples=num_samples,
                             max_len=max_len, top_k=0, top_p=1.0)[0]

  @jax.jit
  def one(params, state, ids_B, i):
    logits_BxV, state = sampling.next_logits(model, window, params, state, ids_B)
    return state, sampling.choose(logits_BxV.astype(jnp.float32), jax.random.fold_in(key, i), temperature, 0, 1.0)

  def loop():
    state, ids_B, out = sampling.initial_state(model, window, num_samples), prompt.repeat(num_samples), []
    for i in range(max_len):
      state, ids_B = one(params, state, ids_B, i)
      out.append(ids_B)
    return jnp.stack(out, axis=1)

  t0 = time.perf_counter()
  first = np.asarray(scan())
  compile_s = time.perf_counter() - t0
  same = bool(np.array_equal(first, np.asarray(loop())))
  seconds = {scan: [], loop: []}
  for _ in range(repeats):
    for f, times in seconds.items():
      t0 = time.perf_counter()
      jax.block_until_ready(f())
      times.append(time.perf_counter() - t0)
  rate = lambda f: num_samples * max_len / statistics.median(seconds[f])
  return {"bench": "sampling", "config": config.name, "model": config.model, "num_samples": num_samples,
          "max_len": max_len, "repeats": repeats, "compile_s": round(compile_s, 2),
          "scan_tokens_per_s": round(rate(scan), 1), "step_loop_tokens_per_s": round(rate(loop), 1),
          "same_tokens": same, "device_kind": jax.devices()[0].device_kind, "jax": jax.__version__,
          "host": run_record.host(), "wt_jax_commit": run_record.code_revision()}


def bench_adaptation(config, tokens: int, cache_size: int, repeats: int) -> dict:
  """Scored tokens per second of the test protocol (batch 1) on one random stream of `tokens`: plain
  (`trained_lm.score_ids`), with the continuous cache of `cache_size` states and with sgd dynamic evaluation
  (segments of the config's bptt), at the config's initial parameters (the values do not change the work); the
  median of `repeats` timings of each, the three interleaved, after a first call that compiles; and the
  adapted passes' temporary memory (XLA's estimate, MiB)."""
  model = models.build(config)
  params = jax.jit(lambda k: models.init_params(model, config, k))(jax.random.key(0))
  lm_ = trained_lm.in_memory(config, params, vocab.Vocab([str(i) for i in range(config.vocab_size)]))
  ids = np.random.default_rng(0).integers(0, config.vocab_size, tokens).astype(np.int32)
  runs = {"plain": lambda: trained_lm.score_ids(lm_, ids), "cache": lambda: adapt.score_cache(lm_, ids, cache_size,
                                                                                              0.3, 0.1),
          "dynamic_sgd": lambda: adapt.score_dynamic(lm_, ids, "sgd", 0.01)}
  compile_s, seconds = {}, {name: [] for name in runs}
  for name, f in runs.items():
    t0 = time.perf_counter()
    f()
    compile_s[name] = round(time.perf_counter() - t0, 2)
  for _ in range(repeats):
    for name, f in runs.items():
      t0 = time.perf_counter()
      f()  # (returns Python floats: the work is done)
      seconds[name].append(time.perf_counter() - t0)
  xs, ys, mask, _ = adapt._windows(lm_, ids, config.test_window)
  one = jnp.ones((1,), jnp.float32)
  cache = adapt._cache_pass.lower(params, xs, ys, mask, one, one, model=model, size=cache_size).compile()
  xs, ys, mask, _ = adapt._windows(lm_, ids, config.bptt)
  dynamic = adapt._dynamic_pass.lower(params, params, xs, ys, mask, 0.01, 0.0, 2e-5, model=model, rms=False).compile()
  temp = lambda c: _memory(c).get("step_temp_mib")
  return {"bench": "adaptation", "config": config.name, "model": config.model, "tokens": tokens,
          "cache_size": cache_size, "segment": config.bptt, "test_window": config.test_window, "repeats": repeats,
          "compile_s": compile_s,
          "tokens_per_s": {name: round((tokens - 1) / statistics.median(t), 1) for name, t in seconds.items()},
          "temp_mib": {"cache": temp(cache), "dynamic_sgd": temp(dynamic)},
          "device_kind": jax.devices()[0].device_kind, "jax": jax.__version__, "host": run_record.host(),
          "wt_jax_commit": run_record.code_revision()}


def _median_ms(f, *args, repeats: int = 30) -> float:
  jax.block_until_ready(f(*args))
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(f(*args))
    times.append(time.perf_counter() - t0)
  return 1000 * statistics.median(times)


def breakdown(config, params, tx) -> dict:
  """ms of the parts of a train step, each compiled alone: the output layer with the loss (forward and
  backward, on random hidden states of the step's shape) and the optimizer update (clip + SGD on a
  gradient-shaped tree). The rest of the step (embedding lookup, recurrence, glue) is what remains."""
  B, T, H = config.batch_size, config.bptt, config.hidden_size
  w = config.words
  head = tying.WordEmbeddings(vocab_size=config.vocab_size, dim=H, mode=w.mode, init_scale=config.init_scale,
                              pr_lambda=w.pr_lambda, proj_bias=w.proj_bias, output_bias=w.output_bias,
                              logit_scale=w.logit_scale, matmuls=precision.COMPUTE[config.compute_dtype])
  h = jax.random.normal(jax.random.key(0), (B, T, H))
  y = jax.random.randint(jax.random.key(1), (B, T), 0, config.vocab_size)
  head_params = head.init(jax.random.key(2), h, method=head.logits)["params"]

  def head_cost(p, h):
    logits, _ = head.apply({"params": p}, h, method=head.logits, mutable=[tying.PENALTIES])
    return losses.zaremba_cost(losses.token_nll(logits, y))

  head_fwd = jax.jit(head_cost)
  head_fwd_bwd = jax.jit(jax.value_and_grad(head_cost, argnums=(0, 1)))
  opt_state = tx.init(params)
  grads = jax.tree_util.tree_map(lambda p: 1e-3 * jnp.ones_like(p), params)

  @jax.jit
  def update(params, opt_state, grads):
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  return {"head_loss_fwd_ms": round(_median_ms(head_fwd, head_params, h), 2),
          "head_loss_fwd_bwd_ms": round(_median_ms(head_fwd_bwd, head_params, h), 2),
          "optimizer_update_ms": round(_median_ms(update, params, opt_state, grads), 2)}


def _json_line(cmd: list[str], env: dict | None = None) -> dict:
  r = subprocess.run(cmd, capture_output=True, text=True, env=env)
  if r.returncode != 0:
    raise RuntimeError(f"{' '.join(cmd)} exited with {r.returncode}:\n{r.stderr[-3000:]}")
  out = r.stdout
  return json.loads([l for l in out.splitlines() if l.startswith("{")][-1])


def _interleave(reference: str, reference_cmd: list[str], own_flags: tuple[str, ...]) -> dict[str, list]:
  """--rounds times: the reference command, then this benchmark (this command line without the flags
  starting with `own_flags`), each in its own process. {reference: [json], 'wt_jax': [json]}."""
  ours_cmd = [sys.executable, "-m", "experiments.bench", *[a for a in sys.argv[1:] if not a.startswith(own_flags)]]
  runs = {reference: [], "wt_jax": []}
  for _ in range(_ROUNDS.value):
    runs[reference].append(_json_line(reference_cmd))
    runs["wt_jax"].append(_json_line(ours_cmd))
  return runs


def _accepted_args(python: str, script: str, args: list[str]) -> list[str]:
  """`args` ("--flag" or "--flag value") less the flags that `script --help` does not list: the RHN
  reference fixes batch, bptt and size (Zilly et al.'s ptb_sota shape) and has no --batch/--bptt/--hidden."""
  r = subprocess.run([python, script, "--help"], capture_output=True, text=True)
  if r.returncode != 0:
    raise RuntimeError(f"{script} --help exited with {r.returncode}:\n{r.stderr[-2000:]}")
  out, i = [], 0
  while i < len(args):
    n = 2 if i + 1 < len(args) and not args[i + 1].startswith("--") else 1
    if args[i] in r.stdout.split() or f"{args[i]}," in r.stdout or f"[{args[i]}" in r.stdout:
      out += args[i:i + n]
    i += n
  return out


def compare_with_torch(config) -> None:
  """Alternate reference and wt_jax runs in separate processes; print all runs and the medians."""
  tied = ["--tied"] if config.words.mode in ("tied", "tied_projection") else []
  gpu = jax.default_backend() == "gpu"
  helpers = Path(__file__).parent / "bench_helpers"
  # Equal precisions: with compute_dtype=bfloat16 the reference runs under CPU autocast to bfloat16; on a GPU
  # its float32 matmuls follow config.matmul_precision (TF32 for "default" and "tensorfloat32", as XLA's).
  if gpu:
    if config.compute_dtype == "bfloat16":
      raise app.UsageError("The GPU comparison runs float32 models (TF32 or exact); drop compute_dtype=bfloat16.")
    tf32 = "float32" if config.matmul_precision == "float32" else "tf32"
    autocast = [str(helpers / "torch_precision.py"), tf32]
  else:
    autocast = [str(helpers / "torch_autocast.py")] if config.compute_dtype == "bfloat16" else []
  script = torch_reference(config.get("model"), _TORCH_SCRIPT.value)
  torch_args = [*tied, "--steps", str(_STEPS.value), "--warmup", str(_WARMUP.value), "--batch",
                str(config.batch_size), "--bptt", str(config.bptt), "--hidden", str(config.hidden_size),
                "--eval-batches", str(_EVAL_WINDOWS.value), "--dropout", str(config.dropout),
                *(["--device", "cuda"] if gpu else [])]
  torch_cmd = [_TORCH_PYTHON.value, *autocast, script, *_accepted_args(_TORCH_PYTHON.value, script, torch_args)]
  runs = _interleave("torch", torch_cmd, ("--torch", "--rounds"))
  med = lambda k, key: statistics.median(r[key] for r in runs[k])
  print(json.dumps({
      "bench": "interleaved", "config": config.name, "rounds": _ROUNDS.value,
      "compute_dtype": config.compute_dtype, "matmul_precision": config.matmul_precision,
      "torch_wrapper": [Path(a).name for a in autocast], "device_kind": jax.devices()[0].device_kind,
      "torch_train_ms_per_step_median": med("torch", "train_ms_per_step"),
      "wt_jax_train_ms_per_step_median": med("wt_jax", "train_ms_per_step"),
      "torch_eval_tok_per_s_median": med("torch", "eval_tok_per_s"),
      "wt_jax_eval_tok_per_s_median": med("wt_jax", "eval_tok_per_s"),
      "speedup_train": med("torch", "train_ms_per_step") / med("wt_jax", "train_ms_per_step"),
      "runs": runs}))


def bench_skipgram(config, sentences, epochs: int) -> dict:
  """Train `epochs` epochs of `config` on `sentences` (a temporary workdir); words/s per epoch."""
  c = config.copy_and_resolve_references()
  c.num_epochs = epochs
  c.log_every = 1 << 30
  with tempfile.TemporaryDirectory() as tmp:
    r = skipgram.fit_skipgram(c, sentences, tmp)
  epoch_s = np.diff([0.0] + [h["train_s"] for h in r["history"]])  # (the first epoch includes compilation)
  per_epoch = [r["tokens"] / s for s in epoch_s]
  return {"bench": "wt_jax_skipgram", "config": config.name, "tying": config.tying, "vocab": r["vocab_size"],
          "words_per_epoch": r["tokens"], "batch": config.batch_size, "epochs": epochs,
          "words_per_s_by_epoch": [round(w, 1) for w in per_epoch],
          "words_per_s": round(per_epoch[-1], 1),
          # (a step's batch: pairs, or with batching=windows centres, each with its window's pairs)
          f"{'centres' if config.batching == 'windows' else 'pairs'}_per_s":
              round(r["steps_per_epoch"] * config.batch_size / epoch_s[-1], 1),
          "batching": config.batching, "shared_negatives": config.shared_negatives,
          "steps_per_call": config.steps_per_call, "jax": jax.__version__, "devices": [str(d) for d in jax.devices()],
          "host": run_record.host(), "commit": run_record.code_revision(),
          "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def bench_nmt(config, data: dict, train_pairs: int, epochs: int, eval_sentences: int) -> dict:
  """Train and decode `config` on a prefix of `data` ({split: (sources, targets)}) in a temporary workdir;
  training target tokens/s per epoch and decoding sentences/s."""
  c = config.copy_and_resolve_references()
  c.num_epochs, c.log_every, c.plot = epochs, 1 << 30, False
  n = {"train": train_pairs, "valid": eval_sentences, "test": eval_sentences}
  sub = {k: (src[:n[k]], tgt[:n[k]]) for k, (src, tgt) in data.items() if k in n}
  with tempfile.TemporaryDirectory() as tmp:
    r = nmt.fit_nmt(c, sub, Path(tmp))
  epoch_s = np.diff([0.0] + [h["train_s"] for h in r["history"]])  # (the first epoch includes compilation)
  per_epoch = [h["target_tokens"] / s for h, s in zip(r["history"], epoch_s)]
  return {"bench": "wt_jax_nmt", "config": config.name, "tying": config.tying,
          "pair": f"{config.src_lang}-{config.tgt_lang}", "num_params": r["num_params"],
          "train_pairs": len(sub["train"][0]), "batch": config.batch_size, "epochs": epochs,
          "target_tokens_per_s_by_epoch": [round(t, 1) for t in per_epoch],
          "target_tokens_per_s": round(per_epoch[-1], 1), "beam": config.beam_size,
          "valid_sentences": len(sub["valid"][0]),
          "valid_decode_sentences_per_s_with_compile": round(len(sub["valid"][0]) / r["valid_decode_s"], 2),
          "test_sentences": len(sub["test"][0]),
          "decode_sentences_per_s": round(len(sub["test"][0]) / r["test_decode_s"], 2),
          "jax": jax.__version__, "devices": [str(d) for d in jax.devices()]}


def compare_with_gensim(config) -> None:
  """Alternate gensim and wt_jax skip-gram runs in separate processes; print all runs and the medians."""
  gensim_cmd = [_GENSIM_PYTHON.value, str(Path(__file__).parent / "bench_helpers" / "gensim_reference.py"),
                f"--config={_config_path()}", "--epochs=1"]
  runs = _interleave("gensim", gensim_cmd, ("--gensim", "--rounds"))
  g = statistics.median(r["in_vocab_words_per_s"] for r in runs["gensim"])
  w = statistics.median(r["words_per_s"] for r in runs["wt_jax"])
  print(json.dumps({"bench": "interleaved_skipgram", "config": config.name, "rounds": _ROUNDS.value,
                    "gensim_words_per_s_median": g, "wt_jax_words_per_s_median": w,
                    "wt_jax_over_gensim": round(w / g, 3), "runs": runs}))


def _config_path() -> str:
  """The --config file as given on the command line (gensim_reference.py reads the same file)."""
  for a in sys.argv[1:]:
    if a.startswith("--config="):
      return a.split("=", 1)[1].split(":", 1)[0]
  raise app.UsageError("--gensim_python needs --config=FILE.")


def members_sweep(config, sweep: list[int]) -> None:
  """--rounds times, for each K of `sweep`: this benchmark with --config.members=K in its own process; prints
  every run and, per K, the median ms per step and its ratio to the plain run's (K = 0)."""
  if 0 not in sweep:
    raise app.UsageError("--members_sweep needs 0 (one model trained alone, the baseline).")
  if config.member_values:
    raise app.UsageError("--members_sweep times seeds (members=K); drop --config.member_values.")
  base = [sys.executable, "-m", "experiments.bench",
          *[a for a in sys.argv[1:] if not a.startswith(("--members_sweep", "--rounds", "--config.members="))]]
  runs = {k: [] for k in sweep}
  for _ in range(_ROUNDS.value):
    for k in sweep:
      runs[k].append(_json_line([*base, f"--config.members={k}"]))
  med = {k: statistics.median(r["train_ms_per_step"] for r in runs[k]) for k in sweep}
  print(json.dumps({
      "bench": "members_sweep", "config": config.name, "rounds": _ROUNDS.value, "members": sweep,
      "train_ms_per_step_median": {str(k): med[k] for k in sweep},
      "time_of_one": {str(k): round(med[k] / med[0], 3) for k in sweep},
      "ms_per_model_step": {str(k): round(med[k] / max(k, 1), 3) for k in sweep},
      "device_kind": jax.devices()[0].device_kind, "jax": jax.__version__, "host": run_record.host(),
      "wt_jax_commit": run_record.code_revision(), "runs": {str(k): v for k, v in runs.items()}}))


def members_task(config, train_stream, valid_stream):
  """The `lm.MembersTask` of a members config on these streams (its step, state and evaluation are what `lm.fit`
  runs); a synthetic stream gets a vocabulary of placeholder words."""
  words = vocab.Vocab([f"w{i}" for i in range(config.vocab_size)])
  corpus = ptb.Corpus(train=train_stream, valid=valid_stream, test=valid_stream[:1000], vocab=words)
  return lm.MembersTask(config, corpus)


def compiled_train_step(config, model, windows: batching.Windows, counts=None):
  """The train step `lm.fit` runs for `config` (`lm.make_train_step` of the config's cost and optimiser;
  `counts` the training counts a unigram proposal needs), compiled for the shape of `windows`, from the run's
  initial state. Returns (step, state, tx, compile_s)."""
  tx = optim.make_optimizer(config, len(windows))
  init_key, step_key = trainer.run_keys(config.seed)
  state = lm.initial_state(config, model, tx, init_key)
  t0 = time.perf_counter()
  step_fn = lm.make_train_step(model, tx, losses.make_lm_cost(config, counts), step_key).lower(
      state, windows.x[0], windows.y[0]).compile()
  return step_fn, state, tx, time.perf_counter() - t0


def main(argv):
  del argv
  config = _CONFIG.value
  matmul_precision = config.get("matmul_precision", "default")
  if matmul_precision not in precision.MATMUL_PRECISIONS:
    raise app.UsageError(f"Unknown matmul_precision {matmul_precision!r}; expected one of "
                         f"{', '.join(precision.MATMUL_PRECISIONS)}.")
  with jax.default_matmul_precision(precision.MATMUL_PRECISIONS[matmul_precision]):
    try:
      _main(config)
    except paths.DataUnavailableError as e:  # no corpus: one line
      sys.exit(str(e))


def _other_benchmark(config) -> bool:
  """Run the benchmark the config or the flags ask for other than a language model's train step (skip-gram, NMT, a
  members sweep, sampling, the PyTorch comparison); False when there is none."""
  if config.get("model") == "skipgram":
    if _GENSIM_PYTHON.value:
      if config.dataset != "ptb":
        raise app.UsageError("The gensim comparison reads PTB (experiments/bench_helpers/gensim_reference.py).")
      compare_with_gensim(config)
      return True
    if config.dataset != "ptb":
      raise app.UsageError("The skip-gram benchmark runs on PTB; drop --config.dataset.")
    sentences = ptb.sentences("train", config.data_dir or None, config.download)
    print(json.dumps(bench_skipgram(config, sentences, _W2V_EPOCHS.value)))
  elif "src_lang" in config:  # a translation config
    data = translation.load_corpus(config)
    print(json.dumps(bench_nmt(config, data, _NMT_TRAIN_PAIRS.value, _NMT_EPOCHS.value, _NMT_EVAL.value)))
  elif _CORPUS_TOKENS.value > 0:
    print(json.dumps(bench_corpus(config, _CORPUS_TOKENS.value)))
  elif _MEMBERS_SWEEP.value:
    members_sweep(config, [int(k) for k in _MEMBERS_SWEEP.value])
  elif _ADAPT_TOKENS.value > 0:
    print(json.dumps(bench_adaptation(config, _ADAPT_TOKENS.value, _ADAPT_CACHE_SIZE.value, _REPEATS.value)))
  elif _SAMPLE_LEN.value > 0:
    print(json.dumps(bench_sampling(config, _SAMPLE_LEN.value, max(_SAMPLE_BATCH.value, 1), _REPEATS.value)))
  elif _TORCH_PYTHON.value:
    compare_with_torch(config)
  else:
    return False
  return True


def _eval_rate(config, model, params, valid_stream, dp, K: int) -> tuple[dict, float]:
  """(`lm_eval.evaluate` of up to --eval_windows validation windows, its seconds): the second call of it, the first
  compiled; `dp` and K place a members run's K models as `lm.fit` does. 'tokens' counts every member's."""
  T, B = config.bptt, config.eval_batch_size
  n_eval = min(_EVAL_WINDOWS.value, (len(valid_stream) // B - 1) // T)
  stream = valid_stream[: (n_eval * T + 1) * B]
  place = dict(dp=dp, members=K) if K else {}
  eval_window = lm_eval.make_eval_window(model)
  lm_eval.evaluate(model, eval_window, params, stream, B, T, True, **place)
  t0 = time.perf_counter()
  ev = lm_eval.evaluate(model, eval_window, params, stream, B, T, True, **place)
  eval_s = time.perf_counter() - t0
  return {**ev, "tokens": ev["tokens"] * max(K, 1)}, eval_s


def _peak_fraction(flops: int, ms: float) -> dict:
  """The machine's measured float32 matmul rate, the step time `flops` would take at it, and the fraction of it
  a step of `ms` milliseconds reaches."""
  peak = matmul_peak_gflops()
  return {"matmul_peak_gflops": round(peak, 1), "floor_ms_per_step": round(flops / peak / 1e6, 2),
          "fraction_of_peak": round(flops / peak / 1e6 / ms, 3)}


def _main(config):
  if _other_benchmark(config):
    return
  if _SYNTHETIC.value:
    rng = np.random.default_rng(0)
    train_stream = rng.integers(0, config.vocab_size, 200_000).astype(np.int32)
    valid_stream = train_stream[:80_000]
  else:
    corpus = lm_corpora.load_corpus(config)
    train_stream, valid_stream = corpus.train, corpus.valid
  B, T = config.batch_size, config.bptt
  group = members.parse(config)
  K = group.size if group else 0
  config = softmax.resolve(config, train_stream)  # a class-factored softmax's bins, as `lm.fit` makes them
  windows = batching.lm_windows(train_stream, B, T)
  counts = softmax.counts(train_stream, config.vocab_size)
  if group:  # K models in one program: the members' step and state of `lm.fit`
    task = members_task(config, train_stream, valid_stream)
    model, state, tx = task.model, task.init_state(), task.tx
    x0, y0 = task.dp.shard_batch((windows.x[0], windows.y[0]))
    t0 = time.perf_counter()
    step_fn = task.step_fn.lower(state, x0, y0).compile()
    compile_s = time.perf_counter() - t0
    num_params = tying.count_params(members.member(state["params"], 0))
  else:
    model = models.build(config)
    step_fn, state, tx, compile_s = compiled_train_step(config, model, windows, counts)
    num_params = tying.count_params(state["params"])
  memory, xla_flops = _memory(step_fn), _xla_flops(step_fn)
  i = 0

  def run(n, keep=None):
    nonlocal state, i
    for _ in range(n):
      x, y = windows.x[i % len(windows)], windows.y[i % len(windows)]
      state, sums = step_fn(state, *(task.dp.shard_batch((x, y)) if group else (x, y)))
      if keep is not None:
        keep.append(sums["nll"] / sums["tokens"])
      i += 1
    jax.block_until_ready(sums)

  warm_nll = []
  run(_WARMUP.value, warm_nll)
  times = []
  for _ in range(_REPEATS.value):
    t0 = time.perf_counter()
    run(_STEPS.value)
    times.append((time.perf_counter() - t0) / _STEPS.value)
  ms = 1000 * statistics.median(times)

  ev, eval_s = (_eval_rate(config, model, state["params"], valid_stream, task.dp if group else None, K)
                if _EVAL_WINDOWS.value > 0 else ({"tokens": 0}, None))  # (0: train steps only)
  parts = (breakdown(config, state["params"], optim.make_optimizer(config, len(windows)))
           if _BREAKDOWN.value and not group else {})
  flops = matmul_flops_per_step(config)
  flops = flops * K if flops and group else flops  # (every member's)
  floor = _peak_fraction(flops, ms) if flops and _PEAK.value else {}
  print(json.dumps({
      "bench": "wt_jax_lm", "config": config.name, "num_params": num_params,
      "batch": B, "bptt": T, "hidden": config.hidden_size, "steps": _STEPS.value,
      "repeats": _REPEATS.value, "train_ms_per_step": round(ms, 2),
      "train_ms_per_step_all": [round(1000 * t, 2) for t in times],
      "members": K, "train_tok_per_s": round(max(K, 1) * B * T / (ms / 1000), 1), "compile_s": round(compile_s, 2),
      "eval_tokens": ev["tokens"], "eval_tok_per_s": round(ev["tokens"] / eval_s, 1) if eval_s else None,
      "matmul_flops_per_step": flops, "xla_flops_per_step": xla_flops,
      "achieved_gflops": round(flops / ms / 1e6, 1) if flops else None, **floor, **parts,
      "compute_dtype": config.compute_dtype, "matmul_precision": config.matmul_precision,
      "softmax": softmax.kind_of(config), **softmax.settings(config),
      # K draws with replacement: the distinct candidate rows a step scores, expected (sampled, nce)
      **({"expected_distinct_candidates": round(rows, 1)}
         if (rows := softmax.expected_candidate_rows(config, counts)) is not None else {}),
      "scan_unroll": getattr(model, "unroll", None), "xla_flags": os.environ.get("XLA_FLAGS", ""),
      # the mean NLL of each warm-up step, from the run's initial state: variants of the same arithmetic
      # (unroll, command buffers) must agree here to rounding
      "warmup_nll": [np.round(np.asarray(v, np.float64), 6).tolist() for v in jax.device_get(warm_nll)],
      "device_kind": jax.devices()[0].device_kind,
      **memory, "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
      "jax": jax.__version__, "devices": [str(d) for d in jax.devices()],
  }))


if __name__ == "__main__":
  run_main(main)
