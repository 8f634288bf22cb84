"""The layers of docs/architecture.md hold: every import inside the package
points down the list, no module is over 400 lines, and `import llmqueue`
loads neither matplotlib nor the experiments."""

import ast
import os
import subprocess
import sys

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "llmqueue")
#: docs/architecture.md's table, top to bottom.
LAYERS = ["common", "models", "policies", "theory", "hardware", "engine", "network", "sweeps",
          "planning", "plotting", "experiments", "cli"]


def modules():
    for root, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                yield os.path.join(root, name)


def layer_of(path):
    parts = os.path.relpath(path, PACKAGE).split(os.sep)
    return parts[0] if len(parts) > 1 else None  # top-level modules are the public face


def imported_layers(path):
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] == "llmqueue":
                if len(parts) > 1:
                    yield node.module, parts[1]
                else:  # from llmqueue import sweeps, theory
                    for alias in node.names:
                        yield f"llmqueue.{alias.name}", alias.name
        elif isinstance(node, ast.ImportFrom) and node.level:
            yield "a relative import", "relative"


@pytest.mark.parametrize("path", sorted(modules()), ids=lambda p: os.path.relpath(p, PACKAGE))
def test_imports_point_down_the_layers(path):
    own = layer_of(path)
    for module, layer in imported_layers(path):
        assert layer != "relative", f"{path}: use absolute imports"
        if own is None or layer not in LAYERS:
            continue
        assert LAYERS.index(layer) <= LAYERS.index(own), \
            f"{os.path.relpath(path, PACKAGE)} ({own}) imports {module} ({layer}), a layer below"


@pytest.mark.parametrize("path", sorted(modules()), ids=lambda p: os.path.relpath(p, PACKAGE))
def test_no_module_is_over_400_lines(path):
    with open(path) as handle:
        assert sum(1 for _ in handle) <= 400


def test_every_subpackage_is_a_documented_layer():
    found = {name for name in os.listdir(PACKAGE)
             if os.path.isfile(os.path.join(PACKAGE, name, "__init__.py"))}
    assert found == set(LAYERS)


def test_import_llmqueue_loads_neither_matplotlib_nor_the_experiments():
    code = ("import sys, llmqueue; m = sys.modules; print('matplotlib' in m, "
            "any(k.startswith('llmqueue.experiments') for k in m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=os.path.dirname(PACKAGE)).stdout.split()
    assert out == ["False", "False"]


def test_matplotlib_is_imported_only_by_the_plotting_layer():
    for path in modules():
        text = open(path).read()
        if "import matplotlib" in text or "from matplotlib" in text:
            assert layer_of(path) == "plotting", path
