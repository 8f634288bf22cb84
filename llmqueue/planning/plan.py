"""``plan``: the largest arrival rate one engine (or a pool of them) serves
within an SLO (docs/model.md §7.7), with the bounds of §7.6 first.

Bracket ``[0, hi]`` with ``hi = engines * min(lambda_tok, lambda_slot,
lambda_kv)`` (``lambda_kv`` when the engine has a KV cache: its capacity in
tokens).  For latency models of the batch size alone ``lambda_tok`` is exact
(Theorem 2) and the others are necessary conditions: any rate at or above
``hi`` FAILs without simulation (recorded as a probe of 0 replications).  For
context models ``hi`` starts at ``1.1 * min`` and doubles while a probe at
``hi`` passes.  Then bisection on ``(lo + hi) / 2`` with the
probes of :mod:`llmqueue.planning.probe`, until ``hi - lo <= rel_tol * hi``, a
boundary probe once a rate has passed, ``max_probes`` probes, or (nothing
passed) ``hi`` below :data:`FLOOR` times the bound.  docs/model.md §7.7 stops at any
boundary probe; one before any pass would answer a goodput of 0 for an
engine that serves nearly the rate probed (the first probe of a context
model is at ``1.1 * min``, near the capacity), so the search goes on below it.

The SLO is one :class:`SLO` or, for a :meth:`Traffic.mix` of request classes, a
dict class -> SLO; each request is judged by its class's (``A_0`` and
``lambda_kv`` are then the share-weighted combinations of the classes' own).

With a prefix cache on prefix groups the bounds read the effective prompt
(:mod:`llmqueue.planning.hits`); when the cache may evict, the first probe,
at the bound without the cache, measures the hit the token bound then uses.
"""

from __future__ import annotations

import dataclasses
import math
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

from llmqueue.common import limits, validation
from llmqueue.common.progress import bar
from llmqueue.network.routers import check_traffic
from llmqueue.planning.bounds import bounds_of, check_slo
from llmqueue.planning.fit import Fit, binding, diagnose, warn
from llmqueue.planning.hits import (CEILING, Hits, cached_bounds, first_probe, hit_figures,
                                    longest)
from llmqueue.planning.probe import BOUNDARY, FAIL, PASS, Probe, Rules, probe
from llmqueue.planning.replicate import Task
from llmqueue.planning.spec import EngineSpec, Traffic
from llmqueue.theory.bounds import Bounds
from llmqueue.theory.cost import Cost
from llmqueue.theory.slo import MODES, SLO, SLOLike
from llmqueue.theory.stats import mean_ci

#: What a pass at ``lo`` reports, per replication, with a CI across them
#: (``tbt``: the measured requests' largest inter-token gaps).
LATENCIES = ("ttft", "tpot", "tbt")
QUANTILES = ("p50", "p90", "p99")
#: The search gives up once nothing passed down to this share of the rate
#: bound (a probe's simulated span grows as 1 / rate).
FLOOR = 2.0**-10


