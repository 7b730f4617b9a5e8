"""Shared test fixtures: tiny configs and corpora, and the location of the real shared data.

Importing this module also gives the test session one fresh persistent XLA compilation cache (a temporary
folder, removed when the process that made it exits). Many tests compile the same program more than once — a run
and its resumption, the tiny model of one test file and of another, an entry point in a subprocess — and on this
CPU compilation is most of a tiny test's time. The cache returns the executable XLA built for the same program,
so results are unchanged. The first process of a test run (pytest, or pytest-xdist's controller) makes the folder
and names it in WT_JAX_TEST_XLA_CACHE; its xdist workers and every child process inherit it. A size limit turns
on the cache's file lock (`jax._src.lru_cache`), so that processes never read an entry another is still writing.

The suite runs on JAX's CPU backend unless JAX_PLATFORMS names others (the GPU window's numerics check sets
`cuda,cpu`): where libtpu is installed (for the TPU compile tests, which need only its compiler) but no TPU is
attached, JAX otherwise spends about 11 s of every process's start looking for one (measured here: 11.5 s against
0.95 s to start the CPU backend alone).

On the CPU the test run also sets JAX's `jax_disable_most_optimizations`: XLA runs its HLO passes as always but
generates machine code at LLVM's -O0, which more than halves the compile time of a tiny model here (a members
test: 14.9–16.8 s of compilation → 5.9–6.8 s; BUILD_NOTES §30). Results can differ from an optimised build's in
the last bits of an elementwise loop, as they do between two CPUs; every comparison in the suite compares two
programs built alike, or allows a tolerance derived from the arithmetic. A test whose time goes into running
rather than compiling asks for the usual optimisations (the `optimized_xla` fixture).
"""
import atexit
import contextlib
import functools
import http.server
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import jax
import numpy as np
import pytest

from wt_jax.data import paths

REPO = Path(__file__).resolve().parents[1]


def _session_text_cache() -> None:
  """A fresh folder for the id caches of text corpora (`wt_jax.data.text_corpus`), not the user's ~/.cache."""
  if "WT_JAX_TEST_TEXT_CACHE" not in os.environ:
    folder = os.environ["WT_JAX_TEST_TEXT_CACHE"] = tempfile.mkdtemp(prefix="wt_jax_test_text_cache_")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
  os.environ["WT_JAX_CACHE"] = os.environ["WT_JAX_TEST_TEXT_CACHE"]


def _session_compilation_cache() -> None:
  folder = os.environ.get("WT_JAX_TEST_XLA_CACHE")
  if folder is None:
    folder = os.environ["WT_JAX_TEST_XLA_CACHE"] = tempfile.mkdtemp(prefix="wt_jax_test_xla_cache_")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
  settings = {"jax_platforms": os.environ.get("JAX_PLATFORMS") or "cpu",
              "jax_compilation_cache_dir": folder, "jax_persistent_cache_min_compile_time_secs": 0.1,
              "jax_compilation_cache_max_size": 8 << 30}
  if settings["jax_platforms"] == "cpu":
    settings["jax_disable_most_optimizations"] = True
  for name, value in settings.items():
    os.environ[name.upper()] = str(value)  # (child processes)
    jax.config.update(name, value)


_session_compilation_cache()
_session_text_cache()


@pytest.fixture
def optimized_xla(monkeypatch):
  """XLA's usual optimisations, in this process and the processes it starts, for a test whose time goes into
  running many steps rather than compiling (the golden curve: 300 steps of the small model take twice as long
  at -O0), or whose numbers are committed from an optimised build."""
  monkeypatch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "False")
  was = jax.config.read("jax_disable_most_optimizations")
  jax.config.update("jax_disable_most_optimizations", False)
  yield
  jax.config.update("jax_disable_most_optimizations", was)


@pytest.fixture(scope="session")
def shared_data_root() -> Path:
  """The real corpora: $WT_JAX_DATA if set, else ../shared/data beside the project (as in CI)."""
  root = paths.data_root(None) if os.environ.get(paths.ENV_VAR) else REPO.parent / "shared" / "data"
  if not (root / "ptb").is_dir():
    msg = f"shared data not found at {root} (set {paths.ENV_VAR})"
    if os.environ.get("CI"):
      pytest.fail(msg)
    pytest.skip(msg)
  return root


def write_corpus(folder: Path, n_train: int = 3000, n_valid: int = 600, n_test: int = 600, seed: int = 0,
                 vocab: int = 30, gz: bool = False) -> Path:
  """A tiny PTB-format corpus with learnable structure: each sentence counts up from a random start word
  (w_k, w_k+1, ..., mod vocab) for a random length 3–8, so a recurrent model can do far better than unigram."""
  import gzip
  rng = np.random.default_rng(seed)
  folder.mkdir(parents=True, exist_ok=True)
  for split, n in (("train", n_train), ("valid", n_valid), ("test", n_test)):
    lines, count = [], 0
    while count < n:
      start, length = rng.integers(vocab), rng.integers(3, 9)
      words = [f"w{(start + i) % vocab}" for i in range(length)]
      lines.append(" " + " ".join(words) + " \n")
      count += length + 1
    text = "".join(lines)
    if gz:
      with gzip.open(folder / f"ptb.{split}.txt.gz", "wt") as f:
        f.write(text)
    else:
      (folder / f"ptb.{split}.txt").write_text(text)
  return folder


