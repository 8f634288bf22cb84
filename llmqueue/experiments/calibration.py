"""Fit a roofline's efficiency to whole-run throughput measurements
(``llmqueue calibrate``).

Users have benchmark results (an offline batch's output tokens per second), not
per-iteration times.  An offline batch's schedule does not depend on how long
its iterations take: every request is present at time 0, and which tokens run
in which iteration follows from the token budget, the slots and the KV cache
alone.  So :func:`record` simulates each measured row once, keeping every
iteration's batch and context (:class:`IterationLog`), and a candidate
efficiency then prices the whole run at once
(:meth:`~llmqueue.hardware.roofline.Roofline.run_seconds`): the makespan is
the sum of the iterations' times, what a new simulation would give.

:func:`fit` adjusts the free fields of :class:`~llmqueue.hardware.efficiency.Efficiency`
by least squares on the relative error of the predicted output tokens/s,
inside physical bounds (:data:`BOUNDS`: no weight reads at 44% of the HBM
bandwidth); :func:`calibrate` also predicts every row from a fit that never saw
it (cross-validation) and :func:`profile` is the file ``--set efficiency=PATH``
reads.  Rows with a request rate (Poisson arrivals) have a schedule that does
depend on the iterations' times: they are predicted, not fitted.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from llmqueue.common import validation
from llmqueue.engine.options import RunOptions
from llmqueue.hardware.efficiency import FRACTIONS, PROFILE_KEY, Efficiency
from llmqueue.hardware.fit import levenberg_marquardt
from llmqueue.hardware.roofline import Iterations, Roofline, assumed_context
from llmqueue.hardware.run_time import RunTotals
from llmqueue.models.context import BatchContext

#: The fields a calibration fits unless told otherwise.
FREE: Tuple[str, ...] = ("mfu", "mbu", "mfu_attn", "mbu_attn", "tau_layer", "t_step")
#: Physical bounds of each field a calibration may fit: tuned GEMMs reach 30-90% of
#: dense peak, weight and KV streams 60-95% / 40-95% of HBM bandwidth; per-layer,
#: per-iteration and per-sequence overheads from none up to what an engine
#: without CUDA graphs pays (seconds).
BOUNDS: Dict[str, Tuple[float, float]] = {
    "mfu": (0.30, 0.90), "mbu": (0.60, 0.95), "mfu_attn": (0.20, 0.90),
    "mbu_attn": (0.40, 0.95), "eta_el": (0.10, 1.0), "eta_link": (0.30, 0.95),
    "tau_layer": (0.0, 100e-6), "t_step": (0.0, 5e-3), "t_req": (0.0, 50e-6),
    "alpha": (1e-6, 50e-6)}
#: How :func:`calibrate` leaves rows out: one row at a time, or every row of a model.
HOLDOUTS = ("row", "model")
#: Seconds per search unit of the time fields (the search works in ms).
_MS = 1e-3


class IterationLog:
    """A context-aware latency model that prices as ``inner`` does and keeps
    every iteration it priced: ``batch_time`` calls one each, ``batch_times``
    runs of ``k`` (the engine's skip-ahead), so the engine runs as fast and
    exactly as it would with ``inner``."""

    needs_context = True

    def __init__(self, inner: Roofline) -> None:
        self.inner = inner
        self._runs: List[Tuple[int, int, BatchContext, int]] = []

    def batch_time(self, decode: int, prefill: int, requests: int,
                   context: Optional[BatchContext] = None) -> float:
        """``inner``'s time, kept."""
        seconds = self.inner.batch_time(decode, prefill, requests, context)
        self._runs.append((decode, prefill, context if context is not None else
                           assumed_context(decode, prefill, requests), 1))
        return seconds

    def batch_times(self, decode: int, prefill: int, requests: int, context: BatchContext,
                    k: int) -> List[float]:
        """``inner``'s times of ``k`` iterations, kept."""
        seconds = self.inner.batch_times(decode, prefill, requests, context, k)
        self._runs.append((decode, prefill, context, k))
        return seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def iterations(self) -> Iterations:
        """Every iteration priced so far, in order, as arrays."""
        if not self._runs:
            return Iterations(*(np.zeros(0, dtype=np.int64) for _ in range(7)))
        runs = np.array([(d, p, k, c.chunks, c.decode_ctx, c.chunk_ctx, c.chunk_sq,
                          c.chunk_cross) for d, p, c, k in self._runs], dtype=np.int64)
        k = runs[:, 2]
        each = np.repeat(runs, k, axis=0)
        starts = np.cumsum(k) - k
        j = np.arange(int(k.sum()), dtype=np.int64) - np.repeat(starts, k)  # iteration in run
        d, p, _, chunks, dc, cc, sq, cross = each.T
        return Iterations(d, p, chunks, dc + j * d, cc + j * p, sq, cross + j * sq)


class Run(NamedTuple):
    """One measured row simulated once: its roofline, every iteration and the
    output tokens, so any efficiency prices it at once (:func:`predicted`)."""

    measurement: Any
    """The row (:class:`~llmqueue.experiments.measurements.Measurement`)."""
    roofline: Roofline
    totals: RunTotals
    """Its iterations, reduced (:meth:`Roofline.run_totals`)."""
    output_tokens: int


def record(measurement: Any, overrides: Optional[Mapping[str, str]] = None) -> Run:
    """Simulate ``measurement`` as ``validate`` does, keeping every iteration.
    A row that arrives at a rate rather than all at once is a ``ValueError``."""
    from llmqueue import experiments  # every experiment registered
    from llmqueue.experiments import offline
    from llmqueue.experiments.base import latency_of
    from llmqueue.experiments.measurements import settings

    if getattr(measurement, "rate", None) is not None:
        raise ValueError(f"line {measurement.line}: a run at a request rate cannot be "
                         "calibrated on (its schedule depends on the iteration times)")
    p = experiments.REGISTRY["offline"].resolve(settings(measurement, overrides or {}))
    model = latency_of(p)
    if not isinstance(model, Roofline):
        raise ValueError("calibrate fits the roofline latency model; got latency="
                         f"{p.get('latency')}")
    log = IterationLog(model)
    s = offline.batch(p, RunOptions(), latency=log).summary
    return Run(measurement, model, model.run_totals(log.iterations()),
               int(round(s["output_tokens_per_s"] * s["duration"])))


def predicted(run: Run, eff: Efficiency) -> float:
    """Output tokens per second of ``run`` at efficiency ``eff``."""
    return run.output_tokens / run.roofline.with_efficiency(eff).run_seconds(run.totals)


def _check_free(free: Sequence[str], base: Efficiency) -> List[str]:
    names = list(free)
    if not names:
        raise ValueError(f"free must name at least one of {', '.join(BOUNDS)}; got none")
    for name in names:
        validation.choice("free field", name, list(BOUNDS))
    if len(set(names)) != len(names):
        raise ValueError(f"free must not repeat a field; got {','.join(names)}")
    if "eta_el" in names and base.eta_el is None:
        raise ValueError("eta_el is off (None) in the base efficiency; it cannot be fitted")
    return names


def fit(runs: Sequence[Run], free: Sequence[str] = FREE,
        base: Optional[Efficiency] = None) -> Efficiency:
    """The efficiency, ``base`` with the ``free`` fields moved inside
    :data:`BOUNDS`, whose predictions of ``runs`` have the least sum of squared
    relative errors (``base`` None: the default efficiency)."""
    base = Efficiency() if base is None else base
    names = _check_free(free, base)
    if not runs:
        raise ValueError("calibrate needs at least one offline row to fit")
    frac = np.array([n in FRACTIONS for n in names])
    lo = np.array([BOUNDS[n][0] for n in names])
    hi = np.array([BOUNDS[n][1] for n in names])
    # efficiencies are searched as 1/efficiency (the roofline is piecewise linear
    # in it), times in ms
    lower = np.array([1 / h if f else lo_ / _MS for f, lo_, h in zip(frac, lo, hi)])
    upper = np.array([1 / lo_ if f else h / _MS for f, lo_, h in zip(frac, lo, hi)])
    measured = np.array([r.measurement.output_tokens_per_s for r in runs])

    def eff_of(x: np.ndarray) -> Efficiency:
        values: Dict[str, Any] = {n: float(np.clip(1 / v if f else v * _MS, a, b))
                                  for n, v, f, a, b in zip(names, x, frac, lo, hi)}
        return dataclasses.replace(base, **values)

    def residuals(x: np.ndarray) -> np.ndarray:
        e = eff_of(x)
        return np.array([predicted(r, e) for r in runs]) / measured - 1.0

    start = np.array([1 / getattr(base, n) if f else getattr(base, n) / _MS
                      for n, f in zip(names, frac)])
    x, _ = levenberg_marquardt(residuals, np.clip(start, lower, upper), lower, upper, 100)
    return eff_of(x)


def _groups(measurements: Sequence[Any], holdout: str) -> List[List[int]]:
    if holdout == "row":
        return [[i] for i in range(len(measurements))]
    keys: Dict[str, List[int]] = {}
    for i, m in enumerate(measurements):
        keys.setdefault(str(m.model).lower(), []).append(i)
    return list(keys.values())


class Calibration(NamedTuple):
    """:func:`calibrate`'s result: the fitted efficiency, the fields it freed,
    per fitted row the prediction of the fit (``fitted``) and of a fit that left
    the row out (``unseen``, None when no other row was left to fit on), and the
    file lines of rows at a request rate, which it skipped."""

    efficiency: Efficiency
    free: Tuple[str, ...]
    holdout: str
    rows: List[Dict[str, Any]]
    skipped: List[int]

    def summary(self, key: str) -> Dict[str, Any]:
        """Median and largest ``|error|`` of the rows' ``key`` prediction
        (``"fitted"`` or ``"unseen"``)."""
        from llmqueue.experiments.measurements import summary
        return summary([{"error": r[f"{key}_error"]} for r in self.rows
                        if r[f"{key}_error"] is not None])

    def at_bounds(self) -> List[str]:
        """The freed fields that ended on a bound of :data:`BOUNDS`."""
        return [n for n in self.free if any(
            abs(getattr(self.efficiency, n) - b) <= 1e-9 * max(abs(b), 1e-9)
            for b in BOUNDS[n])]


def calibrate(measurements: Sequence[Any], overrides: Optional[Mapping[str, str]] = None,
              free: Sequence[str] = FREE, holdout: str = "row",
              progress: Optional[Callable[[int, int], None]] = None) -> Calibration:
    """Fit the efficiency to every offline row of ``measurements`` (rows at a
    request rate are skipped) and predict each row with it and with a fit that
    left it out (``holdout``: one row at a time, or all the rows of its model).
    ``progress(done, total)`` is called after each simulation and each fit."""
    base = Efficiency()
    names = tuple(_check_free(free, base))
    validation.choice("holdout", holdout, HOLDOUTS)
    offline = [m for m in measurements if getattr(m, "rate", None) is None]
    skipped = [m.line for m in measurements if getattr(m, "rate", None) is not None]
    groups = _groups(offline, holdout)
    total, done = len(offline) + len(groups) + 1, 0

    def step() -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total)

    runs = []
    for m in offline:
        runs.append(record(m, overrides))
        step()
    fitted = fit(runs, names, base)
    step()
    unseen: Dict[int, Optional[float]] = {}
    for group in groups:
        step()
        rest = [r for i, r in enumerate(runs) if i not in group]
        eff = fit(rest, names, base) if rest else None
        for i in group:
            unseen[i] = predicted(runs[i], eff) if eff is not None else None
    rows = [_row(r.measurement, predicted(r, fitted), unseen[i], overrides)
            for i, r in enumerate(runs)]
    return Calibration(fitted, names, holdout, rows, skipped)


def _row(m: Any, fitted: float, unseen: Optional[float],
         overrides: Optional[Mapping[str, str]]) -> Dict[str, Any]:
    from llmqueue.experiments.measurements import settings, shown
    measured = m.output_tokens_per_s
    return {**shown(m, settings(m, overrides or {})), "line": m.line,
            "fitted": fitted, "fitted_error": (fitted - measured) / measured,
            "unseen": unseen,
            "unseen_error": None if unseen is None else (unseen - measured) / measured}


def profile(calibration: Calibration, measurements: str,
            overrides: Mapping[str, str]) -> Dict[str, Any]:
    """The profile file's object: the fitted efficiency (what
    ``--set efficiency=PATH`` reads), how it was fitted and how well."""
    return {PROFILE_KEY: calibration.efficiency.as_dict(),
            "free": list(calibration.free),
            "bounds": {n: list(BOUNDS[n]) for n in calibration.free},
            "at_bounds": calibration.at_bounds(),
            "measurements": measurements, "set": dict(overrides),
            "holdout": calibration.holdout,
            "fitted": calibration.summary("fitted"),
            "unseen": calibration.summary("unseen"),
            "skipped_lines": calibration.skipped, "rows": calibration.rows}