@dataclass(frozen=True)
class PlanResult:
    """What :func:`plan` found (rates in requests/s, times in seconds).

    ``goodput = lo`` (the largest rate shown to pass; 0 if none), ``hi`` the
    smallest shown to fail, ``crossing`` the rate where the mean attainment
    crosses the target (linear between probes; ``None`` when no simulated
    PASS/FAIL pair brackets it), every probe in order, the bounds and ``A_0``,
    ``at_lo`` (TTFT/TPOT/TBT p50/p90/p99 ``[mean, ci]`` across replications,
    ``busy_fraction``, ``mean_batch``, ``attainment``, ``hw``), the cost when a
    price was given, and ``reason`` when the SLO is infeasible at zero load or
    the search ended within statistical resolution.  With a prefix cache,
    ``hits`` says which mean hit the bounds read (:class:`Hits`)."""

    goodput: float
    lo: float
    hi: float
    crossing: Optional[float]
    probes: Tuple[Probe, ...]
    bounds: Bounds
    target: float
    mode: str
    engines: int
    config: Dict[str, Any]
    at_lo: Dict[str, Any] = field(default_factory=dict)
    cost: Optional[Cost] = None
    infeasible: bool = False
    reason: Optional[str] = None
    seconds: float = field(default=0.0, compare=False)
    hits: Optional[Hits] = None
    fit: Optional[Fit] = None
    """With a KV cache: how the requests fit it (:mod:`llmqueue.planning.fit`)."""

    @property
    def attainment_zero_load(self) -> Optional[float]:
        """``A_0``."""
        return self.bounds.attainment_zero_load

    @property
    def per_gpu_goodput(self) -> float:
        """Goodput / (engines tp)."""
        return self.goodput / (self.engines * int(self.config.get("tp", 1)))

    def as_dict(self) -> Dict[str, Any]:
        """The JSON document of ``llmqueue plan --json``."""
        b = self.bounds
        extra = {} if self.hits is None else self.hits.as_dict()
        extra.update({"binding": binding(b)} if self.fit is None else
                     {"binding": binding(b), "fit": self.fit.as_dict()})
        return {**extra, "goodput": self.goodput, "lo": self.lo,
                "hi": self.hi if math.isfinite(self.hi) else None,
                "crossing": self.crossing, "lambda_tok": b.lambda_tok,
                "lambda_mix": b.lambda_mix, "lambda_slot": b.lambda_slot,
                "lambda_kv": b.lambda_kv, "exact_bound": b.exact,
                "attainment_zero_load": b.attainment_zero_load,
                "per_gpu_goodput": self.per_gpu_goodput, "target": self.target,
                "mode": self.mode, "engines": self.engines, "infeasible": self.infeasible,
                "reason": self.reason, "config": self.config, "at_lo": self.at_lo,
                "cost": None if self.cost is None else vars(self.cost),
                "probes": [p.as_dict() for p in self.probes], "seconds": self.seconds}


@dataclass(frozen=True)
class Setup:
    """The checked arguments shared by :func:`plan` and ``plan_engines``."""

    base: Task
    rules: Rules
    bounds: Bounds
    executor: Optional[Executor]
    progress: Optional[bool]
    hits: Optional[Hits] = None
    fit: Optional[Fit] = None
    """How the requests fit the KV cache (:func:`~llmqueue.planning.fit.diagnose`)."""


def setup(workload: Any, engine: Any, slo: Any, target: float, mode: str, reps: int,
          max_reps: int, n_requests: int, warmup: float, confidence: float, seed: int,
          early_stop: bool, router: str, executor: Optional[Executor],
          progress: Optional[bool]) -> Setup:
    """Check every argument (ValueError naming it) and compute the bounds."""
    if not isinstance(workload, Traffic):
        raise ValueError(f"workload must be a Traffic(prefill, decode, cv=None), "
                         f"got {workload!r}")
    if not isinstance(engine, EngineSpec):
        raise ValueError(f"engine must be an EngineSpec, got {engine!r}")
    slo = check_slo(slo, workload)
    if not (isinstance(target, (int, float)) and 0 < target < 1):
        raise ValueError(f"target must be a number in (0, 1), got {target!r}")
    validation.choice("mode", mode, MODES)
    if not (isinstance(reps, int) and reps >= 2):
        raise ValueError(f"reps must be an integer >= 2 (a half-width needs two), got {reps!r}")
    if not (isinstance(max_reps, int) and max_reps >= reps):
        raise ValueError(f"max_reps must be an integer >= reps={reps}, got {max_reps!r}")
    if not (isinstance(n_requests, int) and n_requests >= 2):
        raise ValueError(f"n_requests must be an integer >= 2, got {n_requests!r}")
    if not (isinstance(warmup, (int, float)) and 0 <= warmup < 10):
        raise ValueError(f"warmup must be a number in [0, 10) (a share of n_requests), "
                         f"got {warmup!r}")
    try:  # one replication's requests, its warm-up included
        limits.check_requests(None, None, math.ceil(n_requests * (1 + warmup)))
    except ValueError as exc:
        raise ValueError(f"n_requests={n_requests} (--requests on the command line): "
                         f"{exc}") from None
    if not (isinstance(confidence, (int, float)) and 0 < confidence < 1):
        raise ValueError(f"confidence must be a number in (0, 1), got {confidence!r}")
    validation.seed("seed", seed)
    if not isinstance(early_stop, bool):
        raise ValueError(f"early_stop must be True or False, got {early_stop!r}")
    check_traffic(router, ids=workload.groups is not None and engine.kv is not None
                  and engine.kv.prefix)
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise ValueError(f"executor must be a concurrent.futures Executor, got {executor!r}")
    bounds, hits = cached_bounds(bounds_of(workload, engine, slo, seed), workload, engine, slo,
                                 seed, longest(math.ceil(warmup * n_requests), n_requests))
    base = Task(workload, engine, slo, 1.0, 0, seed, math.ceil(warmup * n_requests),
                n_requests, float(target), mode, early_stop, 1, router)
    return Setup(base, Rules(float(target), float(confidence), reps, max_reps), bounds,
                 executor, progress, hits, diagnose(workload, engine, seed=seed))


