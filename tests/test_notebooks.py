"""The teaching notebooks in ``notebooks/``: each one runs top to bottom in a
fresh python3 kernel without an error (in a cell, or in a widget callback such
as the blow-up notebook's slider), on the same interpreter and the same
llmqueue as these tests; and every notebook is stored with its outputs cleared."""

from __future__ import annotations

import glob
import json
import os
import sys
from typing import Any, Dict, List

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(ROOT, "notebooks")
PATHS = sorted(glob.glob(os.path.join(NOTEBOOKS, "*.ipynb")))
CELL_TIMEOUT = 120  # seconds per cell
#: Appended to a copy of each notebook before it runs: which python and llmqueue it used.
PROBE = "import sys, llmqueue; print(sys.executable); print(llmqueue.__file__)"


def test_the_teaching_notebooks_are_here() -> None:
    names = {os.path.basename(p) for p in PATHS}
    assert {"queue_blowup.ipynb", "chunked_prefill.ipynb", "memory_storms.ipynb",
            "writing_a_policy.ipynb"} <= names


@pytest.mark.parametrize("path", PATHS, ids=os.path.basename)
def test_outputs_are_cleared(path: str) -> None:
    """No outputs and no execution counts in the stored file (clear them before
    committing: Jupyter's Edit > Clear All Outputs)."""
    with open(path, encoding="utf-8") as handle:
        notebook = json.load(handle)
    assert notebook["nbformat"] == 4
    dirty = [i for i, cell in enumerate(notebook["cells"]) if cell["cell_type"] == "code"
             and (cell["outputs"] or cell["execution_count"] is not None)]
    assert not dirty, f"{os.path.basename(path)}: cells {dirty} hold outputs; clear them"
    assert "widgets" not in notebook["metadata"], "widget state is an output too; clear it"


def _errors(outputs: List[Dict[str, Any]]) -> List[str]:
    return [f"{o.get('ename')}: {o.get('evalue')}" for o in outputs
            if o.get("output_type") == "error"]


@pytest.mark.parametrize("path", PATHS, ids=os.path.basename)
def test_notebook_runs(path: str) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(PROBE))
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}  # figures inline
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    client = nbclient.NotebookClient(notebook, timeout=CELL_TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": NOTEBOOKS}})
    client.execute(env=env)  # raises CellExecutionError on the first failing cell

    cells = [c for c in notebook.cells if c.cell_type == "code"]
    failed = {i: _errors(c.outputs) for i, c in enumerate(cells) if _errors(c.outputs)}
    assert not failed, failed
    # an interact callback's traceback lands in its Output widget, not in the cell
    state = notebook.metadata.get("widgets", {}).get(
        "application/vnd.jupyter.widget-state+json", {}).get("state", {})
    widget_errors = [e for model in state.values()
                     for e in _errors(model.get("state", {}).get("outputs", []))]
    assert not widget_errors, widget_errors
    executable, package = cells[-1].outputs[0]["text"].split()
    assert os.path.realpath(executable) == os.path.realpath(sys.executable)
    assert os.path.realpath(package) == os.path.realpath(
        os.path.join(ROOT, "llmqueue", "__init__.py"))
