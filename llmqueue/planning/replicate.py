"""One replication of a probe (docs/model.md §7.7 item 2-3): ``n_warm`` warm-up arrivals,
``n_meas`` measured ones, no more arrivals, then a drain until every measured
request finishes or the drain exceeds its limit; with early stopping, the run
ends as soon as enough measured requests are certain to fail.

The engine files are not touched: this module wires an
:class:`~llmqueue.engine.Engine` (or a :class:`~llmqueue.network.Network`
pool of K engines) to its own feeding process and a **monitor** process that
reads the requests' timestamps at a fixed simulated-time cadence of 100
smallest iterations (so at most every 100 iterations) and judges them
(:mod:`llmqueue.planning.monitor`).  Timestamps read in the middle of a skipped
run of identical iterations may lag; the monitor only counts what is already
certain, so a lag only delays a stop.  With per-class SLOs (a dict class -> SLO
and a :meth:`Traffic.mix`), each measured request is judged by its class's SLO.
With prefix groups (:meth:`Traffic.prefix_groups`) on engines with a prefix
cache, each request carries its content ids, and the run counts its measured
requests' first-start hits (:attr:`Run.hits`); without the cache the same
requests come without ids.  Requests that can never fit the engine's KV cache
(:func:`never_fits`) are not submitted (an engine would reject each on
arrival, with a warning in every replication): they miss every metric from
the start, so a run with too many of them stops before it simulates anything.

:func:`run_replication` is a plain top-level function of a picklable
:class:`Task`, so replications run on any ``concurrent.futures`` executor.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Dict, Generator, List, Optional, Tuple

import numpy as np
import simpy

from llmqueue.common.units import UNLIMITED, to_ticks
from llmqueue.engine.clock import later_this_instant, now_ticks
from llmqueue.engine.first_token import make_early
from llmqueue.engine.prefix_cache import prefix_request
from llmqueue.engine.processes import ROUTING, Engine
from llmqueue.engine.recorder import Recorder
from llmqueue.network.network import Network, Pool
from llmqueue.network.routers import make_router
from llmqueue.planning.spec import EngineSpec, Traffic, arrivals, prompt_ids, request_classes
from llmqueue.policies.builtin import make_policy
from llmqueue.policies.view import Request, output_tokens
from llmqueue.planning.monitor import Monitor, drain_limit, limits
from llmqueue.theory.bounds import smallest_iteration
from llmqueue.theory.drift import edge_slope
from llmqueue.theory.slo import SLOLike

#: Iterations (of the smallest size) between two checks of the monitor.
CHECK_EVERY = 100
#: The drain ends at this many times the largest time threshold.
DRAIN = 10.0


@dataclass(frozen=True)
class Task:
    """Everything one replication needs (picklable)."""

    traffic: Traffic
    engine: EngineSpec
    slo: SLOLike
    rate: float
    replication: int
    seed: int
    n_warm: int
    n_meas: int
    target: float
    mode: str
    early_stop: bool
    engines: int = 1
    router: str = "jsq-tokens"


@dataclass(frozen=True)
class Run:
    """What one replication found.  ``attainment`` is exact, or for a run
    stopped early the upper bound ``U_r``; ``first_half`` / ``second_half`` are
    the joint attainments of the two halves of the window (drift check)."""

    replication: int
    attainment: float
    stopped: bool
    first_half: float
    second_half: float
    backlog_slope: Optional[float]
    simulated_requests: int
    simulated_time: float
    ttft: Tuple[float, ...]
    tpot: Tuple[float, ...]
    busy_fraction: float
    mean_batch: float
    seconds: float
    tbt: Tuple[float, ...] = (math.nan, math.nan, math.nan)
    """p50, p90, p99 of the measured finished requests' largest inter-token gaps (s)."""
    at_target: Tuple[float, ...] = (math.nan, math.nan, math.nan)
    """TTFT, TPOT and largest gap at the quantile ``target`` (s): what quantile
    mode judges (a 0.99 target reads p99)."""
    hits: Optional[Tuple[int, int, int]] = None
    """With a prefix cache: the measured requests that started, their
    first-start hit tokens and their prompt tokens (``None`` without one)."""


def prefix_cached(engine: EngineSpec) -> bool:
    """Whether ``engine`` has a prefix cache (``KV(..., prefix=True)``)."""
    return engine.kv is not None and engine.kv.prefix