def infeasibility(s: Setup, target: float) -> Optional[str]:
    """Why no rate can meet the SLO at ``target``, or None: the requests that
    can never fit the KV cache leave less than ``target`` (exactly, or from the
    laws' survival functions: :attr:`Fit.exact`), or ``A_0 < target``."""
    fit = s.fit
    if fit is not None and fit.exact and fit.ceiling < target:
        return (f"infeasible at every rate: {fit.share_text()} of requests can never fit the "
                f"KV cache (vp + vd > {fit.fit_tokens:,} tokens) and count as misses, so at "
                f"most {fit.ceiling:.4g} of them can meet it (target {target})")
    if not s.bounds.infeasible(target):
        return None
    return (f"infeasible at every rate: only A_0 = {s.bounds.attainment_zero_load:.3f} "
            f"of requests meet the SLO on an empty engine (target {target})"
            + ("" if s.base.engine.kv is None else
               "; requests that can never fit the KV cache count as misses")
            + ("" if fit is None or fit.never <= 0 else
               f" ({fit.share_text()} of them: vp + vd > {fit.fit_tokens:,} tokens)"))


class _Bar:
    """A tqdm bar on stderr when it is a terminal (or ``progress`` is true)."""

    def __init__(self, progress: Optional[bool], unit: str = "rep") -> None:
        self.bar = bar(None, unit, progress)

    def __enter__(self) -> Any:
        return self.bar

    def __exit__(self, *exc: Any) -> None:
        self.bar.close()


def describe(engine: EngineSpec, workload: Traffic, slo: SLOLike, router: Optional[str],
             n_requests: int, reps: int, seed: int) -> Dict[str, Any]:
    """The configuration a result reports: engine, router, traffic, SLO (per
    class: by the class's name), sizes."""
    gated = dict(slo.gated) if isinstance(slo, SLO) else \
        {str(name): dict(one.gated) for name, one in slo.items()}
    return {"scheduler": engine.scheduler, "bmax": engine.bmax, "kmax": engine.kmax,
            "latency": repr(engine.latency), "chunked": engine.chunked, "tp": engine.tp,
            "kv": None if engine.kv is None else repr(engine.kv),
            "router": router, "workload": workload.describe(), "slo": gated,
            "n_requests": n_requests, "reps": reps, "seed": seed}


