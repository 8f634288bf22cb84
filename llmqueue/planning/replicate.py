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
finished past the E2E limit, TPOT already over its limit), so a lag only
delays a stop.

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
from llmqueue.engine.processes import ROUTING, Engine
from llmqueue.engine.recorder import Recorder
from llmqueue.network.network import Network
from llmqueue.planning.spec import EngineSpec, Traffic, arrivals
from llmqueue.policies.builtin import make_policy
from llmqueue.policies.view import Request
from llmqueue.theory.bounds import smallest_iteration, unloaded_latency
from llmqueue.theory.drift import edge_slope
from llmqueue.theory.slo import SLO

#: The metrics ``plan`` gates (from the request log), bit by bit.
GATED = ("ttft", "tpot", "e2e")
BIT = {"ttft": 1, "tpot": 2, "e2e": 4}
ALL = 7
#: Iterations (of the smallest size) between two checks of the monitor.
CHECK_EVERY = 100
#: The drain ends at this many times the largest time threshold.
DRAIN = 10.0


@dataclass(frozen=True)
class Task:
    """Everything one replication needs (picklable)."""

    traffic: Traffic
    engine: EngineSpec
    slo: SLO
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


def limits(slo: SLO, engine: EngineSpec, vp: np.ndarray, vd: np.ndarray
           ) -> Dict[str, np.ndarray]:
    """Each gated metric's threshold per request, in seconds (relative SLOs:
    the multiple times the request's unloaded latency, SPEC 8.6)."""
    out: Dict[str, np.ndarray] = {}
    gated = slo.gated
    cache: Dict[Tuple[int, int], Tuple[float, float, float]] = {}
    for metric in GATED:
        if metric not in gated:
            continue
        if not slo.is_relative:
            out[metric] = np.full(len(vp), float(gated[metric]))
            continue
        values = np.empty(len(vp))
        for i, (p, d) in enumerate(zip(vp.tolist(), vd.tolist())):
            if (p, d) not in cache:
                u = unloaded_latency(engine.latency, engine.bmax, p, d)
                cache[(p, d)] = (u.ttft, u.tpot or 0.0, u.e2e)
            values[i] = cache[(p, d)][GATED.index(metric)] * gated[metric]
        out[metric] = values
    return out


def drain_limit(lims: Dict[str, np.ndarray], vd: np.ndarray) -> float:
    """The largest time threshold (s): of TTFT and E2E, and TPOT times a
    request's ``vd - 1`` (the E2E part that TPOT limits)."""
    spans = [float(lims[m].max()) for m in ("ttft", "e2e") if m in lims]
    if "tpot" in lims:
        spans.append(float((lims["tpot"] * np.maximum(vd - 1, 1)).max()))
    return max(spans)


def _fails(r: Request, lim: Dict[str, float], now: int, final: bool) -> int:
    """Bits of the gated metrics ``r`` is already certain to miss at ``now``
    (ticks); ``final``: the run is over, so an unfinished request misses all."""
    bits = 0
    if r.finished is not None:
        if "ttft" in lim and r.first_token is not None and \
                (r.first_token - r.arrival) / 1e9 > lim["ttft"]:
            bits |= 1
        if "tpot" in lim and r.vd > 1 and r.first_token is not None and \
                (r.finished - r.first_token) / 1e9 / (r.vd - 1) > lim["tpot"]:
            bits |= 2
        if "e2e" in lim and (r.finished - r.arrival) / 1e9 > lim["e2e"]:
            bits |= 4
        return bits
    if final:
        return ALL
    age = (now - r.arrival) / 1e9
    if "ttft" in lim and r.prefill_done is None and age > lim["ttft"]:
        bits |= 1
    if "tpot" in lim and r.vd > 1 and r.first_token is not None and \
            (now - r.first_token) / 1e9 / (r.vd - 1) > lim["tpot"]:
        bits |= 2
    if "e2e" in lim and age > lim["e2e"]:
        bits |= 4
    return bits


class _Monitor:
    """The measured requests' verdicts, updated at each check."""

    def __init__(self, n_meas: int, lims: Dict[str, np.ndarray], mode: str) -> None:
        self.n = n_meas
        self.lims = lims
        self.mode = mode
        self.bits = np.zeros(n_meas, dtype=np.int64)
        self.decided = np.zeros(n_meas, dtype=bool)
        names = list(lims)
        columns = [lims[m].tolist() for m in names]
        #: each measured request's thresholds, by metric
        self.limit: List[Dict[str, float]] = [dict(zip(names, row)) for row in zip(*columns)]
        self.open: List[Tuple[int, Request]] = []

    def check(self, now: int, final: bool = False) -> None:
        """Update the verdicts of the open requests."""
        still = []
        for j, r in self.open:
            bits = _fails(r, self.limit[j], now, final)
            self.bits[j] |= bits
            if r.finished is not None or final:
                self.decided[j] = True
            else:
                still.append((j, r))
        self.open = still

    def failed(self) -> int:
        """Measured requests certain to fail: any metric (joint) or, in quantile
        mode, the most failing one metric."""
        if self.mode == "joint":
            return int(np.count_nonzero(self.bits))
        return max(int(np.count_nonzero(self.bits & BIT[m])) for m in self.lims)

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
                        kmax=spec.kmax, latency=spec.latency, recorder=recorder)
        return env, [engine], engine.submit
    net = Network(seed=router_seed % (2**32))
    env = net.env
    pool = net.add_replicas("engine", task.engines, task.router, policy=spec.policy,
                            bmax=spec.bmax, kmax=spec.kmax, latency=spec.latency,
                            chunked=spec.chunked)

    def submit(r: Request) -> None:
        # route once every event of this instant is settled, as Network.call does
        later_this_instant(env, ROUTING).callbacks.append(lambda _: pool.route().submit(r))
    return env, pool.members, submit


def run_replication(task: Task) -> Run:
    """Run one replication of ``task`` (see the module docstring)."""
    wall = time.perf_counter()
    n_total = task.n_warm + task.n_meas
    unit, vp, vd, router_seed = arrivals(task.traffic, n_total, task.seed, task.replication)
    times = unit / task.rate
    meas = slice(task.n_warm, n_total)
    lims = limits(task.slo, task.engine, vp[meas], vd[meas])
    monitor = _Monitor(task.n_meas, lims, task.mode)
    env, engines, submit = _build(task, router_seed)
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
            r = Request(i, p, d)
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
            if task.early_stop and monitor.failed() > allowed_failures(task.target, task.n_meas):
                stopped[0] = True
                return
            if monitor.all_done(arrived[0] - task.n_warm) or env.now >= deadline:
                return

    env.process(feed())
    env.process(sample())
    env.run(until=env.process(watch()))
    end = now_ticks(env)
    monitor.check(end, final=not stopped[0])
    failed = monitor.failed()
    attainment = 1.0 - failed / task.n_meas
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
    busy = batches = tokens = 0
    for e in engines:
        e.recorder.commit(end)
        busy += e.recorder.busy
        batches += e.recorder.batches
        tokens += e.recorder.decode_tokens + e.recorder.prefill_tokens
    return Run(task.replication, attainment, stopped[0], first_half, second_half, slope,
               arrived[0], end / 1e9, _quantiles(ttft), _quantiles(tpot),
               busy / (len(engines) * end) if end else 0.0,
               tokens / batches if batches else 0.0, time.perf_counter() - wall)
