"""Shared helpers for the tests."""

from __future__ import annotations

import os
from typing import Dict, List

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