def at_rate(p: Probe) -> Dict[str, Any]:
    """TTFT/TPOT/TBT quantiles (``[mean, 95 % CI half-width]`` across replications),
    ``p50``, ``p90``, ``p99`` and ``target`` (the quantile at the attainment
    target, which quantile mode judges), busy fraction and mean batch of a
    probe's replications."""
    out: Dict[str, Any] = {"rate": p.rate, "attainment": p.mean, "hw": p.hw}
    for j, metric in enumerate(LATENCIES):
        for i, q in enumerate(QUANTILES):
            mean, half, _ = mean_ci(getattr(r, metric)[i] for r in p.runs)
            out[f"{metric}_{q}"] = [mean, half]
        mean, half, _ = mean_ci(r.at_target[j] for r in p.runs)
        out[f"{metric}_target"] = [mean, half]
    for name in ("busy_fraction", "mean_batch"):
        mean, half, _ = mean_ci(getattr(r, name) for r in p.runs)
        out[name] = [mean, half]
    out.update(hit_figures(p))  # with a prefix cache
    return out


def shown_quantile(mode: str, target: float) -> Tuple[str, str]:
    """Which latency quantile a plan's table and figure show, as ``(key of
    :func:`at_rate`, label)``: p90 in joint mode (docs/model.md §7.9), the target's own
    quantile in quantile mode, which judges it (``target=0.99``: p99)."""
    if mode == "quantile":
        return "target", f"p{100 * target:.4g}"
    return "p90", "p90"


def mode_text(mode: str, target: float) -> str:
    """How ``mode`` judges attainment at ``target``, and the latency quantile
    a plan's table shows (:func:`shown_quantile`), in a few words."""
    shown = shown_quantile(mode, target)[1]
    if mode == "quantile":
        return (f"quantile mode, target {target:g}: each gated metric's {target:g}-quantile "
                f"({shown}) within its threshold; latencies at {shown}")
    return (f"joint mode, target {target:g}: the share of requests meeting every gated "
            f"threshold at once; latencies at {shown}")


def crossing(probes: List[Probe], target: float) -> Optional[float]:
    """Where the mean attainment crosses ``target``: linear interpolation
    between the simulated probes of neighbouring rates around it."""
    points = sorted((p.rate, p.mean) for p in probes if p.reps and p.mean is not None)
    for (r0, a0), (r1, a1) in zip(points, points[1:]):
        if a0 >= target > a1:
            return r0 + (a0 - target) / (a0 - a1) * (r1 - r0)
    return None


def _search(s: Setup, engines: int, max_probes: int, rel_tol: float, bar: Any,
            first: Optional[Probe] = None) -> Iterator[Probe]:
    """The probes of the search, in order (docs/model.md §7.7 items 1, 5), after
    ``first`` when a probe already ran (it measured a prefix cache's hits)."""
    limit = s.bounds.limit * engines
    lo = 0.0
    count = 0
    if first is not None:
        count = 1
        yield first
        lo = first.rate if first.decision == PASS else 0.0
    if first is not None and first.decision != PASS:
        hi = first.rate  # the answer is below it: bisect
    elif s.bounds.exact:
        hi = limit
        yield Probe(hi, engines, 0, None, None, FAIL,
                    note="at or above the token/slot/memory bound: no policy keeps up "
                         "(Theorem 2, docs/model.md §7.6)")
    else:
        hi = 1.1 * limit if 1.1 * limit > lo else 2 * lo
        top = None if s.hits is None or s.hits.ceiling is None else s.hits.ceiling * engines
        while count < max_probes:
            if top is not None and hi >= top:  # a measured hit's search, under the groups' bound
                hi = top
                yield Probe(hi, engines, 0, None, None, FAIL, note=CEILING)
                break
            p = probe(s.base, hi, engines, s.rules, s.executor, bar, above_bound=True)
            count += 1
            yield p
            if p.decision != PASS:
                break  # the answer is below: bisect (a boundary here has nothing passed)
            lo, hi = hi, 2 * hi
    while count < max_probes and hi - lo > rel_tol * hi:
        if lo == 0.0 and hi < FLOOR * limit:
            return  # nothing passed down to here: a lower rate only takes longer to probe
        rate = (lo + hi) / 2
        p = probe(s.base, rate, engines, s.rules, s.executor, bar,
                  above_bound=not s.bounds.exact and rate > limit)
        count += 1
        yield p
        if p.decision == PASS:
            lo = rate
        elif p.decision == FAIL or lo == 0.0:
            hi = rate  # a boundary with nothing passed: the goodput is below it, look there
        else:
            return


