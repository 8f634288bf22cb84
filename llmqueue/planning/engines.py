"""``plan_engines``: the fewest identical engines behind a router that serve a
rate within an SLO, and what they cost (docs/model.md §7.8).

``K_lb = floor(rate / lambda_tok) + 1`` (Proposition 3 / Theorem 2: fewer
engines cannot be stable under any router; exact for models of the batch size
alone, where smaller K are recorded as FAIL without simulation).  Probe
``K_lb``; on a FAIL probe ``K_hi = max(K_lb + 1, ceil(rate / goodput1))``
(``goodput1`` a single-engine plan's goodput) or ``2 K_lb``, doubling while it
FAILs, then bisect on integers between the last FAIL and the first PASS.  A
boundary probe counts as not passing (the search never reports a K that did
not pass) and is noted.  A PASS at K with a FAIL at K + 1 is "non-monotone".

With a prefix cache on prefix groups, ``lambda_tok`` reads the prompt less
every group's whole head (:mod:`llmqueue.planning.hits`): no cache hits more,
so ``K_lb`` stays a lower bound whatever the cache's size, and the load per
engine counts the prompt tokens left to compute.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from llmqueue.common import limits, validation
from llmqueue.models.latency import tokens_time
from llmqueue.planning.hits import Hits
from llmqueue.planning.fit import warn
from llmqueue.planning.plan import _Bar, at_rate, describe, infeasibility, setup
from llmqueue.planning.probe import FAIL, PASS, Probe, probe
from llmqueue.planning.spec import EngineSpec, Traffic
from llmqueue.theory.bounds import Bounds
from llmqueue.theory.cost import Cost
from llmqueue.theory.shapes import at_mean_context
from llmqueue.theory.slo import SLOLike

@dataclass(frozen=True)
class EnginesResult:
    """What :func:`plan_engines` found: ``k_min`` (``None`` if no K up to
    :data:`~llmqueue.common.limits.MAX_ENGINES` passed), ``k_lb``, the probes
    (one per K probed, in order), the per-engine load at ``k_min``,
    ``non_monotone``, figures at ``k_min`` and the cost when a price was given;
    with a prefix cache, the mean hit the bounds read (``hits``)."""

    rate: float
    k_min: Optional[int]
    k_lb: int
    probes: Tuple[Probe, ...]
    bounds: Bounds
    router: str
    target: float
    load: Optional[float]
    non_monotone: bool
    config: Dict[str, Any]
    at_k_min: Dict[str, Any] = field(default_factory=dict)
    cost: Optional[Cost] = None
    notes: Tuple[str, ...] = ()
    seconds: float = field(default=0.0, compare=False)
    hits: Optional[Hits] = None

    def as_dict(self) -> Dict[str, Any]:
        """One JSON-ready document."""
        extra = {} if self.hits is None else self.hits.as_dict()
        return {**extra, "rate": self.rate, "k_min": self.k_min, "k_lb": self.k_lb,
                "router": self.router, "target": self.target, "load": self.load,
                "non_monotone": self.non_monotone, "lambda_tok": self.bounds.lambda_tok,
                "config": self.config, "at_k_min": self.at_k_min,
                "cost": None if self.cost is None else vars(self.cost),
                "notes": list(self.notes), "probes": [p.as_dict() for p in self.probes],
                "seconds": self.seconds}


def k_lower(rate: float, lambda_tok: float) -> int:
    """``K_lb = floor(rate / lambda_tok) + 1``."""
    return math.floor(rate / lambda_tok) + 1


def pool_limit(rate: float, bounds: Bounds, target: float = 0.9) -> int:
    """The largest pool searched for ``rate`` requests/s
    (:data:`~llmqueue.common.limits.MAX_ENGINES`, or ``LLMQUEUE_MAX_ENGINES``);
    a ``ValueError`` naming the limit when even ``K_lb`` is beyond it (an SLO
    infeasible at every rate needs no pool and passes)."""
    validation.positive_number("rate", rate)
    cap = limits.limit("max_engines", limits.MAX_ENGINES)
    if not bounds.infeasible(target):
        limits.check_engines(k_lower(rate, bounds.limit),
                             f"{rate:g} requests/s at lambda = {bounds.limit:.4g} per engine: "
                             "the smallest pool (K_lb)")
    return cap


def plan_engines(rate: float, workload: Traffic, engine: EngineSpec, slo: SLOLike,
                 target: float = 0.9, router: str = "jsq-tokens",
                 goodput1: Optional[float] = None, *, mode: str = "joint", reps: int = 5,
                 max_reps: int = 20, n_requests: int = 2000, warmup: float = 0.1,
                 confidence: float = 0.95, seed: int = 0, early_stop: bool = True,
                 executor: Optional[Executor] = None, progress: Optional[bool] = None,
                 price: Optional[float] = None) -> EnginesResult:
    """The fewest engines ``engine`` behind ``router`` that serve ``rate``
    requests/s of ``workload`` within ``slo`` at ``target`` (docs/model.md §7.8), with
    the replication and decision rules of :func:`~llmqueue.planning.plan`."""
    wall = time.perf_counter()
    validation.positive_number("rate", rate)
    if goodput1 is not None:
        validation.nonnegative_number("goodput1", goodput1)
    if price is not None:
        validation.nonnegative_number("price", price)
    s = setup(workload, engine, slo, target, mode, reps, max_reps, n_requests, warmup,
              confidence, seed, early_stop, router, executor, progress)
    config = describe(engine, workload, slo, router, n_requests, reps, seed)
    k_lb = k_lower(rate, s.bounds.limit)
    cap = pool_limit(rate, s.bounds, target)
    probes: Dict[int, Probe] = {}
    notes = []
    warn(s.fit)  # once, for every replication's engines
    why = infeasibility(s, target)
    if why is not None:
        notes.append(why)
        return EnginesResult(rate, None, k_lb, (), s.bounds, router, target, None, False,
                             config, notes=tuple(notes), seconds=time.perf_counter() - wall,
                             hits=s.hits)
    if s.bounds.exact and k_lb > 1:
        probes[k_lb - 1] = Probe(rate, k_lb - 1, 0, None, None, FAIL,
                                 note="below K_lb: no router keeps up (Theorem 2)")
    with _Bar(progress) as bar:
        def run(k: int) -> bool:
            p = probe(s.base, rate, k, s.rules, s.executor, bar)
            probes[k] = p
            if p.decision not in (PASS, FAIL):
                notes.append(f"K = {k}: boundary (within statistical resolution), "
                             f"counted as not passing")
            return p.decision == PASS
        k_min: Optional[int] = None
        if run(k_lb):
            k_min = k_lb
        else:
            fail = k_lb
            k_hi = max(k_lb + 1, math.ceil(rate / goodput1)) if goodput1 else 2 * k_lb
            while k_hi <= cap and not run(k_hi):
                fail, k_hi = k_hi, 2 * k_hi
            if k_hi <= cap:
                good = k_hi
                while good - fail > 1:
                    mid = (good + fail) // 2
                    if run(mid):
                        good = mid
                    else:
                        fail = mid
                k_min = good
            else:  # say why there is no answer
                guess = "" if not goodput1 or fail > k_lb else \
                    (f"; one engine's goodput, {goodput1:.4g} req/s, asks for "
                     f"{math.ceil(rate / goodput1):,}")
                notes.append(f"no K_min within the limit of {cap:,} engines "
                             f"(LLMQUEUE_MAX_ENGINES): {fail:,} failed{guess}")
    ordered = tuple(probes[k] for k in sorted(probes))
    non_monotone = any(probes[k].decision == PASS and k + 1 in probes
                       and probes[k + 1].decision == FAIL for k in probes)
    load = at = cost = None
    if k_min is not None:
        work = workload.mean_prefill - (0.0 if s.hits is None else s.hits.mean_hit)
        seen = at_mean_context(engine.latency, work, workload.mean_decode)
        load = rate * (work + workload.mean_decode) / (
            k_min * engine.bmax / tokens_time(seen, engine.bmax))
        best = probes[k_min]
        at = at_rate(best)
        if price is not None and best.mean is not None:
            cost = Cost.of(k_min, engine.tp, price, rate, workload.mean_prefill,
                           workload.mean_decode, min(1.0, best.mean))
    return EnginesResult(rate, k_min, k_lb, ordered, s.bounds, router, target, load,
                         non_monotone, config, at or {}, cost, tuple(notes),
                         time.perf_counter() - wall, s.hits)
