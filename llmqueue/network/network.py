"""Many engines in one SimPy environment (SPEC 6.3, 6.4).

A :class:`Network` holds named :class:`~llmqueue.engine.Engine` objects, each
with its own GPU resource, kmax pool, policy and latency model, and named
*pools* of replicas behind a router.  Requests reach a target (an engine or a
pool) from a workload (:meth:`Network.feed`) or from agent workflows
(:mod:`llmqueue.workflows`); :meth:`Network.run` runs them all on one clock and
returns a :class:`NetworkResult` with a :class:`~llmqueue.simulate.Result` per
engine and one for the whole network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import (Any, Callable, Dict, Generator, Hashable, Iterable, List, Optional, Sequence,
                    Tuple, TypeVar)

import numpy as np
import simpy

from llmqueue.common import limits, validation
from llmqueue.common.units import TICKS_PER_SECOND, UNLIMITED, to_ticks
from llmqueue.engine.clock import fail_quietly, later_this_instant, now_ticks, wait_until
from llmqueue.engine.kv import KV
from llmqueue.engine.kv_invariants import asked as invariants_asked
from llmqueue.engine.kv_recorder import KVBatch, MemoryRecorder, memory_figures
from llmqueue.engine.kv_residents import MemoryResidents
from llmqueue.engine.processes import ROUTING, Engine
from llmqueue.engine.recorder import Recorder
from llmqueue.engine.results import Batch, Result, Summary
from llmqueue.models.latency import LatencyModel
from llmqueue.models.workload import Arrival, as_workload
from llmqueue.network.classes import by_class
from llmqueue.network.routers import Router, make_router
from llmqueue.policies.builtin import make_policy
from llmqueue.policies.view import Request
from llmqueue.theory import capacity as theory
from llmqueue.theory.shapes import MeanContext, by_batch_size

T = TypeVar("T")


def capacity(engine: Engine) -> Optional[float]:
    """Most tokens per second ``engine`` can serve, ``bmax / t_bmax`` (SPEC 6.2);
    ``None`` without a budget.  A latency model not of the batch size alone
    (the roofline) is read at the mix and mean contexts of the requests that
    arrived (:class:`~llmqueue.theory.shapes.MeanContext`: a prefilled prompt
    is context, not work), approximately; ``None`` before any arrived."""
    if engine.bmax is None:
        return None
    latency = engine.latency
    if not by_batch_size(latency):
        count, prompt, prefill, decode = engine.recorder.sizes
        if not count:
            return None
        latency = MeanContext(latency, prefill / count, decode / count, prompt / count)
    return theory.token_capacity(engine.bmax, latency)


@dataclass
class Pool:
    """Replicas behind a router: each request goes to the one it picks."""

    name: str
    members: List[Engine]
    router: Router

    def route(self) -> Engine:
        """The replica that takes a request arriving now."""
        return self.members[self.router.choose(self.members)]


class Network:
    """Named engines and pools on one SimPy clock.

    ``batches`` keeps each engine's batch log; the pending/backlog series and
    the request log are always kept (totals and per-class figures need them).
    """

    def __init__(self, seed: int = 0, batches: bool = False) -> None:
        self.env = simpy.Environment()
        self.seed = validation.seed("seed", seed)
        self.batches = batches
        self.engines: Dict[str, Engine] = {}
        self.pools: Dict[str, Pool] = {}
        self.until: Optional[int] = None
        self.end: Optional[int] = None
        #: (rate, count, initial) of each source, checked against the run size limit
        self._sources: List[Tuple[Optional[float], Optional[int], int]] = []

    # -- building --------------------------------------------------------
    def add_engine(self, name: str, policy: object = "sarathi", *, bmax: Optional[int] = 128,
                   kmax: Optional[int] = 100, latency: Optional[LatencyModel] = None,
                   chunked: bool = True, kv: Optional[KV] = None) -> Engine:
        """A new engine called ``name`` with its own policy, budget, slots and
        latency model (``policy`` as :func:`~llmqueue.make_policy` takes it),
        and its own KV cache when ``kv`` is given (SPEC 7: its result then
        carries the memory figures).  A network holds at most
        :data:`~llmqueue.common.limits.MAX_ENGINES` engines."""
        self._new_name(name)
        limits.check_engines(len(self.engines) + 1)
        recorder = Recorder(bmax if bmax is not None else UNLIMITED, batches=self.batches,
                            requests=True, timeseries=True)
        if kv is not None:
            recorder.memory = MemoryRecorder(kv, batches=self.batches)
        # engines of a network step one iteration at a time: a skipped run's single
        # timeout would be ordered differently among other engines' events at the
        # instant it ends, changing who reaches the next engine first
        engine = Engine(self.env, make_policy(policy, chunked=chunked), bmax=bmax, kmax=kmax,
                        latency=latency, recorder=recorder, skip_ahead=False, name=name, kv=kv,
                        check_invariants=invariants_asked())
        self.engines[name] = engine
        return engine

    def add_pool(self, name: str, members: Sequence[str], router: object = "jsq-tokens",
                 seed: Optional[int] = None) -> Pool:
        """A pool ``name`` routing over the engines ``members`` with ``router``
        (a name of :mod:`llmqueue.routers` or a Router; seeded from the
        network's seed unless ``seed`` is given)."""
        self._new_name(name)
        if not members:
            raise ValueError(f"pool {name!r} needs at least one member engine, got none")
        if len(set(members)) < len(members):
            raise ValueError(f"pool {name!r} names an engine twice: {list(members)!r}; "
                             "allowed: each engine once")
        engines = [self._engine(m) for m in members]
        pool = Pool(name, engines, make_router(router, self.seed if seed is None else seed))
        self.pools[name] = pool
        return pool

    def add_replicas(self, name: str, count: int, router: object = "jsq-tokens",
                     **engine: Any) -> Pool:
        """``count`` identical engines ``name-0 .. name-(count-1)`` and a pool
        ``name`` over them; ``engine`` holds :meth:`add_engine`'s keywords (a
        ``kv`` gives each replica a cache of its own)."""
        validation.positive_int("engines", count)
        limits.check_engines(len(self.engines) + count)
        members = [self.add_engine(f"{name}-{i}", **engine).name for i in range(count)]
        return self.add_pool(name, members, router)

    def _new_name(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        if name in self.engines or name in self.pools:
            raise ValueError(f"name {name!r} is already an engine or pool of this network")

    def _engine(self, name: str) -> Engine:
        if name not in self.engines:
            raise ValueError(f"engine must be one of {', '.join(self.engines) or '(none yet)'}; "
                             f"got {name!r}")
        return self.engines[name]

    # -- traffic ---------------------------------------------------------
    def route(self, target: str) -> Engine:
        """The engine a request for ``target`` (an engine or a pool) goes to now."""
        pool = self.pools.get(target)
        if pool is not None:
            return pool.route()
        if target in self.engines:
            return self.engines[target]
        raise ValueError(f"target must be one of {', '.join([*self.engines, *self.pools])}; "
                         f"got {target!r}")

    def call(self, target: str, vp: int, vd: int, klass: Hashable = None,
             routed: Optional[Callable[[Engine], None]] = None, *,
             prefilled: bool = False) -> simpy.Event:
        """Send a request to ``target`` now; the event fires with its
        :class:`Request` when its last token is done, and ``routed`` (if
        given) learns which engine took it.  ``prefilled``: its prompt's KV
        arrives with it (:meth:`Engine.call`).

        A pool routes the request once everything else of this instant has
        happened (iteration ends, releases, admissions), so its router reads
        settled engines, and before any engine chooses its next batch."""
        if target not in self.pools:
            engine = self.route(target)
            if routed is not None:
                routed(engine)
            return engine.call(vp, vd, klass, prefilled=prefilled)
        done = self.env.event()

        def send(_: simpy.Event) -> None:
            engine = self.route(target)
            if routed is not None:
                routed(engine)

            def finish(finished: simpy.Event) -> None:
                if finished.ok:
                    done.succeed(finished.value)
                else:  # it can never fit the engine's cache (Engine.call)
                    fail_quietly(done, finished.value)  # type: ignore[arg-type]

            engine.call(vp, vd, klass, prefilled=prefilled).callbacks.append(finish)

        later_this_instant(self.env, ROUTING).callbacks.append(send)
        return done

    def feed(self, target: str, arrivals: Iterable[Arrival]) -> None:
        """Send the arrivals of a workload to ``target`` at their times."""
        self.route(target)  # fail now on an unknown name
        arrivals = as_workload(arrivals)  # a plain list of rows too
        self.source(getattr(arrivals, "rate", None), getattr(arrivals, "count", None),
                    getattr(arrivals, "initial", 0))
        self.env.process(self._feed(target, arrivals))

    def _feed(self, target: str, arrivals: Iterable[Arrival]
              ) -> Generator[simpy.Event, object, None]:
        for arrival in arrivals:
            if not (yield from wait_until(self.env, arrival[0], self.until, "arrival times")):
                return
            self.call(target, arrival[1], arrival[2], arrival[3] if len(arrival) > 3 else None)

    def combine(self, names: Sequence[str]) -> Result:
        """After :meth:`run`: the engines ``names`` (or a pool's name) as one Result."""
        if self.end is None:
            raise ValueError("combine needs a finished run; call run() first")
        engines: List[Engine] = []
        for name in names:
            engines.extend(self.pools[name].members if name in self.pools
                           else [self._engine(name)])
        return combine(engines, self.end)

    def source(self, rate: Optional[float], count: Optional[int], initial: int = 0) -> None:
        """Note a source of ``rate`` arrivals (or jobs) per second, or of
        ``count`` in all (``None``: it never stops by itself, and a run then
        needs a horizon), which :meth:`run` checks against the requests-per-run
        limit before it starts."""
        self._sources.append((rate, count, initial))

    # -- running ---------------------------------------------------------
    def run(self, horizon: Optional[float] = None) -> "NetworkResult":
        """Run until ``horizon`` seconds, or until every request has finished."""
        if not self.engines:
            raise ValueError("a network needs at least one engine to run (add_engine or "
                             "add_replicas); got none")
        if horizon is not None:
            validation.gap_seconds("horizon", horizon)
            self.until = to_ticks(horizon)
        elif any(count is None for _, count, _ in self._sources):  # an endless source
            raise ValueError("horizon must be given for an endless arrival stream "
                             "(or give the workload a count)")
        horizon_s = None if self.until is None else self.until / TICKS_PER_SECOND
        for rate, count, initial in self._sources:
            limits.check_requests(rate, horizon_s, count, initial)
        for engine in self.engines.values():
            engine.until = self.until
        self.env.run(until=self.until)
        while self.until is None and self._drain():
            self.env.run()
        end = self.until if self.until is not None else now_ticks(self.env)
        results = {name: _engine_result(e, end) for name, e in self.engines.items()}
        self.end = end
        total = combine(list(self.engines.values()), end)
        return NetworkResult(results, total, end)


    def _drain(self) -> bool:
        """A run without horizon has nothing left to do, but engines that idle
        on purpose (WAIT) still hold residents: no arrival can wake them, so
        their arrivals are over and they drain (SPEC 7.5: a fixed-count run
        never hangs).  Whether any was woken."""
        idle = [e for e in self.engines.values()
                if e.kv is not None and len(e.residents) and not e.arrivals_over]
        for engine in idle:
            engine.end_arrivals()
        return bool(idle)


def _engine_result(engine: Engine, end: int) -> Result:
    recorder = engine.recorder
    recorder.close(end)
    if isinstance(engine.residents, MemoryResidents):
        engine.residents.book_areas()
    log = _kept(recorder.request_log)
    log.extend(engine.residents)
    log.extend(engine.waiting)
    summary = recorder.summary(end, waiting=len(engine.waiting),
                               residents=len(engine.residents))
    summary = summary.with_figures(**_load(summary, capacity(engine), recorder))
    params = {"engine": engine.name, "scheduler": engine.policy.name, "bmax": engine.bmax,
              "kmax": engine.kmax, "latency": repr(engine.latency)}
    memory = recorder.memory
    if memory is not None:
        params["kv"] = repr(engine.kv)
        summary = summary.with_figures(**memory_figures([recorder], end))
    return Result(summary, params, recorder.batch_log, recorder.request_log, recorder.series,
                  kv_log=memory.log if memory is not None else None)


def _load(summary: Summary, cap: Optional[float], recorder: Recorder
          ) -> Dict[str, Optional[float]]:
    """Offered token rate (tokens that arrived per second) against capacity."""
    seconds = summary["duration"]
    arrived = recorder.decode_tokens + recorder.prefill_tokens + recorder.backlog
    offered = arrived / seconds if seconds else None
    return {"capacity_tokens_per_s": cap, "offered_tokens_per_s": offered,
            "load": offered / cap if cap and offered is not None else None}


_ADDITIVE = ("arrivals", "completed", "pending", "backlog", "_pending_area", "_backlog_area",
             "batches", "decode_batches", "decode_tokens", "prefill_tokens", "mixed",
             "decode_only", "prefill_only", "busy", "wc_violations")


def combine(engines: List[Engine], end: int) -> Result:
    """Several engines (of a finished run) as one Result: sums of their counts and
    integrals, maxima of the summed pending/backlog series, pooled latencies;
    ``busy_fraction`` is the mean over engines and ``load`` is against the
    summed capacity.  Its request and batch logs are the engines' merged (request
    ids are per engine, so they repeat across engines)."""
    total = Recorder(1)
    for engine in engines:
        rec = engine.recorder
        for key in _ADDITIVE:
            setattr(total, key, getattr(total, key) + getattr(rec, key))
        total.ttft.extend(rec.ttft)
        total.tpot.extend(rec.tpot)
        total.e2e.extend(rec.e2e)
    series = merge_series([_kept(e.recorder.series) for e in engines])
    held = [row for row in series if row[0] < end]
    total.pending_max = max([p for _, p, _ in held] + [total.pending])
    total.backlog_max = max([b for _, _, b in held] + [total.backlog])
    waiting = sum(len(e.waiting) for e in engines)
    residents = sum(len(e.residents) for e in engines)
    summary = total.summary(end, waiting=waiting, residents=residents)
    if summary.busy_fraction is not None:
        summary = summary.with_figures(busy_fraction=summary.busy_fraction / len(engines))
    caps = [capacity(e) for e in engines]
    known = [c for c in caps if c is not None]
    cap = None if len(known) < len(caps) else sum(known)
    summary = summary.with_figures(**_load(summary, cap, total))
    caches = [e for e in engines if e.kv is not None]
    if caches:  # the engines with a cache together (ignored requests close the count)
        summary = summary.with_figures(**memory_figures([e.recorder for e in caches], end))
    requests: List[Request] = [r for e in engines for r in _kept(e.recorder.request_log)]
    batches, kv_log = _batches(engines)
    return Result(summary, {"engines": [e.name for e in engines]}, batches, requests, series,
                  kv_log=kv_log)


def _batches(engines: Sequence[Engine]) -> Tuple[Optional[List[Batch]], Optional[List[KVBatch]]]:
    """The engines' batch logs merged by start time (``None`` unless every engine
    keeps one), and, when every engine has a cache, their KV rows beside them."""
    logs = [e.recorder.batch_log for e in engines]
    kv_logs = [e.recorder.memory.log if e.recorder.memory is not None else None
               for e in engines]
    kept = [log for log in logs if log is not None]
    if len(kept) < len(logs):
        return None, None
    kv_kept = [kvs for kvs in kv_logs if kvs is not None]
    if len(kv_kept) < len(kv_logs):
        return sorted((row for log in kept for row in log), key=lambda row: row[0]), None
    rows = sorted((pair for log, kvs in zip(kept, kv_kept) for pair in zip(log, kvs)),
                  key=lambda pair: pair[0][0])
    return [row for row, _ in rows], [kv for _, kv in rows]


def _kept(log: Optional[List[T]]) -> List[T]:
    """A log every engine of a network keeps (:meth:`Network.add_engine` asks
    its recorder for the request log and the series)."""
    assert log is not None
    return log


def merge_series(parts: Sequence[List[Tuple[int, int, int]]]) -> List[Tuple[int, int, int]]:
    """The sum of several ``(time, pending, backlog)`` step functions, a row at
    each time any of them changes."""
    arrays = [np.array(p, dtype=np.int64).reshape(-1, 3) for p in parts]
    times = np.unique(np.concatenate([a[:, 0] for a in arrays]))
    pending = np.zeros(len(times), dtype=np.int64)
    backlog = np.zeros(len(times), dtype=np.int64)
    for a in arrays:
        if not len(a):
            continue
        idx = np.searchsorted(a[:, 0], times, side="right") - 1
        seen = idx >= 0
        pending[seen] += a[idx[seen], 1]
        backlog[seen] += a[idx[seen], 2]
    return list(zip(times.tolist(), pending.tolist(), backlog.tolist()))


@dataclass
class NetworkResult:
    """What a network run produced: a Result per engine and one in total."""

    engines: Dict[str, Result]
    total: Result
    end: int

    def rows(self, prefix: str = "") -> List[Tuple[str, Result]]:
        """``(label, Result)`` rows for the CLI: each engine, then ``total``."""
        return [(prefix + name, r) for name, r in self.engines.items()] + \
            [(prefix + "total", self.total)]

    def by_class(self) -> Dict[Hashable, Dict[str, Any]]:
        """Per-class figures over every request of the network."""
        return by_class(_kept(self.total.request_log), self.end)
