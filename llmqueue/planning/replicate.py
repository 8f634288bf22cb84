"""One replication of a probe (SPEC 8.7 item 2-3): ``n_warm`` warm-up arrivals,
``n_meas`` measured ones, no more arrivals, then a drain until every measured
request finishes or the drain exceeds its limit; with early stopping, the run
ends as soon as enough measured requests are certain to fail.

The engine files are not touched: this module wires an
:class:`~llmqueue.engine.Engine` (or a :class:`~llmqueue.network.Network`
pool of K engines) to its own feeding process and a **monitor** process that
reads the requests' timestamps at a fixed simulated-time cadence of 100
smallest iterations (so at most every 100 iterations).  Timestamps read in the
middle of a skipped run of identical iterations may lag; the monitor only
counts what is already certain (no prefill done yet past the TTFT limit, not
finished past the E2E limit, TPOT already over its limit, not scheduled yet
past the scheduling-delay limit; a finished request's largest gap and
scheduling delay come from its engine's recorder), so a lag only delays a
stop.  With per-class SLOs (a dict class -> SLO and a :meth:`Traffic.mix`),
each measured request is judged by its class's SLO; in quantile mode a run's
attainment is the least, over classes and gated metrics, of the share within
the threshold.

:func:`run_replication` is a plain top-level function of a picklable
:class:`Task`, so replications run on any ``concurrent.futures`` executor.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Dict, Generator, Hashable, List, Optional, Sequence, Tuple

import numpy as np
import simpy

from llmqueue.common.units import UNLIMITED, to_ticks
from llmqueue.engine.clock import later_this_instant, now_ticks
from llmqueue.engine.processes import ROUTING, Engine
from llmqueue.engine.recorder import Recorder
from llmqueue.network.network import Network, Pool
from llmqueue.network.routers import make_router
from llmqueue.planning.spec import EngineSpec, Traffic, arrivals, request_classes
from llmqueue.policies.builtin import make_policy
from llmqueue.policies.view import Request
from llmqueue.theory.bounds import smallest_iteration, unloaded_latency
from llmqueue.theory.drift import edge_slope
from llmqueue.theory.slo import METRICS, SLO, SLOLike

#: The metrics ``plan`` gates, bit by bit.
GATED = METRICS
BIT = {m: 1 << i for i, m in enumerate(GATED)}
ALL = (1 << len(GATED)) - 1
#: The unloaded latency each relative threshold multiplies (SPEC 8.6).
UNLOADED = {"ttft": 0, "tpot": 1, "tbt": 2, "e2e": 3}
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
    ttft: Tuple[float, float, float]
    tpot: Tuple[float, float, float]
    busy_fraction: float
    mean_batch: float
    seconds: float
    tbt: Tuple[float, float, float] = (math.nan, math.nan, math.nan)
    """p50, p90, p99 of the measured finished requests' largest inter-token gaps (s)."""


def slo_of(slo: SLOLike, klass: Hashable) -> SLO:
    """The SLO that judges a request of class ``klass``."""
    return slo if isinstance(slo, SLO) else slo[klass]


def limits(slo: SLOLike, engine: EngineSpec, vp: np.ndarray, vd: np.ndarray,
           classes: Optional[Sequence[Hashable]] = None) -> Dict[str, np.ndarray]:
    """Each gated metric's threshold per request, in seconds (+inf where the
    request's SLO does not gate it; relative SLOs: the multiple times the
    request's unloaded latency, SPEC 8.6).  ``classes`` names each request's
    class when ``slo`` is per class."""
    n = len(vp)
    if isinstance(slo, SLO):
        groups = [(slo, np.ones(n, dtype=bool))]
    else:
        labels = [None] * n if classes is None else list(classes)
        groups = [(slo_of(slo, k), np.array([x == k for x in labels], dtype=bool))
                  for k in dict.fromkeys(labels)]
    cache: Dict[Tuple[int, int], Tuple[float, float, float, float]] = {}
    out: Dict[str, np.ndarray] = {}
    for metric in GATED:
        values = np.full(n, math.inf)
        for one, members in groups:
            limit = getattr(one, metric)
            if limit is None:
                continue
            if not one.is_relative:
                values[members] = float(limit)
                continue
            for i in np.flatnonzero(members).tolist():
                key = (int(vp[i]), int(vd[i]))
                if key not in cache:
                    u = unloaded_latency(engine.latency, engine.bmax, *key)
                    cache[key] = (u.ttft, u.tpot or 0.0, u.tbt_max or 0.0, u.e2e)
                values[i] = cache[key][UNLOADED[metric]] * limit
        if np.isfinite(values).any():
            out[metric] = values
    return out


