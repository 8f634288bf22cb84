"""Replications: the mean of a figure over seeds and its 95% confidence interval.

The interval is Student's t: ``mean +- t(0.975, n - 1) * sd / sqrt(n)``.  The
t quantiles come from a table for 1 to 30 degrees of freedom and from the
Cornish-Fisher expansion around the normal quantile beyond (error below
1e-7 there), so scipy is not needed.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

#: The confidence level of every interval.
LEVEL = 0.95

#: t(0.975, df) for df = 1 .. 30.
_T975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624,
         2.306004, 2.262157, 2.228139, 2.200985, 2.178813, 2.160369, 2.144787,
         2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963, 2.079614,
         2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407,
         2.045230, 2.042272)
_Z975 = 1.959963984540054


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` >= 1 degrees of freedom."""
    if df < 1:
        raise ValueError(f"df must be an integer >= 1, got {df!r}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def mean_se(values: Iterable[Optional[float]]) -> Tuple[Optional[float], Optional[float], int]:
    """Mean, standard error of the mean and count of the defined values
    (``None`` and NaN are left out); the error is ``None`` below two values."""
    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    n = len(xs)
    if not n:
        return None, None, 0
    mean = math.fsum(xs) / n
    if n < 2:
        return mean, None, n
    var = math.fsum((x - mean) ** 2 for x in xs) / (n - 1)
    return mean, math.sqrt(var / n), n


def mean_ci(values: Iterable[Optional[float]]) -> Tuple[Optional[float], Optional[float], int]:
    """Mean, half-width of its 95% confidence interval and count of the defined
    values; the half-width is ``None`` below two values."""
    mean, se, n = mean_se(values)
    return mean, (None if se is None else t975(n - 1) * se), n


def aggregate(rows: Sequence[Dict[str, object]], keys: Sequence[str],
              figures: Sequence[str]) -> List[Dict[str, object]]:
    """One row per distinct value of ``keys`` (in order of first appearance):
    the keys, ``n`` (rows in the group) and, for each figure, ``FIG_mean`` and
    ``FIG_ci95`` (half-width of the 95% interval).  When ``backlog_slope`` is a
    figure, ``backlog_slope_mean_se`` is the standard error of its mean across
    the group's runs (with a single run: that run's own ``backlog_slope_se``)."""
    groups: Dict[Tuple[object, ...], List[Dict[str, object]]] = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in keys), []).append(row)
    out = []
    for key, members in groups.items():
        point: Dict[str, object] = dict(zip(keys, key))
        point["n"] = len(members)
        for fig in figures:
            mean, half, _ = mean_ci(_number(m.get(fig)) for m in members)
            point[f"{fig}_mean"] = mean
            point[f"{fig}_ci95"] = half
        if "backlog_slope" in figures:
            _, se, n = mean_se(_number(m.get("backlog_slope")) for m in members)
            if n == 1:
                se = _number(next(m.get("backlog_slope_se") for m in members
                                  if _number(m.get("backlog_slope")) is not None))
            point["backlog_slope_mean_se"] = se
        out.append(point)
    return out


def _number(value: Any) -> Optional[float]:
    """A figure as a float, or ``None`` where it is undefined or not a number."""
    if value is None or isinstance(value, bool) or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
