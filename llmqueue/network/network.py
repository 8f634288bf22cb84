"""Many engines in one SimPy environment (docs/model.md §9.3, §9.4).

A :class:`Network` holds named :class:`~llmqueue.engine.Engine` objects, each
with its own GPU resource, kmax pool, policy and latency model, and named
*pools* of replicas behind a router.  Requests reach a target (an engine or a
pool) from a workload (:meth:`Network.feed`), from multi-turn sessions
(:meth:`Network.feed_sessions`) or from agent workflows
(:mod:`llmqueue.workflows`); a pool's router reads the request it routes
(:meth:`Network.send`: with its prefix ids and session, docs/model.md §8.6).
:meth:`Network.run` runs them all on one clock and returns a
:class:`~llmqueue.network.results.NetworkResult` with a
:class:`~llmqueue.simulate.Result` per engine and one for the whole network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import (Any, Callable, Dict, Generator, Hashable, Iterable, List, Optional, Sequence,
                    Tuple)

import simpy

from llmqueue.common import limits, progress, validation
from llmqueue.common.units import TICKS_PER_SECOND, UNLIMITED, to_ticks
from llmqueue.engine.clock import fail_quietly, later_this_instant, now_ticks, wait_until
from llmqueue.engine.kv import KV
from llmqueue.engine.kv_invariants import asked as invariants_asked
from llmqueue.engine.kv_recorder import MemoryRecorder
from llmqueue.engine.prefix_cache import prefix_request
from llmqueue.engine.processes import ROUTING, Engine
from llmqueue.engine.recorder import Recorder
from llmqueue.engine.results import Result
from llmqueue.engine.sessions import SessionLog, feed_sessions
from llmqueue.models.latency import LatencyModel
from llmqueue.models.sessions import Session
from llmqueue.models.workload import Arrival, as_workload
from llmqueue.network.results import NetworkResult, capacity, combine, engine_result, merge_series
from llmqueue.network.routers import Router, make_router
from llmqueue.policies.builtin import make_policy
from llmqueue.policies.view import Request

__all__ = ["Network", "NetworkResult", "Pool", "capacity", "combine", "merge_series"]


@dataclass
class Pool:
    """Replicas behind a router: each request goes to the one it picks."""

    name: str
    members: List[Engine]
    router: Router

    def __post_init__(self) -> None:
        env = self.members[0].env
        self.router.attach(lambda: now_ticks(env))  # routers that keep snapshots read time

    def route(self, request: Optional[Request] = None) -> Engine:
        """The replica that takes ``request``, arriving now."""
        return self.members[self.router.choose(self.members, request)]


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
        and its own KV cache when ``kv`` is given (docs/model.md §6: its result then
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
    def route(self, target: str, request: Optional[Request] = None) -> Engine:
        """The engine ``request`` (``None``: any) for ``target`` (an engine or
        a pool) goes to now."""
        pool = self.pools.get(target)
        if pool is not None:
            return pool.route(request)
        if target in self.engines:
            return self.engines[target]
        raise ValueError(f"target must be one of {', '.join([*self.engines, *self.pools])}; "
                         f"got {target!r}")

    def call(self, target: str, vp: int, vd: int, klass: Hashable = None,
             routed: Optional[Callable[[Engine], None]] = None, *,
             prefilled: bool = False) -> simpy.Event:
        """Send a request of ``vp`` prefill and ``vd`` decode tokens to
        ``target`` now: :meth:`send` of a new :class:`Request`.  ``prefilled``:
        its prompt's KV arrives with it (:meth:`Engine.call`)."""
        return self.send(target, Request(None, vp, vd, klass, prefilled=prefilled), routed)

    def send(self, target: str, r: Request,
             routed: Optional[Callable[[Engine], None]] = None) -> simpy.Event:
        """Send the request ``r`` (made by the caller: a
        :class:`~llmqueue.engine.prefix_cache.PrefixRequest` carries its ids
        to the router and the engine) to ``target`` now; the event fires with
        ``r`` when its last token is done, or fails with
        :class:`~llmqueue.engine.errors.RequestIgnored` if it can never fit
        the engine's cache; ``routed`` (if given) learns which engine took it.
        A request without an id (``rid`` None) gets the engine's arrival
        number, as :meth:`Engine.call` numbers them.

        A pool routes the request once everything else of this instant has
        happened (iteration ends, releases, admissions), so its router reads
        settled engines, and before any engine chooses its next batch."""
        if target not in self.pools:
            return self._submit(self.route(target), r, routed)
        done = self.env.event()

        def finish(finished: simpy.Event) -> None:
            if finished.ok:
                done.succeed(finished.value)
            else:  # it can never fit the engine's cache (Engine.send)
                fail_quietly(done, finished.value)  # type: ignore[arg-type]

        def go(_: simpy.Event) -> None:
            self._submit(self.route(target, r), r, routed).callbacks.append(finish)

        later_this_instant(self.env, ROUTING).callbacks.append(go)
        return done

    @staticmethod
    def _submit(engine: Engine, r: Request, routed: Optional[Callable[[Engine], None]]
                ) -> simpy.Event:
        if routed is not None:
            routed(engine)
        if r.rid is None:
            r.rid = engine.recorder.arrivals
        return engine.send(r)

    def feed(self, target: str, arrivals: Iterable[Arrival]) -> None:
        """Send the arrivals of a workload to ``target`` at their times (those
        with ids as :class:`~llmqueue.engine.prefix_cache.PrefixRequest`
        objects, docs/model.md §8.1, which a pool's router reads)."""
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
            self.send(target, prefix_request(None, *arrival[1:7]))

    def feed_sessions(self, target: str, sessions: Iterable[Session]) -> SessionLog:
        """Play multi-turn sessions (docs/model.md §8.5: scripts such as a
        :class:`~llmqueue.models.sessions.Sessions`) into ``target``: each
        turn is :meth:`sent <send>` when it comes (a pool routes it with its
        ids and ``session``: ``session-sticky`` keeps a session on one
        replica), the next turn ``think`` seconds after it finishes.  Returns
        the :class:`~llmqueue.engine.sessions.SessionLog` that counts what the
        sessions do as the run goes.  Turns are numbered from 0 in the order
        they are sent, over all the sessions of this call.  A turn due at or
        after the run's horizon is never sent (the run has ended: that
        session stays ``open``)."""
        self.route(target)  # fail now on an unknown name
        count, turns = getattr(sessions, "count", None), getattr(sessions, "mean_turns", None)
        self.source(getattr(sessions, "request_rate", None),
                    None if count is None else round(count * (turns or 1)))
        return feed_sessions(self.env, lambda r: self.send(target, r), sessions, self.until)

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
        if self.until is not None and progress.runs_are_shown():
            self._run_shown(self.until)
        else:
            self.env.run(until=self.until)
        while self.until is None and self._drain():
            self.env.run()
        end = self.until if self.until is not None else now_ticks(self.env)
        results = {name: engine_result(e, end) for name, e in self.engines.items()}
        self.end = end
        total = combine(list(self.engines.values()), end)
        return NetworkResult(results, total, end)


    def _run_shown(self, until: int) -> None:
        """Run to ``until`` (ticks) in hundredths, advancing a bar of simulated
        seconds on the terminal: the same events in the same order (each stop
        only pauses the clock between two instants' events)."""
        with progress.bar(until / TICKS_PER_SECOND, "s", True, "network", False) as meter:
            for k in range(1, 101):
                stop = until * k // 100
                if stop > self.env.now:
                    self.env.run(until=stop)
                meter.update(round(self.env.now / TICKS_PER_SECOND) - meter.n)

    def _drain(self) -> bool:
        """A run without horizon has nothing left to do, but engines that idle
        on purpose (WAIT) still hold residents: no arrival can wake them, so
        their arrivals are over and they drain (docs/model.md §6.5: a fixed-count run
        never hangs).  Whether any was woken."""
        idle = [e for e in self.engines.values()
                if e.kv is not None and len(e.residents) and not e.arrivals_over]
        for engine in idle:
            engine.end_arrivals()
        return bool(idle)


