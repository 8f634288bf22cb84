"""Backlog drift: is the queue growing?  A slope with its standard error.

The second half of a run is cut into equal windows; the increments of the
backlog between window edges give the slope (tokens per second) and its
standard error.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from llmqueue.common.units import TICKS_PER_SECOND

#: Windows the second half of a run is cut into.
WINDOWS = 10


def window_times(horizon: int, windows: int = WINDOWS) -> List[int]:
    """Window edges (ticks) over the second half of ``[0, horizon]``."""
    half = horizon // 2
    return [half + (horizon - half) * j // windows for j in range(windows + 1)]


def edge_slope(edges: Sequence[int], values: Sequence[int]
               ) -> Tuple[Optional[float], Optional[float]]:
    """Slope (per second) and its standard error of a quantity observed at
    equally spaced ``edges`` (ticks).

    The slope is the mean increment between edges divided by their spacing,
    i.e. the change over the whole span; its error is the increments'
    standard error.  An overloaded queue is close to a random walk with drift,
    whose increments are independent, so the error is right there; for a
    stable queue the increments are negatively correlated and the error errs
    on the large side.
    """
    if len(edges) < 4:
        return None, None
    t = np.asarray(edges, dtype=float) / TICKS_PER_SECOND
    increments = np.diff(np.asarray(values, dtype=float)) / np.diff(t)
    return float(increments.mean()), float(increments.std(ddof=1) / np.sqrt(len(increments)))