WORDS = ["cat", "dog", "house", "tree", "red", "small", "runs", "sees", "the", "a", "blue", "big"]
GERMAN = ["katze", "hund", "haus", "baum", "rot", "klein", "rennt", "sieht", "der", "ein", "blau", "gross"]


def write_parallel(folder: Path, n_train: int = 400, n_eval: int = 40, seed: int = 0, gz: bool = True) -> Path:
  """A Multi30k-format EN/DE corpus (`<split>.<lang>[.gz]`) of a word-for-word 'translation' (a toy task)."""
  import gzip
  rng = np.random.default_rng(seed)
  folder.mkdir(parents=True, exist_ok=True)
  for split, n in (("train", n_train), ("val", n_eval), ("test_2016_flickr", n_eval)):
    idx = [rng.integers(len(WORDS), size=rng.integers(2, 6)) for _ in range(n)]
    for lang, vocab in (("en", WORDS), ("de", GERMAN)):
      text = "".join(" ".join(vocab[i] for i in s).capitalize() + ".\n" for s in idx)
      if gz:
        with gzip.open(folder / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
          f.write(text)
      else:
        (folder / f"{split}.{lang}").write_text(text)
  return folder


@contextlib.contextmanager
def serve_folder(folder: Path):
  """A local HTTP server for the files of `folder` (loopback only); yields its base URL."""
  handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  try:
    yield f"http://127.0.0.1:{server.server_address[1]}"
  finally:
    server.shutdown()
    server.server_close()


def unused_port() -> int:
  """A loopback port nothing listens on: a download from it fails at once, as with no network."""
  s = socket.socket()
  s.bind(("127.0.0.1", 0))
  port = s.getsockname()[1]
  s.close()
  return port


ENTRY_TINY = dict(vocab_size=31, hidden_size=8, batch_size=4, bptt=5, test_window=64, plot=False)


def entry_args(**overrides) -> list[str]:
  """Flags of `python -m experiments.ptb` for a few-second run on `tiny_corpus` (small_tied.py at hidden 8,
  batch 4, window 5), then `--config.<key>=<value>` for each of `overrides`, in their order."""
  return ["--config=configs/small_tied.py", *(f"--config.{k}={str(v).lower() if isinstance(v, bool) else v}"
                                              for k, v in {**ENTRY_TINY, **overrides}.items())]


def entry_config(**overrides):
  """The config that `entry_args(**overrides)` gives the entry point, built in this process (a group's key
  dotted: entry_config(**{"softmax.kind": "class"}))."""
  from configs import small_tied
  c = small_tied.get_config()
  c.update_from_flattened_dict({**ENTRY_TINY, **overrides})
  return c


# Every resume test (after a stop, a signal, kill -9, a damaged checkpoint, a full disk, on a bucket) ends its run
# as entry_config(**RESUMED) on `tiny_corpus`, and compares its numbers with one uninterrupted run of that config,
# trained once (`uninterrupted`). Dropout (masks drawn from each step's key), a learning rate halved after epoch 1
# and an end inside epoch 3 make each part of what a resume restores (parameters, step, data position, the epoch's
# sums, the schedule, the history and best) show in the numbers. num_epochs is long and max_steps, which a resume
# may change, ends the run: a process signalled or killed in its first steps is still training when that comes.
RESUMED = dict(num_epochs=40, max_steps=400, learning_rate=2.0, decay_after_epoch=1, dropout=0.2)
STEPS_PER_EPOCH = 149  # tiny_corpus's 3,000-odd training tokens in windows of 4 × 5


def resumed_config(**overrides):
  """entry_config(**RESUMED), with `overrides` in place of its values."""
  return entry_config(**{**RESUMED, **overrides})


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory):
  """(`write_corpus`'s corpus, loaded; the data root it is under, for the entry point's WT_JAX_DATA)."""
  from wt_jax.data import ptb
  root = tmp_path_factory.mktemp("data")
  write_corpus(root / "ptb")
  return ptb.load(str(root), download=False), root


@pytest.fixture(scope="session")
def uninterrupted(tiny_corpus, tmp_path_factory) -> dict:
  """results.json of entry_config(**RESUMED) trained on `tiny_corpus` without a stop: what every resumed run ends
  with."""
  from wt_jax.train import lm
  results = lm.fit(resumed_config(), tiny_corpus[0], tmp_path_factory.mktemp("uninterrupted"))
  assert results["steps"] == RESUMED["max_steps"] and results["steps_per_epoch"] == STEPS_PER_EPOCH
  return results