def plan(workload: Traffic, engine: EngineSpec, slo: SLOLike, target: float = 0.9, *,
         mode: str = "joint", reps: int = 5, max_reps: int = 20, n_requests: int = 2000,
         warmup: float = 0.1, rel_tol: float = 0.02, confidence: float = 0.95, seed: int = 0,
         max_probes: int = 30, early_stop: bool = True, engines: int = 1,
         router: str = "jsq-tokens", executor: Optional[Executor] = None,
         progress: Optional[bool] = None, price: Optional[float] = None) -> PlanResult:
    """The goodput of ``engine`` (``engines`` of them behind ``router``) for
    ``workload`` under ``slo`` at ``target`` attainment (docs/model.md §7.7).

    Replications run in this process or on ``executor`` (any
    ``concurrent.futures.Executor``: same result either way); ``progress``
    shows a tqdm bar on stderr (``None``: when stderr is a terminal).  With
    ``price`` ($/GPU-hour) the result carries the cost at the goodput.
    Bad arguments raise ValueError naming the parameter.
    """
    wall = time.perf_counter()
    validation.positive_int("engines", engines)
    limits.check_engines(engines, "the plan's pool")
    if not (isinstance(rel_tol, (int, float)) and 0 < rel_tol < 1):
        raise ValueError(f"rel_tol must be a number in (0, 1), got {rel_tol!r}")
    validation.positive_int("max_probes", max_probes)
    if price is not None:
        validation.nonnegative_number("price", price)
    s = setup(workload, engine, slo, target, mode, reps, max_reps, n_requests, warmup,
              confidence, seed, early_stop, router, executor, progress)
    config = describe(engine, workload, slo, router if engines > 1 else None, n_requests,
                      reps, seed)
    warn(s.fit)  # once, for every replication's engines
    why = infeasibility(s, target)
    if why is not None:
        return PlanResult(0.0, 0.0, 0.0, None, (), s.bounds, target, mode, engines, config,
                          infeasible=True, reason=why, seconds=time.perf_counter() - wall,
                          hits=s.hits, fit=s.fit)
    probes: List[Probe] = []
    with _Bar(progress) as bar:
        first, bounds, hits = first_probe(s.base, s.bounds, s.hits, engines, s.rules,
                                          s.executor, bar)  # a prefix cache's hits, if need be
        s = dataclasses.replace(s, bounds=bounds, hits=hits)
        probes.extend(_search(s, engines, max_probes, rel_tol, bar, first))
    passed = [p for p in probes if p.decision == PASS]
    failed = [p for p in probes if p.decision == FAIL]
    lo = max((p.rate for p in passed), default=0.0)
    hi = min((p.rate for p in failed if p.rate > lo), default=math.inf)
    best = max(passed, key=lambda p: p.rate) if passed else None
    at_lo = at_rate(best) if best is not None else {}
    reason: Optional[str] = None
    if probes and probes[-1].decision == BOUNDARY:
        reason = f"within statistical resolution at {probes[-1].rate:.4g} req/s"
    elif not passed and hi < FLOOR * s.bounds.limit * engines:
        reason = (f"no rate passed down to {hi:.4g} req/s ({FLOOR:g} of the bound "
                  f"{s.bounds.limit * engines:.4g}); the search stops there")
    cost = None
    if price is not None and lo > 0 and best is not None and best.mean is not None:
        cost = Cost.of(engines, engine.tp, price, lo, workload.mean_prefill,
                       workload.mean_decode, min(1.0, best.mean))
    return PlanResult(lo, lo, hi, crossing(probes, target), tuple(probes), s.bounds, target,
                      mode, engines, config, at_lo, cost, False, reason,
                      time.perf_counter() - wall, s.hits, s.fit)
