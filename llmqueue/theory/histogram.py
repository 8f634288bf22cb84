"""A log-binned histogram of inter-token gaps, for TBT quantiles over tokens
(docs/model.md §7.5; Sarathi-Serve reports the P99 of every gap between two consecutive
decode tokens).

Bin ``k`` holds the gaps in ``[r**k, r**(k + 1))`` seconds with ``r = 1.01``
(1 % bins; ``k`` may be negative, so every positive gap has a bin and no range
is fixed in advance); gaps of exactly 0 have a bin of their own.  Memory is one
counter per bin in use (a few hundred for gaps from 1 ms to 1 s), whatever the
number of gaps.  :meth:`GapHistogram.quantile` returns the geometric middle of
the bin holding the order statistic (clamped to the smallest and largest gap
seen), within ``sqrt(1.01) - 1 = 0.5 %`` of the exact order statistic.
"""

from __future__ import annotations

import math
from typing import Dict, Iterable, Optional

import numpy as np

from llmqueue.common import validation

#: Ratio of a bin's upper edge to its lower edge.
RATIO = 1.01
_LOG = math.log(RATIO)


class GapHistogram:
    """Counts of inter-token gaps (seconds) in 1 % log bins."""

    def __init__(self) -> None:
        self.counts: Dict[int, int] = {}
        """Gaps per bin index ``k`` (bin ``[1.01**k, 1.01**(k+1))`` s)."""
        self.zeros = 0
        """Gaps of exactly 0 s."""
        self.count = 0
        """Gaps added."""
        self.min: Optional[float] = None
        """Smallest gap added (s)."""
        self.max: Optional[float] = None
        """Largest gap added (s)."""

    def __repr__(self) -> str:
        return f"GapHistogram({self.count} gaps, {len(self.counts)} bins)"

    @staticmethod
    def _bin(gap: float) -> int:
        k = math.floor(math.log(gap) / _LOG)
        # guard the float rounding of log at a bin edge
        if RATIO ** k > gap:
            k -= 1
        elif RATIO ** (k + 1) <= gap:
            k += 1
        return k

    def _extend(self, lo: float, hi: float, n: int) -> None:
        self.count += n
        self.min = lo if self.min is None else min(self.min, lo)
        self.max = hi if self.max is None else max(self.max, hi)

    def add(self, gap: float, count: int = 1) -> None:
        """Count ``count`` gaps of ``gap`` seconds (a finite number >= 0)."""
        gap = validation.nonnegative_number("gap", gap)
        validation.positive_int("count", count)
        if gap == 0:
            self.zeros += count
        else:
            k = self._bin(gap)
            self.counts[k] = self.counts.get(k, 0) + count
        self._extend(gap, gap, count)

    def add_many(self, gaps: Iterable[float], counts: Optional[Iterable[int]] = None) -> None:
        """Count every gap of ``gaps`` (seconds, finite numbers >= 0), each
        ``counts[i]`` times when given (integers >= 1)."""
        x = np.asarray(list(gaps) if not isinstance(gaps, np.ndarray) else gaps, dtype=float)
        if x.size == 0:
            return
        if x.ndim != 1 or not np.all(np.isfinite(x)) or np.any(x < 0):
            raise ValueError("gaps must be a list of finite numbers of seconds >= 0")
        if counts is None:
            n = np.ones(x.size, dtype=np.int64)
        else:
            n = np.asarray(list(counts) if not isinstance(counts, np.ndarray) else counts)
            if n.shape != x.shape or not np.issubdtype(n.dtype, np.integer) or np.any(n < 1):
                raise ValueError("counts must be one integer >= 1 per gap")
        positive = x > 0
        self.zeros += int(n[~positive].sum())
        if positive.any():
            g = x[positive]
            k = np.floor(np.log(g) / _LOG).astype(np.int64)
            k -= (RATIO ** k.astype(float) > g)
            k += (RATIO ** (k + 1).astype(float) <= g)
            keys, where = np.unique(k, return_inverse=True)
            sums = np.bincount(where.ravel(), weights=n[positive]).astype(np.int64)
            for key, total in zip(keys.tolist(), sums.tolist()):
                self.counts[key] = self.counts.get(key, 0) + total
        self._extend(float(x.min()), float(x.max()), int(n.sum()))

    def quantile(self, q: float) -> float:
        """The ``q``-quantile of the gaps (seconds), ``q`` in [0, 1]: the bin of
        the order statistic ``ceil(q n)`` (the smallest gap for ``q = 0``),
        reported at the bin's geometric middle clamped to the range seen."""
        validation.fraction("q", q)
        if self.count == 0:
            raise ValueError("q: the histogram holds no gaps, so it has no quantile")
        assert self.min is not None and self.max is not None
        rank = max(1, math.ceil(round(q * self.count, 9)))
        if rank <= self.zeros:
            return 0.0
        seen = self.zeros
        for k in sorted(self.counts):
            seen += self.counts[k]
            if seen >= rank:
                return min(max(RATIO ** (k + 0.5), self.min), self.max)
        return self.max  # not reached: the counts sum to count
