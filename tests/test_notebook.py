"""The update-rules notebook runs end to end (tiny settings), so it cannot rot."""
import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow  # a Jupyter kernel training on PTB; tests/test_update_rules.py checks its functions

NOTEBOOK = REPO / "experiments" / "notebooks" / "update_rules.ipynb"


def test_update_rules_notebook_executes(shared_data_root, monkeypatch, optimized_xla):
  nbformat = pytest.importorskip("nbformat")
  nbclient = pytest.importorskip("nbclient")
  nb = nbformat.read(NOTEBOOK, as_version=4)
  monkeypatch.setenv("WT_JAX_NOTEBOOK_TINY", "1")  # the kernel inherits the environment
  monkeypatch.setenv("WT_JAX_DATA", str(shared_data_root))
  nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                          resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
  assert not [o for o in outputs if o.output_type == "error"]
  text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
  assert "TINY=True" in text and "steps of each model" in text
  assert "with a sampled softmax" in text
  assert "--- untied: 'the company said" in text and "--- tied: 'the company said" in text  # section 4's samples
  assert sum("image/png" in o.get("data", {}) for o in outputs) == 4  # the four figures were drawn
