"""Fit batch-time models to measured ``(batch tokens, seconds)`` samples.

* :func:`fit_linear`: ``t = c + per_token * b`` by least squares;
* :func:`fit_staircase`: ``t = c + a * ceil(b / b0)`` by least squares in
  ``(c, a)`` for a given ``b0``, or, without one, for every whole ``b0`` from 1
  to the largest batch measured, keeping the one with the smallest squared
  error (the smallest such ``b0`` when several fit equally well: measure
  batches of many sizes, not only multiples of one step, or give ``b0``).

Both report ``R^2 = 1 - SSE / SST``.  A negative intercept is not a batch
time: the fit then forces ``c = 0`` (least squares through the origin).
``llmqueue fit FILE`` runs both on a CSV with the header ``tokens,seconds``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Generic, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np

from llmqueue.common import files, validation
from llmqueue.models.latency import Linear, Staircase

Model = Union[Staircase, Linear]
M = TypeVar("M", Staircase, Linear)

#: Measured samples: a list or a one-dimensional array.
Samples = Union[Sequence[float], np.ndarray]


@dataclass(frozen=True)
class Fit(Generic[M]):
    """A fitted model, its coefficient of determination and sample count."""

    model: M
    r2: float
    sse: float
    samples: int

    def as_dict(self) -> Dict[str, object]:
        """The constants and goodness of fit, for ``--json``."""
        constants = {k: getattr(self.model, k) for k in self.model.__dataclass_fields__}
        return {"model": type(self.model).__name__.lower(), **constants,
                "r2": self.r2, "sse": self.sse, "samples": self.samples}


def _arrays(tokens: Samples, seconds: Samples) -> Tuple[np.ndarray, np.ndarray]:
    x = np.asarray(tokens, dtype=float)
    y = np.asarray(seconds, dtype=float)
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"tokens and seconds must be two lists of the same length; "
                         f"got {x.size} and {y.size} values")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))) or np.any(x < 1) \
            or np.any(x > validation.MAX_TOKENS):
        raise ValueError(f"tokens must be numbers from 1 to {validation.MAX_TOKENS} and "
                         f"seconds finite numbers")
    if np.unique(x).size < 2:
        raise ValueError(f"tokens must take at least two different values to fit a slope; "
                         f"got {np.unique(x).tolist()}")
    return x, y


def _line(x: np.ndarray, y: np.ndarray) -> Tuple[float, float, float]:
    """Least squares ``y = c + slope * x`` with ``c >= 0``: (c, slope, SSE)."""
    xm, ym = x.mean(), y.mean()
    sxx = float(((x - xm) ** 2).sum())
    slope = float(((x - xm) * (y - ym)).sum() / sxx)
    c = float(ym - slope * xm)
    if c < 0:
        c, slope = 0.0, float((x * y).sum() / (x * x).sum())
    return c, slope, float(((y - c - slope * x) ** 2).sum())


def _r2(y: np.ndarray, sse: float) -> float:
    sst = float(((y - y.mean()) ** 2).sum())
    return 1.0 - sse / sst if sst > 0 else (1.0 if sse == 0 else 0.0)


def fit_linear(tokens: Samples, seconds: Samples) -> Fit[Linear]:
    """Fit ``t = c + per_token * b``."""
    x, y = _arrays(tokens, seconds)
    c, slope, sse = _line(x, y)
    if slope <= 0:
        raise ValueError(f"the samples do not grow with batch tokens (fitted slope "
                         f"{slope:.3g} s/token); allowed: times that rise with the batch")
    return Fit(Linear(c, slope), _r2(y, sse), sse, int(x.size))


#: Largest step width searched when ``b0`` is not given (pass ``b0`` beyond it).
B0_SEARCH = 4096


def fit_staircase(tokens: Samples, seconds: Samples,
                  b0: Optional[int] = None) -> Fit[Staircase]:
    """Fit ``t = c + a * ceil(b / b0)``, searching ``b0`` when it is not given.

    Samples that do not rise with the batch (a line through them has a slope
    <= 0) are refused, as by :func:`fit_linear`, whatever step would fit.  The
    search works on the sums of the samples at each distinct batch size, so it
    costs O(distinct sizes) per ``b0``, not O(samples); the fit it keeps is
    then recomputed on the samples themselves.
    """
    x, y = _arrays(tokens, seconds)
    if b0 is not None:
        candidates = [validation.positive_int("b0", b0)]
    else:
        candidates = list(range(1, min(int(x.max()), B0_SEARCH + 1)))
    if _line(x, y)[1] <= 0:
        raise ValueError(f"the samples do not grow with batch tokens (fitted slope "
                         f"{_line(x, y)[1]:.3g} s/token); allowed: times that rise with the "
                         "batch")
    sizes, where = np.unique(x, return_inverse=True)
    ym = float(y.mean())
    dev = y - ym  # sums of deviations keep the squared errors free of cancellation
    count = np.bincount(where).astype(float)
    sum_dev = np.bincount(where, weights=dev)
    sum_y = np.bincount(where, weights=y)
    sst = float((dev * dev).sum())
    tie = 1e-12 * sst  # rounding noise in the SSE
    best: Optional[Tuple[float, int]] = None
    for step in candidates:
        steps = np.ceil(sizes / step)
        if steps[0] == steps[-1]:
            continue  # one step: the rise a is not determined
        sse = _grouped_sse(steps, count, sum_dev, sum_y, ym, sst)
        if best is None or sse < best[0] - tie:
            best = (sse, step)
    if best is None:
        raise ValueError(f"b0={b0} puts every sample on one step of the staircase; "
                         f"allowed: b0 < {int(x.max())} (the largest batch measured)")
    step = best[1]
    c, a, sse = _line(np.ceil(x / step), y)
    if a <= 0:
        raise ValueError(f"the samples do not grow with batch tokens (fitted a = {a:.3g} s "
                         f"per step); allowed: times that rise with the batch")
    return Fit(Staircase(c, a, step), _r2(y, sse), sse, int(x.size))


def _grouped_sse(steps: np.ndarray, count: np.ndarray, sum_dev: np.ndarray,
                 sum_y: np.ndarray, ym: float, sst: float) -> float:
    """:func:`_line`'s SSE of ``y`` on ``steps`` from per-size sums: ``count``
    samples at each size, the sums of their deviations from the mean ``ym``
    (``sum_dev``) and of their values (``sum_y``); ``sst`` = Σ deviations²."""
    n = float(count.sum())
    sx = float((count * steps).sum())
    xm = sx / n
    centred = steps - xm
    sxx = float((count * centred * centred).sum())
    sxy = float((centred * sum_dev).sum())
    slope = sxy / sxx
    if ym - slope * xm >= 0:
        return sst - slope * sxy  # least squares: SSE = SST - slope * Sxy
    # through the origin: slope = Σ s y / Σ s², SSE = Σ y² - (Σ s y)² / Σ s²
    s2 = float((count * steps * steps).sum())
    sy = float((steps * sum_y).sum())
    return sst + n * ym * ym - sy * sy / s2


def read_samples(path: str) -> Tuple[np.ndarray, np.ndarray]:
    """``(tokens, seconds)`` arrays from a CSV with the header ``tokens,seconds``.
    A malformed row is an error naming the file and line."""
    tokens, seconds = [], []
    with files.open_text_input(path) as handle:
        reader = files.csv_rows(handle, handle.name)
        header = [h.strip() for h in next(reader, (1, []))[1]]
        if header != ["tokens", "seconds"]:
            raise ValueError(f"{handle.name}:1: header must be tokens,seconds; "
                             f"got {','.join(header)!r}")
        for line, row in reader:
            if not "".join(row).strip():
                continue  # a blank line
            try:
                if len(row) != 2:
                    raise ValueError(f"expected 2 fields, got {len(row)}")
                tokens.append(validation.positive_number("tokens", float(row[0])))
                seconds.append(validation.gap_seconds("seconds", float(row[1])))
            except ValueError as exc:
                raise ValueError(f"{handle.name}:{line}: {exc}") from None
    if not tokens:
        raise ValueError(f"{files.shown(path)}: no samples after the header")
    return np.array(tokens), np.array(seconds)
