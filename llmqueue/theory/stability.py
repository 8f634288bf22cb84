"""Is a run's queue holding?  The measured verdict beside the theory's prediction.

Measured (``verdict``), from the backlog drift over the second half of the run
(``backlog_slope`` +- ``backlog_slope_se``, tokens/s, see ``llmqueue.theory.drift``),
on the scale of the offered tokens per second:

* ``unstable``: the slope is more than 3 standard errors above 0 and above 1%
  of the offered tokens;
* ``stable``: the slope's upper bound, slope + 2 standard errors, is below 1%
  of the offered tokens (at most a negligible drift, e.g. the period of a
  deterministic run not fitting the windows); or it is below 5% and the slope
  is not significantly positive (at most 2 standard errors);
* ``inconclusive``: anything else, or no drift measured (a run without a
  horizon, too short a run).

Predicted (``predicted``), from Theorem 2 where the workload's rate and mean
sizes are known:

* ``unstable`` for any policy when the offered tokens exceed the peak token
  rate ``max b / t_b`` that no policy can beat;
* ``no guarantee`` for a policy that is not work-conserving (vLLM,
  FasterTransformer) otherwise;
* for a work-conserving policy: ``boundary`` when the load is exactly 1
  (within 1e-9; Theorem 2 says nothing there); else ``stable`` / ``unstable``
  below / above the token capacity ``bmax / t_bmax`` when Theorem 2 applies
  (no kmax, or ``kmax >= bmax``, so that a growing queue keeps every batch
  full); else ``no guarantee`` (a slot limit ``kmax < bmax``: docs/model.md §9.5's
  two-dimensional region decides, see Sarathi-1024 at point C): ``unstable``
  outside its polygon for any policy, ``no guarantee`` inside.

A model not priced by its batch size alone (the roofline, docs/model.md §4's step
model) is read at the workload's mix and mean contexts
(:mod:`~llmqueue.theory.shapes`): its capacity is approximate, so loads
within :data:`APPROXIMATE_BAND` of 1 are a ``boundary`` (``unstable``
outside Theorem 10's region with ``kmax < bmax``) and the peak rate binds
only beyond that band too.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, Hashable, Mapping, Optional, Tuple, cast

from llmqueue.models.latency import LatencyModel, Staircase
from llmqueue.theory import capacity as theory
from llmqueue.theory.region import Region, stability_region
from llmqueue.theory.shapes import at_mean_context

#: Verdicts a run can get from its measured drift.
VERDICTS = ("stable", "unstable", "inconclusive")
#: Predictions the theory can make.
PREDICTIONS = ("stable", "unstable", "boundary", "no guarantee", "no guarantee (memory)")

UNSTABLE_SE = 3.0        # standard errors above 0 to call growth
UNSTABLE_FRACTION = 0.01  # ... and growth above this share of the offered tokens
STABLE_SE = 2.0          # standard errors of the slope's upper bound
STABLE_FRACTION = 0.05   # upper bound below this share of the offered tokens, slope <= 2 SE
BOUNDARY_TOLERANCE = 1e-9
#: How far from load 1 the approximate capacity of a model not of the batch size
#: alone (at the mix and mean contexts) cannot tell stable from unstable:
#: E8.4 (docs/model.md §7.10) expects the roofline stable at 0.9 and unstable at 1.1 of lambda_mix,
#: and runs at 1.02-1.04 are stable where the mean contexts price a full batch
#: a few percent slow.
APPROXIMATE_BAND = 0.1


def measured_verdict(slope: Optional[float], slope_se: Optional[float],
                     offered: Optional[float]) -> str:
    """``stable``, ``unstable`` or ``inconclusive`` from a backlog slope, its
    standard error and the offered tokens per second (the rules above)."""
    if slope is None or slope_se is None or not offered or offered <= 0:
        return "inconclusive"
    if slope > UNSTABLE_SE * slope_se and slope > UNSTABLE_FRACTION * offered:
        return "unstable"
    upper = slope + STABLE_SE * slope_se
    if upper < UNSTABLE_FRACTION * offered:
        return "stable"
    if slope <= STABLE_SE * slope_se and upper < STABLE_FRACTION * offered:
        return "stable"
    return "inconclusive"


def predicted_verdict(load: float, peak_load: float, work_conserving: bool,
                      kmax: Optional[int], bmax: int, band: float = 0.0) -> str:
    """What Theorem 2 predicts for a policy at ``load`` (offered tokens over
    ``bmax / t_bmax``) and ``peak_load`` (offered tokens over ``max b / t_b``).
    ``band``: how far from 1 an approximate capacity cannot tell (that of a
    model not of the batch size alone, :data:`APPROXIMATE_BAND`): loads
    inside it are a ``boundary``."""
    if _beyond(peak_load, band):
        return "unstable"
    if not work_conserving:
        return "no guarantee"
    above, below = _beyond(load, band), _beyond(2 - load, band)
    if not above and not below:
        return "boundary"
    if kmax is not None and kmax < bmax:
        return "no guarantee"
    return "stable" if below else "unstable"


def _beyond(x: float, band: float) -> bool:
    """Whether ``x`` is above 1 by more than rounding and by at least ``band``."""
    return x > 1 + BOUNDARY_TOLERANCE and x >= 1 + band - BOUNDARY_TOLERANCE


def predict(rate: float, mean_prefill: float, mean_decode: float, *, work_conserving: bool,
            bmax: int, kmax: Optional[int], latency: Optional[LatencyModel]) -> str:
    """:func:`predicted_verdict` for a workload of ``rate`` requests/s with
    these mean sizes on an engine with this budget, slot limit and latency (a
    model not priced by its batch size alone, such as the roofline, at the
    workload's mix and mean contexts:
    :func:`~llmqueue.theory.shapes.at_mean_context`, within
    :data:`APPROXIMATE_BAND`); with ``kmax < bmax``, rates outside Theorem 10's
    region (docs/model.md §9.5) are ``unstable`` for any policy (a context model's
    region is drawn at context 0, where no iteration is slower: outside it,
    outside the true one too)."""
    seen = at_mean_context(latency, mean_prefill, mean_decode)
    load = theory.load(rate, bmax, mean_prefill, mean_decode, seen)
    # the peak rate is at least the capacity: search for it only above capacity
    peak_load = (rate * (mean_prefill + mean_decode) / theory.peak_token_rate(bmax, seen)
                 if load > 1 else load)
    band = APPROXIMATE_BAND if seen is not latency else 0.0
    verdict = predicted_verdict(load, peak_load, work_conserving, kmax, bmax, band)
    # outside the region no policy holds, at Theorem 2's boundary too (point C with
    # 4 slots is a boundary of the budget far beyond what its slots can serve)
    if verdict != "unstable" and kmax is not None and kmax < bmax:
        region = _region(bmax, kmax, latency)
        if region is not None and not region.is_inside(rate * mean_prefill, rate * mean_decode,
                                                       tolerance=1e-9):
            return "unstable"
    return verdict


#: What a prediction says below a capacity memory binds: ``lambda_joint`` is a
#: necessary condition only; greedy admission's preemptions waste some of it
#: (runs at 0.95 of it grow on docs/model.md §6.8.2's rows), so no rate below it is
#: promised stable.
NO_GUARANTEE_MEMORY = "no guarantee (memory)"


def binding_bound(figures: Mapping[str, Any]) -> Optional[Tuple[float, str]]:
    """The rate (req/s) and the resource, ``memory`` or ``slots``, that bind an
    engine below its compute capacity, from its joint figures
    (``lambda_joint``, or ``mu_mem`` without a budget; ``binding``; ``fits``:
    as ``llmqueue capacity`` gives them), or ``None`` where compute binds, or
    no request fits (then none is served at all)."""
    binding = figures.get("binding")
    if binding not in ("memory", "slots") or not figures.get("fits", True):
        return None
    return figures.get("lambda_joint", figures.get("mu_mem")), binding


def memory_bound(memory: Mapping[str, Any]) -> Optional[float]:
    """The rate memory binds an engine at (req/s), from its memory figures
    (:func:`binding_bound`), or ``None`` where compute or slots bind."""
    bound = binding_bound(memory)
    return bound[0] if bound is not None and bound[1] == "memory" else None


def with_limits(predicted: str, rate: float, figures: Mapping[str, Any]) -> str:
    """Theorem 2's ``predicted`` verdict for an engine whose memory or slots
    bind below its compute capacity (:func:`binding_bound`; docs/model.md §6.6 and §7.6:
    ``lambda <= lambda_joint`` is necessary): a rate above the bound is
    ``unstable`` and one at it a ``boundary``.  Below it, where memory binds,
    a ``stable`` becomes :data:`NO_GUARANTEE_MEMORY` (the bound is an upper
    one: preemptions can lower the capacity under it); where slots bind
    (only with ``kmax < bmax``) Theorem 2's verdict stands, as where compute
    binds (memory can still storm below it: docs/model.md §6.8.3)."""
    bound = binding_bound(figures)
    if bound is None or predicted == "unstable":
        return predicted
    rate_bound, resource = bound
    if rate > rate_bound * (1 + BOUNDARY_TOLERANCE):
        return "unstable"
    if rate >= rate_bound * (1 - BOUNDARY_TOLERANCE):
        return "boundary"
    if resource == "memory" and predicted == "stable":
        return NO_GUARANTEE_MEMORY
    return predicted


def _region(bmax: int, kmax: int, latency: Optional[LatencyModel]) -> Optional[Region]:
    """Theorem 10's region, remembered per engine shape (``None`` where the
    region is not computed: a non-staircase model beyond the enumeration limit)."""
    model = latency if latency is not None else Staircase()
    try:  # the cache hashes the model (a user model may not be hashable: see below)
        return _cached_region(bmax, kmax, cast(Hashable, model))
    except TypeError:  # an unhashable user model: compute it afresh
        return _computed_region(bmax, kmax, model)


@functools.lru_cache(maxsize=64)
def _cached_region(bmax: int, kmax: int, latency: LatencyModel) -> Optional[Region]:
    return _computed_region(bmax, kmax, latency)


def _computed_region(bmax: int, kmax: int, latency: LatencyModel) -> Optional[Region]:
    try:
        return stability_region(bmax, kmax, latency)
    except ValueError:
        return None


def assess(summary: Mapping[str, Any], *, rate: Optional[float],
           mean_prefill: Optional[float], mean_decode: Optional[float],
           work_conserving: bool, bmax: Optional[int], kmax: Optional[int],
           latency: Optional[LatencyModel]) -> Dict[str, Any]:
    """The summary keys ``verdict``, ``predicted``, ``load`` and ``fluid_slope``
    of one run (``None`` for the theory's figures where the workload's rate or
    mean sizes, or the budget, are unknown)."""
    slope = summary.get("backlog_slope")
    load: Optional[float]
    predicted: Optional[str]
    fluid: Optional[float]
    if rate is not None and mean_prefill is not None and mean_decode is not None \
            and bmax is not None:  # all known
        offered = rate * (mean_prefill + mean_decode)
        load = theory.load(rate, bmax, mean_prefill, mean_decode, latency)
        predicted = predict(rate, mean_prefill, mean_decode, work_conserving=work_conserving,
                            bmax=bmax, kmax=kmax, latency=latency)
        fluid = theory.fluid_slope(rate, bmax, mean_prefill, mean_decode, latency)
    else:
        throughput = summary.get("throughput_tokens_per_s") or 0.0
        offered = throughput + max(0.0, slope or 0.0)  # served + growth
        load = predicted = fluid = None
    return {"verdict": measured_verdict(slope, summary.get("backlog_slope_se"), offered),
            "predicted": predicted, "load": load, "fluid_slope": fluid}
