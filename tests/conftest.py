"""Shared helpers for the tests."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence

import pytest

# figures render off screen in the tests, whatever display the machine has
os.environ.setdefault("MPLBACKEND", "Agg")

TRACES = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "traces")


@pytest.fixture
def traces_dir() -> str:
    """The shared Azure traces folder; skips the test where it is absent."""
    if not os.path.isdir(TRACES):
        pytest.skip("../shared/traces is not here (a fresh clone has none)")
    return TRACES


def fig8_labels(batches: List[Dict[str, object]], names: str = "ABCDE") -> List[str]:
    """Batches written as in the paper's Fig. 8: ``ABC+DpEp``."""
    out = []
    for b in batches:
        d = "".join(names[i] for i in b["decode"])
        p = "".join(names[i] + "p" for i in b["prefill"])
        out.append(d + ("+" if d and p else "") + p)
    return out


def check_figure(panels: int, draw: Callable[[Optional[Sequence[Any]]], Any]) -> None:
    """A figure function's contract: ``draw(axes)`` draws into the ``panels``
    axes it is given and returns their figure, each panel with a title, axis
    labels with units and a legend; ``draw(None)`` makes a figure of its own."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, panels, squeeze=False)
    given = list(axes.ravel())
    assert draw(given) is fig
    for ax in given:
        assert ax.get_title() and "(" in ax.get_xlabel() and "(" in ax.get_ylabel()
        assert ax.get_legend() is not None
    plt.close(fig)
    own = draw(None)
    assert own is not fig and len(own.axes) == panels
    plt.close(own)


def cli_error(argv: List[str]) -> str:
    """Run ``llmqueue ARGV`` in a child process; assert it fails as bad input
    does (exit code 2, one line on stderr, no traceback) and return that line."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "llmqueue"] + argv, capture_output=True,
                          text=True, cwd=os.path.dirname(__file__))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]
