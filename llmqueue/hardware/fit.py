"""Fit a roofline's efficiencies to measured iteration times (docs/model.md §7.3).

:func:`fit_roofline` adjusts the named :class:`Efficiency` fields so that the
roofline's times match measured ``(summary, seconds)`` samples, by least
squares on the relative error ``t_model / t_measured - 1``, within the bounds
``0 < efficiency <= 1`` and ``time >= 0``.  The search is a projected
Levenberg-Marquardt in ``1/efficiency`` (the roofline is piecewise linear in
it) and milliseconds, with forward-difference derivatives; numpy only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from llmqueue.common import validation
from llmqueue.hardware.efficiency import FRACTIONS, TIMES, Efficiency
from llmqueue.hardware.efficiency import efficiency as find_eff
from llmqueue.hardware.precision import Precision
from llmqueue.hardware.roofline import Roofline
from llmqueue.hardware.specs import GPU, ModelShape
from llmqueue.models.context import BatchContext

#: Largest ``1/efficiency`` searched (an efficiency of 1e-6).
_MAX_INVERSE = 1e6
#: Seconds per search unit of the time fields (the search works in ms).
_TIME_UNIT = 1e-3

Summary = Tuple  # (decode, prefill, requests) or (decode, prefill, requests, context)


@dataclass(frozen=True)
class RooflineFit:
    """:func:`fit_roofline`'s result: the fitted model and efficiency, the fitted
    ``values`` of the free fields, the mean absolute percentage error ``mape`` (a
    fraction: 0.05 is 5 %), the sample count, and the free fields the samples do
    not determine (their value stays the base's)."""

    roofline: Roofline
    efficiency: Efficiency
    values: Dict[str, float]
    mape: float
    samples: int
    undetermined: Tuple[str, ...] = ()

    def as_dict(self) -> Dict[str, object]:
        """The fitted values and goodness of fit, for ``--json``."""
        return {"values": dict(self.values), "mape": self.mape, "samples": self.samples,
                "undetermined": list(self.undetermined),
                "efficiency": self.efficiency.as_dict()}


def _samples(samples: Iterable) -> Tuple[List[Tuple[int, int, int, Optional[BatchContext]]],
                                         np.ndarray]:
    batches, seconds = [], []
    for i, sample in enumerate(samples):
        try:
            summary, t = sample
            d, p, r, *rest = summary
        except (TypeError, ValueError):
            raise ValueError(f"samples[{i}] must be ((decode, prefill, requests[, context]), "
                             f"seconds); got {sample!r}") from None
        if len(rest) > 1:
            raise ValueError(f"samples[{i}] summary has more than 4 fields: {summary!r}")
        ctx = rest[0] if rest else None
        if ctx is not None and not isinstance(ctx, BatchContext):
            ctx = BatchContext(*ctx)
        batches.append((d, p, r, ctx))
        seconds.append(validation.positive_number(f"samples[{i}] seconds", t))
    if not batches:
        raise ValueError("samples must hold at least one (summary, seconds) pair; got none")
    return batches, np.array(seconds)


def fit_roofline(samples: Iterable, base: Union[str, Efficiency, Roofline] = "default",
                 free: Sequence[str] = ("mfu", "mbu", "t_step"), *,
                 gpu: Union[str, GPU, None] = None, model: Union[str, ModelShape, None] = None,
                 tp: Optional[int] = None, precision: Union[str, Precision, None] = None,
                 max_iter: int = 200) -> RooflineFit:
    """Fit the ``free`` fields of a roofline's :class:`Efficiency` to ``samples``.

    ``samples``: ``((decode, prefill, requests[, context]), seconds)`` pairs (a
    missing or None context is :func:`~llmqueue.hardware.roofline.assumed_context`).
    ``base``: the starting efficiency (preset name or instance) with ``gpu``,
    ``model``, ``tp`` (default 1) and ``precision`` (default bf16) given, or a
    :class:`Roofline` that carries all five.
    ``free``: fields of :class:`Efficiency` except ``tile``; efficiencies stay in
    (0, 1] and times >= 0.  Minimises the sum of squared relative errors.
    """
    if isinstance(base, Roofline):
        if gpu is not None or model is not None or tp is not None or precision is not None:
            raise ValueError("gpu, model, tp and precision come from base when base is a "
                             "Roofline; give one or the other")
        start, roofline = base.efficiency, base
    else:
        if gpu is None or model is None:
            raise ValueError("gpu and model must be given unless base is a Roofline")
        start = find_eff(base)
        roofline = Roofline(gpu, model, 1 if tp is None else tp, start,
                            "bf16" if precision is None else precision)
    allowed = list(FRACTIONS + TIMES)
    free = list(free)
    if not free:
        raise ValueError(f"free must name at least one of {', '.join(allowed)}; got none")
    for name in free:
        validation.choice("free field", name, allowed)
    if len(set(free)) != len(free):
        raise ValueError(f"free must not repeat a field; got {free}")
    if "eta_el" in free and start.eta_el is None:
        raise ValueError("eta_el is off (None) in the base efficiency; give a base with "
                         "eta_el set to fit it")
    validation.positive_int("max_iter", max_iter)
    batches, measured = _samples(samples)
    is_frac = np.array([name in FRACTIONS for name in free])
    lower = np.where(is_frac, 1.0, 0.0)
    upper = np.where(is_frac, _MAX_INVERSE, np.inf)

    def eff_of(x: np.ndarray) -> Efficiency:
        values: Dict[str, Any] = {n: float(1 / v if f else v * _TIME_UNIT)
                                  for n, v, f in zip(free, x, is_frac)}
        return dataclasses.replace(start, **values)

    def residuals(x: np.ndarray) -> np.ndarray:
        model_ = roofline.with_efficiency(eff_of(x))
        t = np.array([model_.batch_time(d, p, r, c) for d, p, r, c in batches])
        return t / measured - 1.0

    x = np.array([1 / getattr(start, n) if f else getattr(start, n) / _TIME_UNIT
                  for n, f in zip(free, is_frac)], dtype=float)
    x = np.clip(x, lower, upper)
    x, jac = levenberg_marquardt(residuals, x, lower, upper, max_iter)
    fitted = eff_of(x)
    r = residuals(x)
    undetermined = tuple(n for n, col in zip(free, jac.T) if not np.any(col))
    return RooflineFit(roofline.with_efficiency(fitted), fitted,
                       {n: getattr(fitted, n) for n in free},
                       float(np.mean(np.abs(r))), int(measured.size), undetermined)


def _jacobian(fun, x: np.ndarray, r: np.ndarray, upper: np.ndarray) -> np.ndarray:
    jac = np.empty((r.size, x.size))
    for j in range(x.size):
        h = 1e-6 * max(abs(x[j]), 1.0)
        if x[j] + h > upper[j]:
            h = -h
        xh = x.copy()
        xh[j] += h
        jac[:, j] = (fun(xh) - r) / h
    return jac


def levenberg_marquardt(fun: Callable[[np.ndarray], np.ndarray], x: np.ndarray,
                        lower: np.ndarray, upper: np.ndarray,
                        max_iter: int) -> Tuple[np.ndarray, np.ndarray]:
    """Minimise ``|fun(x)|^2`` over ``x`` within the box ``lower <= x <= upper``:
    Marquardt-scaled steps, clipped to the box, forward-difference derivatives.
    Returns ``x`` and the last Jacobian (a zero column: a field the residuals
    do not depend on)."""
    r = fun(x)
    cost = float(r @ r)
    lam = 1e-3
    jac = _jacobian(fun, x, r, upper)
    for _ in range(max_iter):
        scale = np.maximum(np.sum(jac * jac, axis=0), 1e-12)
        improved = False
        while lam < 1e12:
            a = np.vstack([jac, np.diag(np.sqrt(lam * scale))])
            b = np.concatenate([-r, np.zeros(x.size)])
            step = np.linalg.lstsq(a, b, rcond=None)[0]
            x_new = np.clip(x + step, lower, upper)
            r_new = fun(x_new)
            cost_new = float(r_new @ r_new)
            if cost_new < cost:
                improved = True
                done = cost - cost_new <= 1e-15 * max(cost, 1e-30) or cost_new < 1e-28
                x, r, cost = x_new, r_new, cost_new
                lam = max(lam / 10, 1e-12)
                break
            lam *= 10
        if not improved or done:
            break
        jac = _jacobian(fun, x, r, upper)
    return x, jac
