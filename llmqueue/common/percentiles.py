"""The percentiles every latency distribution is summarised by (docs/model.md §5)."""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import numpy as np

#: The percentiles every distribution is summarised by (docs/model.md §5).
QUANTILES = (50, 90, 99)


def percentiles(values: Sequence[float]) -> Tuple[Optional[float], ...]:
    """p50, p90 and p99 of ``values`` (``None`` each when there are none)."""
    if not len(values):
        return (None,) * len(QUANTILES)
    return tuple(float(x) for x in np.percentile(np.asarray(values, dtype=float), QUANTILES))


def named_percentiles(name: str, values: Sequence[float]) -> Dict[str, Optional[float]]:
    """``{name}_p50``, ``{name}_p90`` and ``{name}_p99`` of ``values``."""
    return dict(zip((f"{name}_p{q}" for q in QUANTILES), percentiles(values)))
