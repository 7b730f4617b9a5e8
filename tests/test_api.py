"""The README's Python example (the public API of `wt_jax`) runs as printed."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


def _readme_example() -> str:
  text = (REPO / "README.md").read_text()
  m = re.search(r"<!-- api-example -->\s*```python\n(.*?)```", text, re.S)
  assert m, "README.md lost its <!-- api-example --> block"
  return m.group(1)


def test_public_names_resolve():
  import wt_jax
  for name in wt_jax.__all__:
    assert callable(getattr(wt_jax, name)), name
  with pytest.raises(AttributeError):
    wt_jax.no_such_name  # noqa: B018


@pytest.mark.slow
def test_readme_example_trains_a_tied_lm(tmp_path):
  """Runs the block on real PTB (WT_JAX_DATA) when it is there, else on the tests' tiny corpus."""
  from tests.conftest import write_corpus
  data, vocab, code = os.environ.get("WT_JAX_DATA", ""), 10_000, _readme_example()
  if not (data and (Path(data) / "ptb").is_dir()):
    write_corpus(tmp_path / "ptb")
    data, vocab = str(tmp_path), 31
    code = code.replace("config = small_tied.get_config()", "config = small_tied.get_config(); "
                        "config.vocab_size, config.batch_size, config.bptt = 31, 4, 5")
  env = dict(os.environ, WT_JAX_DATA=data, JAX_PLATFORMS="cpu")
  r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                     timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  ppl = float(re.search(r"train ppl of the last window: ([\d.]+)", r.stdout).group(1))
  # The model starts near the uniform distribution (the first window: 10,049 on PTB, 31.1 on the tiny corpus); after
  # 20 steps the last window measured 1,261 on PTB and 28.7 on the tiny corpus. The bounds leave about ±10% (±5% on
  # the tiny corpus, to stay below its start) for another CPU's or jax version's rounding and dropout draws.
  low, high = {10_000: (1_100, 1_400), 31: (27, 30)}[vocab]
  assert low < ppl < high, ppl
  assert "one shared embedding leaf: ['embedding', 'out_bias']" in r.stdout