def assert_same_numbers(resumed: dict, whole: dict) -> None:
  """A resumed run's results are the uninterrupted run's, up to the order of float32 sums (an epoch's running
  sums restart from the checkpoint's at a resume)."""
  for key in ("steps", "train_ppl", "valid_ppl", "test_ppl", "test_ppl_batched", "best_valid_ppl"):
    assert resumed[key] == pytest.approx(whole[key], rel=1e-5), key
  assert [h["valid_ppl"] for h in resumed["history"]] == pytest.approx([h["valid_ppl"] for h in whole["history"]],
                                                                      rel=1e-5)


def run_entry(args, data_root):
  """`python -m experiments.ptb *args` on the CPU with WT_JAX_DATA=`data_root` → the finished process."""
  env = dict(os.environ, WT_JAX_DATA=str(data_root), JAX_PLATFORMS="cpu")
  return subprocess.run([sys.executable, "-m", "experiments.ptb", *args], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=300)


def start_entry(args, data_root, stderr=subprocess.DEVNULL) -> subprocess.Popen:
  """`python -m experiments.ptb *args` as `run_entry` runs it, started and not waited for (to be signalled)."""
  env = dict(os.environ, WT_JAX_DATA=str(data_root), JAX_PLATFORMS="cpu")
  return subprocess.Popen([sys.executable, "-m", "experiments.ptb", *args], cwd=REPO, env=env,
                          stdout=subprocess.DEVNULL, stderr=stderr, text=True)


@contextlib.contextmanager
def sigint_in_step(task_class, step: int):
  """Within the block, every `task_class` task sends SIGINT to this process as it hands the trainer the batch of
  training step `step` (counted from 1 in this block): the trainer gets the signal at a known step, takes that
  step and saves. SIGINT that reaches no trainer (one outside its training loop) is only recorded in the yielded
  list, so that a signal the trainer did not defer fails the test instead of stopping the test process."""
  import signal
  batches, taken, not_deferred = task_class.batches, [], []

  def signalling_batches(self, epoch, start):
    for item in batches(self, epoch, start):
      taken.append(None)
      if len(taken) == step:
        os.kill(os.getpid(), signal.SIGINT)  # (Python runs the handler before the batch is yielded)
      yield item

  before = signal.signal(signal.SIGINT, lambda signum, frame: not_deferred.append(signum))
  task_class.batches = signalling_batches
  try:
    yield not_deferred
  finally:
    task_class.batches = batches
    signal.signal(signal.SIGINT, before)


def tiny_config(**overrides):
  """small.py shrunk to a few-second model (vocabulary set from the corpus by the caller). Overrides by
key, a group's keys as a dict: tiny_config(max_steps=3, words=dict(mode="tied"))."""
  from configs import small
  c = small.get_config()
  c.vocab_size = 31
  c.hidden_size = 16
  c.batch_size = 4
  c.bptt = 5
  c.eval_batch_size = 4
  c.test_window = 50
  c.num_epochs = 2
  c.decay_after_epoch = 1
  c.log_every = 1000
  c.checkpoint_every_steps = 0
  c.plot = False
  c.update_from_flattened_dict({k: v for k, v in overrides.items() if not isinstance(v, dict)})
  for group, values in overrides.items():  # words=dict(mode="tied"), al=dict(alpha=1.0): within the group
    if isinstance(values, dict):
      c[group].update(values)
  return c


def init_lm_params(model, rng, batch_size: int = 2, bptt: int = 3):
  """The 'params' of a language-model module built directly (not from a config): `model.init` on a
  [batch_size, bptt] window. (From a config: `wt_jax.models.init_params(model, config, rng)`.)"""
  import jax.numpy as jnp
  x = jnp.zeros((batch_size, bptt), jnp.int32)
  return model.init(rng, x, model.initial_carry(batch_size), train=False)["params"]


def sgd_steps(model, params, ids_KxBxT1, lr: float):
  """K plain SGD steps of a language-model module with dropout on (key 10 + k at step k), the recurrent
  state carried: ids[k, :, :T] → ids[k, :, 1:]. Returns (the K mean NLLs, the final parameters)."""
  import jax
  import jax.numpy as jnp
  import optax
  B, T = ids_KxBxT1.shape[1], ids_KxBxT1.shape[2] - 1

  def cost(p, x, y, carry, key):
    logits, carry = model.apply({"params": p}, x, carry, train=True, rngs={"dropout": key})
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), y[..., None], -1)
    return nll.mean(), carry

  grad = jax.jit(jax.value_and_grad(cost, has_aux=True))
  tx = optax.sgd(lr)
  state, carry, losses = tx.init(params), model.initial_carry(B), []
  for k in range(ids_KxBxT1.shape[0]):
    (loss, carry), g = grad(params, ids_KxBxT1[k, :, :T], ids_KxBxT1[k, :, 1:], carry, jax.random.key(10 + k))
    updates, state = tx.update(g, state)
    params = optax.apply_updates(params, updates)
    losses.append(float(loss))
  return losses, params