def first_hits(requests: List[Request]) -> Tuple[int, int, int]:
    """``(started, hit tokens, prompt tokens)`` of the first starts among ``requests``."""
    started = hits = prompts = 0
    for r in requests:
        hit = getattr(r.memory, "cached", None)
        if hit is not None:
            started, hits, prompts = started + 1, hits + hit, prompts + r.vp
    return started, hits, prompts


def _quantiles(values: List[float], at: Tuple[float, ...] = (0.5, 0.9, 0.99)
               ) -> Tuple[float, ...]:
    if not values:
        return tuple(math.nan for _ in at)
    return tuple(float(x) for x in np.quantile(np.array(values), at))


def _build(task: Task, router_seed: int
           ) -> Tuple[simpy.Environment, List[Engine], Callable[[Request], None]]:
    """The clock, the engines, and ``submit(request)`` for an arrival now."""
    spec = task.engine
    if task.engines == 1:
        env = simpy.Environment()
        recorder = Recorder(spec.bmax if spec.bmax is not None else UNLIMITED, tokens=True)
        engine = Engine(env, make_policy(spec.policy, chunked=spec.chunked), bmax=spec.bmax,
                        kmax=spec.kmax, latency=spec.latency, recorder=recorder, kv=spec.kv)
        if spec.first_token == "prefill":  # the recorder counts the first tokens emitted
            engine.residents.first_tokens = recorder
        return env, [engine], engine.submit
    if spec.first_token == "prefill":
        raise ValueError("first_token='prefill' is planned for one engine; a pool of engines "
                         "runs first_token='decode'")
    if spec.kv is None:
        net = Network(seed=router_seed % (2**32))
        env = net.env
        pool = net.add_replicas("engine", task.engines, task.router, policy=spec.policy,
                                bmax=spec.bmax, kmax=spec.kmax, latency=spec.latency,
                                chunked=spec.chunked)
    else:  # engines with a KV cache, stepped one iteration at a time as a network's are
        env = simpy.Environment()
        members = [Engine(env, make_policy(spec.policy, chunked=spec.chunked), bmax=spec.bmax,
                          kmax=spec.kmax, latency=spec.latency, skip_ahead=False,
                          name=f"engine-{i}", kv=spec.kv,
                          recorder=Recorder(spec.bmax if spec.bmax is not None else UNLIMITED,
                                            tokens=True)) for i in range(task.engines)]
        pool = Pool("engine", members, make_router(task.router, router_seed % (2**32)))

    def submit(r: Request) -> None:
        # route once every event of this instant is settled, as Network.call does
        later_this_instant(env, ROUTING).callbacks.append(lambda _: pool.route(r).submit(r))
    return env, pool.members, submit


def never_fits(engine: EngineSpec, vp: np.ndarray, vd: np.ndarray) -> np.ndarray:
    """Which requests of prompt sizes ``vp`` and output sizes ``vd`` can never
    fit ``engine``'s KV cache (:meth:`~llmqueue.engine.kv.KV.fits_ever`, with
    one output token less where the prefill emits the first): the engine would
    reject them on arrival, so a replication does not submit them and counts
    them as misses of every metric from the start (:mod:`llmqueue.planning.fit`
    says so once per plan, in place of each engine's warning)."""
    kv = engine.kv
    if kv is None:
        return np.zeros(len(vp), dtype=bool)
    cut = 1 if engine.first_token == "prefill" else 0  # make_early: prompts only
    return np.array([not kv.fits_ever(p, d - (cut if p > 0 else 0))
                     for p, d in zip(vp.tolist(), vd.tolist())], dtype=bool)


