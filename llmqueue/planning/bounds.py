"""The bounds a plan brackets its search with (docs/model.md §7.6), for a
checked SLO: :func:`check_slo` and :func:`bounds_of` (re-exported by
:mod:`llmqueue.planning.plan`, which uses them)."""

from __future__ import annotations

import dataclasses
from typing import Any, List, Mapping, Optional, Tuple

from llmqueue.planning.spec import EngineSpec, Traffic
from llmqueue.theory.bounds import Bounds, memory_bound, smallest_iteration, zero_load
from llmqueue.theory.slo import SLO, SLOLike


def check_slo(slo: Any, workload: Optional[Traffic] = None) -> SLOLike:
    """``slo`` if ``plan`` can judge it: an :class:`SLO` gating some metric, or a
    dict class -> SLO naming exactly the classes of ``workload`` (a
    :meth:`Traffic.mix`)."""
    if isinstance(slo, SLO):
        if not slo.gated:
            raise ValueError("slo must gate at least one of ttft, tpot, tbt, e2e, sched_delay; "
                             "got none")
        return slo
    if not isinstance(slo, Mapping) or not slo or \
            not all(isinstance(one, SLO) for one in slo.values()):
        raise ValueError(f"slo must be an SLO or a dict class -> SLO, got {slo!r}")
    names = None if workload is None or workload.classes is None else \
        [c.name for c in workload.classes]
    if names is None:
        raise ValueError("slo is per class but the workload has no classes: build it with "
                         "Traffic.mix({class: (share, prefill, decode), ...})")
    if set(slo) != set(names):
        raise ValueError(f"slo must have one entry per class of the workload {names}; "
                         f"got {list(slo)}")
    for name, one in slo.items():
        if not one.gated:
            raise ValueError(f"slo[{name!r}] must gate at least one metric; got none")
    return dict(slo)


#: The last bounds :func:`bounds_of` computed and what they were of (the
#: command's check of the pool, ``plan`` and ``plan_engines`` ask for the same).
_LAST: List[Tuple[Traffic, EngineSpec, SLOLike, int, Bounds]] = []


def bounds_of(workload: Traffic, engine: EngineSpec, slo: SLOLike, seed: int) -> Bounds:
    """docs/model.md §7.6's bounds for ``engine`` (with ``lambda_kv`` when it has a KV
    cache) and ``workload``; per class, ``A_0 = sum share_c A_0,c`` and
    ``1/lambda_kv = sum share_c / lambda_kv,c`` (Little's law on the mean KV area).
    The same workload and engine objects, SLO and seed give the bounds
    computed last without computing them again (they are seeded)."""
    for w, e, s, d, known in _LAST:
        if w is workload and e is engine and d == seed and s == slo:
            return known
    bounds = _bounds_of(workload, engine, slo, seed)
    _LAST[:] = [(workload, engine, slo, seed, bounds)]
    return bounds


def _bounds_of(workload: Traffic, engine: EngineSpec, slo: SLOLike, seed: int) -> Bounds:
    """:func:`bounds_of`, computed."""
    capacity = None if engine.kv is None else engine.kv.tokens
    fits = None if engine.kv is None else engine.kv.fits_ever  # the rest miss their SLO
    if isinstance(slo, SLO) and workload.classes is None:
        return Bounds.of(engine.latency, engine.bmax, workload.prefill_law,
                         workload.decode_law, kmax=engine.kmax, capacity_tokens=capacity,
                         slo=slo, seed=seed, fits=fits)
    whole = Bounds.of(engine.latency, engine.bmax, workload.prefill_law, workload.decode_law,
                      kmax=engine.kmax, seed=seed)
    t1 = smallest_iteration(engine.latency)
    a0 = inverse_kv = 0.0
    for name, share, alone in workload.class_traffic():
        one = slo if isinstance(slo, SLO) else slo[name]
        a0 += share * zero_load(engine.latency, engine.bmax, alone.prefill_law,
                                alone.decode_law, one, seed=seed, fits=fits).attainment
        if capacity is not None:
            inverse_kv += share / memory_bound(capacity, t1, alone.prefill_law,
                                               alone.decode_law, seed=seed)
    return dataclasses.replace(whole, attainment_zero_load=a0,
                               lambda_kv=1 / inverse_kv if capacity is not None else None)