def drain_limit(lims: Dict[str, np.ndarray], vd: np.ndarray) -> float:
    """The largest time threshold (s): of TTFT, E2E and scheduling delay, and
    TPOT or TBT times a request's ``vd - 1`` (the E2E part they limit)."""
    def top(x: np.ndarray) -> float:
        finite = x[np.isfinite(x)]
        return float(finite.max()) if finite.size else 0.0
    spans = [top(lims[m]) for m in ("ttft", "e2e", "sched_delay") if m in lims]
    for m in ("tpot", "tbt"):
        if m in lims:
            spans.append(top(lims[m] * np.maximum(vd - 1, 1)))
    return max(spans)


#: ``(first scheduled, tbt_max)`` ticks of a finished request, and when an
#: unfinished one was first scheduled (None: not yet).
Lookup = Callable[[Request], Tuple[Optional[int], Optional[int]]]
Scheduled = Callable[[Request], Optional[int]]


def _fails(r: Request, lim: Dict[str, float], now: int, final: bool, done: Lookup,
           scheduled: Scheduled) -> int:
    """Bits of the gated metrics ``r`` is already certain to miss at ``now``
    (ticks); ``final``: the run is over, so an unfinished request misses all."""
    bits = 0
    if r.finished is not None:
        if "ttft" in lim and r.first_token is not None and \
                (r.first_token - r.arrival) / 1e9 > lim["ttft"]:
            bits |= BIT["ttft"]
        if "tpot" in lim and r.vd > 1 and r.first_token is not None and \
                (r.finished - r.first_token) / 1e9 / (r.vd - 1) > lim["tpot"]:
            bits |= BIT["tpot"]
        if "e2e" in lim and (r.finished - r.arrival) / 1e9 > lim["e2e"]:
            bits |= BIT["e2e"]
        if "tbt" in lim or "sched_delay" in lim:
            first, gap = done(r)
            if "tbt" in lim and gap is not None and gap / 1e9 > lim["tbt"]:
                bits |= BIT["tbt"]
            if "sched_delay" in lim and first is not None and \
                    (first - r.arrival) / 1e9 > lim["sched_delay"]:
                bits |= BIT["sched_delay"]
        return bits
    if final:
        return ALL
    age = (now - r.arrival) / 1e9
    if "ttft" in lim and r.prefill_done is None and age > lim["ttft"]:
        bits |= BIT["ttft"]
    if "tpot" in lim and r.vd > 1 and r.first_token is not None and \
            (now - r.first_token) / 1e9 / (r.vd - 1) > lim["tpot"]:
        bits |= BIT["tpot"]
    if "e2e" in lim and age > lim["e2e"]:
        bits |= BIT["e2e"]
    # a prompt's first chunk is stamped when its iteration starts (a request
    # without prompt only once its first decode is applied: judged at its end)
    if "sched_delay" in lim and r.vp and age > lim["sched_delay"] and scheduled(r) is None:
        bits |= BIT["sched_delay"]
    return bits


class _Monitor:
    """The measured requests' verdicts, updated at each check."""

    def __init__(self, n_meas: int, lims: Dict[str, np.ndarray], mode: str,
                 classes: Optional[Sequence[Hashable]], done: Lookup,
                 scheduled: Scheduled) -> None:
        self.n = n_meas
        self.lims = lims
        self.mode = mode
        self.done = done
        self.scheduled = scheduled
        self.bits = np.zeros(n_meas, dtype=np.int64)
        self.decided = np.zeros(n_meas, dtype=bool)
        names = list(lims)
        columns = [lims[m].tolist() for m in names]
        #: each measured request's thresholds, by metric (those it gates)
        self.limit: List[Dict[str, float]] = [
            {m: x for m, x in zip(names, row) if x != math.inf} for row in zip(*columns)]
        #: quantile mode's groups: (members, metrics gated for them), one per class
        labels = [None] * n_meas if classes is None else list(classes)
        self.groups: List[Tuple[np.ndarray, List[str]]] = []
        for klass in dict.fromkeys(labels):
            members = np.array([x == klass for x in labels], dtype=bool)
            gated = [m for m in names if np.isfinite(lims[m][members]).any()]
            self.groups.append((members, gated))
        self.open: List[Tuple[int, Request]] = []

    def check(self, now: int, final: bool = False) -> None:
        """Update the verdicts of the open requests."""
        still = []
        for j, r in self.open:
            bits = _fails(r, self.limit[j], now, final, self.done, self.scheduled)
            self.bits[j] |= bits
            if r.finished is not None or final:
                self.decided[j] = True
            else:
                still.append((j, r))
        self.open = still

    def attainment(self) -> float:
        """The run's attainment so far, an upper bound until every measured
        request is decided: the share of requests with no failed metric (joint)
        or the least share within one gated metric of one class (quantile)."""
        if self.mode == "joint":
            return 1.0 - int(np.count_nonzero(self.bits)) / self.n
        return min(1.0 - int(np.count_nonzero(self.bits[members] & BIT[m])) / int(members.sum())
                   for members, gated in self.groups for m in gated)

    def below(self, target: float) -> bool:
        """Whether more measured requests already fail than ``target`` allows
        (in quantile mode: in some class, for some metric)."""
        if self.mode == "joint":
            return int(np.count_nonzero(self.bits)) > allowed_failures(target, self.n)
        return any(int(np.count_nonzero(self.bits[members] & BIT[m]))
                   > allowed_failures(target, int(members.sum()))
                   for members, gated in self.groups for m in gated)

    def all_done(self, arrived: int) -> bool:
        """Every measured request has arrived and been decided."""
        return arrived >= self.n and not self.open