def run_replication(task: Task) -> Run:
    """Run one replication of ``task`` (see the module docstring)."""
    wall = time.perf_counter()
    n_total = task.n_warm + task.n_meas
    unit, vp, vd, router_seed = arrivals(task.traffic, n_total, task.seed, task.replication)
    classes = request_classes(task.traffic, n_total, task.seed, task.replication)
    cached = prefix_cached(task.engine)
    ids = prompt_ids(task.traffic, vp, task.seed, task.replication) if cached else None
    hash_block = None if task.traffic.groups is None else task.traffic.groups.hash_block
    times = unit / task.rate
    meas = slice(task.n_warm, n_total)
    measured_classes = None if classes is None else classes[meas]
    lims = limits(task.slo, task.engine, vp[meas], vd[meas], measured_classes)
    env, engines, submit = _build(task, router_seed)
    kept: Dict[Request, Tuple[Optional[int], Optional[int]]] = {}
    for e in engines:  # each finished request's figures (every recorder keeps token timing)
        e.recorder.latencies = kept

    def done(r: Request) -> Tuple[Optional[int], Optional[int]]:
        return kept.get(r, (None, None))

    def scheduled(r: Request) -> Optional[int]:
        for e in engines:
            tokens = e.recorder.tokens
            first = None if tokens is None else tokens.scheduled(r)
            if first is not None:
                return first
        return None

    monitor = Monitor(task.n_meas, lims, task.mode, measured_classes, done, scheduled)
    early = task.engine.first_token == "prefill"
    never = never_fits(task.engine, vp, vd)
    monitor.miss(np.flatnonzero(never[meas]))  # certain misses from the start
    cadence = max(1, to_ticks(CHECK_EVERY * smallest_iteration(task.engine.latency)))
    last = to_ticks(float(times[-1]))
    deadline = last + to_ticks(DRAIN * drain_limit(lims, vd[meas]))
    arrived = [0]
    requests: List[Request] = []

    def feed() -> Generator[simpy.Event, object, None]:
        for i, (t, p, d) in enumerate(zip(times.tolist(), vp.tolist(), vd.tolist())):
            at = to_ticks(t)
            if at > env.now:
                yield env.timeout(at - env.now)
            if never[i]:  # an engine would reject it on arrival: it is not simulated
                arrived[0] = i + 1
                continue
            klass = None if classes is None else classes[i]
            r = Request(i, p, d, klass) if ids is None else \
                prefix_request(i, p, d, klass, ids[i], None, hash_block)
            r.arrival = now_ticks(env)  # the engine sets it too (routing waits for the instant)
            submit(make_early(r) if early else r)
            if i >= task.n_warm:
                monitor.open.append((i - task.n_warm, r))
                requests.append(r)
            arrived[0] = i + 1
        # once the last request is routed, a policy that idles on purpose (strict
        # WAIT) is told that nothing more will come, and drains (docs/model.md §6.5)
        later_this_instant(env, ROUTING).callbacks.append(end_arrivals)

    def end_arrivals(_: simpy.Event) -> None:
        for e in engines:
            e.end_arrivals()

    first = to_ticks(float(times[task.n_warm]))
    edges = [first + (last - first) * j // 10 for j in range(11)]
    backlog: List[int] = []

    def sample() -> Generator[simpy.Event, object, None]:
        for edge in edges:
            if edge > env.now:
                yield env.timeout(edge - env.now)
            backlog.append(sum(e.backlog for e in engines))

    stopped = [False]

    def watch() -> Generator[simpy.Event, object, None]:
        if task.early_stop and monitor.below(task.target):  # too many never fit
            stopped[0] = True
            return
        while True:
            yield env.timeout(cadence)
            monitor.check(now_ticks(env))
            if task.early_stop and monitor.below(task.target):
                stopped[0] = True
                return
            if monitor.all_done(arrived[0] - task.n_warm) or env.now >= deadline:
                return

    env.process(feed())
    env.process(sample())
    env.run(until=env.process(watch()))
    end = now_ticks(env)
    monitor.check(end, final=not stopped[0])
    attainment = monitor.attainment()
    half = task.n_meas // 2
    good = monitor.bits == 0
    first_half = float(np.mean(good[:half])) if half else attainment
    second_half = float(np.mean(good[half:]))
    slope = None
    if not stopped[0] and len(backlog) == len(edges):
        slope, _ = edge_slope(edges, backlog)
    ttft = [(r.first_token - r.arrival) / 1e9 for r in requests if r.first_token is not None]
    tpot = [(r.finished - r.first_token) / 1e9 / (output_tokens(r) - 1) for r in requests
            if r.finished is not None and r.first_token is not None and output_tokens(r) > 1]
    gaps = [gap / 1e9 for gap in (done(r)[1] for r in requests) if gap is not None]
    busy = batches = tokens = 0
    for e in engines:
        e.recorder.commit(end)
        busy += e.recorder.busy
        batches += e.recorder.batches
        tokens += e.recorder.decode_tokens + e.recorder.prefill_tokens
    return Run(task.replication, attainment, stopped[0], first_half, second_half, slope,
               arrived[0], end / 1e9, _quantiles(ttft), _quantiles(tpot),
               busy / (len(engines) * end) if end else 0.0,
               tokens / batches if batches else 0.0, time.perf_counter() - wall,
               _quantiles(gaps), tuple(_quantiles(values, (task.target,))[0]
                                       for values in (ttft, tpot, gaps)),
               first_hits(requests) if cached else None)