def allowed_failures(target: float, n_meas: int) -> float:
    """``(1 - target) n_meas``, rounded to 9 decimals (0.1 * 300 is 30, not
    29.999999999999993): a run stops once more measured requests fail."""
    return round((1 - target) * n_meas, 9)


def _quantiles(values: List[float]) -> Tuple[float, float, float]:
    if not values:
        return (math.nan, math.nan, math.nan)
    q = np.quantile(np.array(values), [0.5, 0.9, 0.99])
    return (float(q[0]), float(q[1]), float(q[2]))


def _build(task: Task, router_seed: int
           ) -> Tuple[simpy.Environment, List[Engine], Callable[[Request], None]]:
    """The clock, the engines, and ``submit(request)`` for an arrival now."""
    spec = task.engine
    if task.engines == 1:
        env = simpy.Environment()
        recorder = Recorder(spec.bmax if spec.bmax is not None else UNLIMITED)
        engine = Engine(env, make_policy(spec.policy, chunked=spec.chunked), bmax=spec.bmax,
                        kmax=spec.kmax, latency=spec.latency, recorder=recorder, kv=spec.kv)
        return env, [engine], engine.submit
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
                          name=f"engine-{i}", kv=spec.kv) for i in range(task.engines)]
        pool = Pool("engine", members, make_router(task.router, router_seed % (2**32)))

    def submit(r: Request) -> None:
        # route once every event of this instant is settled, as Network.call does
        later_this_instant(env, ROUTING).callbacks.append(lambda _: pool.route().submit(r))
    return env, pool.members, submit


def run_replication(task: Task) -> Run:
    """Run one replication of ``task`` (see the module docstring)."""
    wall = time.perf_counter()
    n_total = task.n_warm + task.n_meas
    unit, vp, vd, router_seed = arrivals(task.traffic, n_total, task.seed, task.replication)
    classes = request_classes(task.traffic, n_total, task.seed, task.replication)
    times = unit / task.rate
    meas = slice(task.n_warm, n_total)
    measured_classes = None if classes is None else classes[meas]
    lims = limits(task.slo, task.engine, vp[meas], vd[meas], measured_classes)
    env, engines, submit = _build(task, router_seed)
    kept: Dict[Request, Tuple[Optional[int], Optional[int]]] = {}
    for e in engines:
        e.recorder.latencies = kept  # the recorders keep each finished request's figures

    def done(r: Request) -> Tuple[Optional[int], Optional[int]]:
        return kept.get(r, (None, None))

    def scheduled(r: Request) -> Optional[int]:
        for e in engines:
            first = e.recorder.tokens.scheduled(r)
            if first is not None:
                return first
        return None

    monitor = _Monitor(task.n_meas, lims, task.mode, measured_classes, done, scheduled)
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
            r = Request(i, p, d, None if classes is None else classes[i])
            r.arrival = now_ticks(env)  # the engine sets it too (routing waits for the instant)
            submit(r)
            if i >= task.n_warm:
                monitor.open.append((i - task.n_warm, r))
                requests.append(r)
            arrived[0] = i + 1

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
    tpot = [(r.finished - r.first_token) / 1e9 / (r.vd - 1) for r in requests
            if r.finished is not None and r.first_token is not None and r.vd > 1]
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
               _quantiles(gaps))
