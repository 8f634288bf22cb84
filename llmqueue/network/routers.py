"""Routers: which replica of a pool takes the next request (docs/model.md §9.3, §8.6).

A router is a small object whose :meth:`Router.choose` reads the replicas'
state at the instant of an arrival, and the arriving request itself, and
returns the index of the one to use.  Ties go to the lowest index, so the
deterministic routers need no random numbers; ``random`` and
``power-of-two`` draw from their own seeded numpy generator, so the same seed
gives the same routing.

The cache-aware routers of docs/model.md §8.6 (:class:`PrefixAffinity`,
:class:`PrefixScore`, :class:`SessionSticky`) also read a replica's
:meth:`Replica.cached_prefix`.  By default they read everything live, at the
routing instant.  With ``stale=S`` seconds they read a :class:`Snapshot` of
each replica instead (its ``pending``, its ``backlog`` and the content ids in
its prefix cache, in use or evictable), taken at a routing decision and kept
for ``S`` seconds: every request routed less than ``S`` seconds after the
snapshot was taken is routed on it, and the first request routed ``S`` or
more seconds after it takes a new one (of every replica, at that instant,
before choosing).  A snapshot does not see the requests routed since it was
taken (nor anything the replicas did meanwhile): the herding a stale view
causes.  Its hits are docs/model.md §8.2's lookup over the ids cached at the snapshot.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import (Any, Callable, Dict, Hashable, List, Optional, Protocol, Sequence, Tuple)

import numpy as np

from llmqueue.common import validation
from llmqueue.common.units import to_ticks
from llmqueue.engine.prefix_cache import PrefixCache
from llmqueue.policies.view import Request


class Replica(Protocol):
    """What a router reads of a replica (an :class:`~llmqueue.engine.Engine` is one)."""

    @property
    def pending(self) -> int:
        """Requests in the replica: residents plus waiting."""
        ...

    @property
    def backlog(self) -> int:
        """Unprocessed tokens of those requests."""
        ...

    def cached_prefix(self, request: Request) -> int:
        """Hit tokens ``request`` would get there now (docs/model.md §8.2's lookup at a
        first start), changing nothing; 0 without a prefix cache or ids."""
        ...


class Router:
    """Base class: pick one of ``engines`` for a request arriving now."""

    name: str = "router"
    options: Tuple[str, ...] = ()
    """The keywords :func:`make_router` passes on (besides ``seed``)."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(validation.seed("seed", seed))
        self.clock: Optional[Callable[[], int]] = None
        """The simulation time in ticks (:meth:`attach`), for routers that need it."""

    def attach(self, clock: Callable[[], int]) -> None:
        """Give the router the clock of the replicas it routes over (a
        :class:`~llmqueue.network.network.Pool` does)."""
        self.clock = clock

    def choose(self, engines: Sequence[Replica], request: Optional[Request] = None) -> int:
        """Index of the replica that takes ``request`` (the request about to
        be routed; ``None``: a router must not need it)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class RandomRouter(Router):
    """Each request goes to a replica drawn uniformly at random."""

    name = "random"

    def choose(self, engines: Sequence[Replica], request: Optional[Request] = None) -> int:
        return int(self.rng.integers(len(engines)))


class RoundRobin(Router):
    """Replicas take requests in turn: 0, 1, ..., K-1, 0, ..."""

    name = "round-robin"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self.next = 0

    def choose(self, engines: Sequence[Replica], request: Optional[Request] = None) -> int:
        i = self.next % len(engines)
        self.next = i + 1
        return i


def _least(values: Sequence[int]) -> int:
    return min(range(len(values)), key=values.__getitem__)


class JSQ(Router):
    """Join the shortest queue: the replica with the fewest pending requests."""

    name = "jsq"

    def choose(self, engines: Sequence[Replica], request: Optional[Request] = None) -> int:
        return _least([e.pending for e in engines])


class JSQTokens(Router):
    """Join the replica with the fewest unprocessed tokens (Prop. 3's router)."""

    name = "jsq-tokens"

    def choose(self, engines: Sequence[Replica], request: Optional[Request] = None) -> int:
        return _least([e.backlog for e in engines])


class PowerOfTwo(Router):
    """Sample two distinct replicas at random; the one with fewer unprocessed
    tokens takes the request (with one replica, that one)."""

    name = "power-of-two"

    def choose(self, engines: Sequence[Replica], request: Optional[Request] = None) -> int:
        if len(engines) == 1:
            return 0
        i, j = (int(x) for x in self.rng.choice(len(engines), size=2, replace=False))
        return i if engines[i].backlog <= engines[j].backlog else j


# -- cache-aware routers (docs/model.md §8.6) ------------------------------------------
class Snapshot:
    """A replica as it was when the snapshot was taken: its ``pending``,
    ``backlog`` and prefix-cache contents, frozen (what a router with
    ``stale`` reads).  A replica may make its own (a ``snapshot()`` method
    returning a :class:`Replica` that never changes); :func:`freeze` makes
    one of an :class:`~llmqueue.engine.Engine`."""

    __slots__ = ("pending", "backlog", "_cache")

    def __init__(self, pending: int, backlog: int, cache: Optional[PrefixCache]) -> None:
        self.pending = pending
        """Requests in the replica then."""
        self.backlog = backlog
        """Unprocessed tokens then."""
        self._cache = cache

    def cached_prefix(self, request: Request) -> int:
        """The hit ``request`` would have got at the snapshot's instant
        (:meth:`Engine.cached_prefix` against the ids cached then)."""
        cache = self._cache
        return 0 if cache is None else cache.lookup(request, request.prefill_left)


def freeze(replica: Replica) -> Replica:
    """``replica``'s state now, kept unchanged: its own ``snapshot()`` if it
    has one, else a :class:`Snapshot` of its pending, backlog and (for an
    engine with a prefix cache) a copy of its cache's ids."""
    own = getattr(replica, "snapshot", None)
    if own is not None:
        return own()
    cache = getattr(getattr(replica, "residents", None), "cache", None)
    frozen = None
    if isinstance(cache, PrefixCache):
        frozen = copy.copy(cache)  # a lookup reads its hash block and which ids it holds
        frozen.entries = dict(cache.entries)
    return Snapshot(replica.pending, replica.backlog, frozen)


def _ids(request: Optional[Request]) -> bool:
    """Whether ``request`` carries prefix ids (docs/model.md §8.1)."""
    return bool(getattr(request, "ids", None))


class CacheRouter(Router):
    """Base of the routers that read cache state: live at the routing
    instant, or with ``stale=S`` seconds a snapshot of every replica kept for
    ``S`` seconds (see the module's docstring).  Subclasses implement
    :meth:`pick` on what :meth:`choose` hands them."""

    options: Tuple[str, ...] = ("stale",)

    def __init__(self, seed: int = 0, *, stale: Optional[float] = None) -> None:
        super().__init__(seed)
        seconds = None if stale is None else validation.gap_seconds("stale", stale)
        self.stale = seconds
        """Seconds a snapshot is read for (``None``: the replicas are read live)."""
        self._ttl = 0 if seconds is None else to_ticks(seconds)
        self._snapshots: List[Replica] = []
        self._taken: Optional[int] = None

    def view(self, engines: Sequence[Replica]) -> Sequence[Replica]:
        """What the router reads of ``engines`` now: themselves, or their snapshots."""
        if self.stale is None:
            return engines
        if self.clock is None:
            raise ValueError(f"router {self.name!r} with stale={self.stale:g} needs the "
                             "replicas' clock: route through a pool (it attaches one) or "
                             "call attach(clock) first")
        now = self.clock()
        taken = self._taken
        if taken is None or now - taken >= self._ttl or len(self._snapshots) != len(engines):
            self._snapshots = [freeze(e) for e in engines]
            self._taken = now
        return self._snapshots

    def choose(self, engines: Sequence[Replica], request: Optional[Request] = None) -> int:
        return self.pick(self.view(engines), request)

    def pick(self, replicas: Sequence[Replica], request: Optional[Request]) -> int:
        """Index of the replica that takes ``request``, reading ``replicas``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._fields()})"

    def _fields(self) -> str:
        return "" if self.stale is None else f"stale={self.stale!r}"


class PrefixAffinity(CacheRouter):
    """The replica with the longest cached prefix of the request; ties to the
    fewest unprocessed tokens (JSQ-tokens), then to the lowest index.  A
    request without ids goes by JSQ-tokens."""

    name = "prefix-affinity"

    def pick(self, replicas: Sequence[Replica], request: Optional[Request]) -> int:
        if request is None or not _ids(request):
            return _least([e.backlog for e in replicas])
        keys = [(-e.cached_prefix(request), e.backlog) for e in replicas]
        return min(range(len(keys)), key=keys.__getitem__)


class PrefixScore(CacheRouter):
    """llm-d's prefix-aware scoring: the replica maximising
    ``weight * hit / vp - (1 - weight) * backlog / max_backlog`` (``hit`` its
    cached prefix of the request, ``max_backlog`` the largest backlog over the
    replicas; a 0/0 term is 0); ties to the lowest index."""

    name = "prefix-score"
    options = ("weight", "stale")

    def __init__(self, seed: int = 0, *, weight: float = 0.5,
                 stale: Optional[float] = None) -> None:
        super().__init__(seed, stale=stale)
        self.weight = validation.fraction("weight", weight)
        """``w``: the weight of the hit ratio against the load."""

    def pick(self, replicas: Sequence[Replica], request: Optional[Request]) -> int:
        w = self.weight
        backlogs = [e.backlog for e in replicas]
        top = max(backlogs)
        load = [0.0 if top == 0 else (1 - w) * b / top for b in backlogs]
        vp = 0 if request is None else request.vp
        if vp and _ids(request):
            scores = [w * e.cached_prefix(request) / vp - c  # type: ignore[arg-type]
                      for e, c in zip(replicas, load)]
        else:
            scores = [-c for c in load]
        return max(range(len(scores)), key=lambda i: (scores[i], -i))

    def _fields(self) -> str:
        return ", ".join(f for f in (f"weight={self.weight!r}", super()._fields()) if f)


#: Sessions a :class:`SessionSticky` remembers unless told otherwise.
SESSIONS = 65_536


class SessionSticky(CacheRouter):
    """A session's turns go to the replica that served its first turn,
    chosen by JSQ-tokens; requests without a session go by JSQ-tokens.

    It remembers the replica of the ``sessions`` sessions most recently
    routed (least recently routed forgotten first): memory is bounded by
    ``sessions`` whatever the run's length.  A forgotten session's next turn
    is routed as a first turn.  (The router cannot know a session's last
    turn: its next turn simply never comes; with far more remembered than
    active sessions, as by default, an active one is never forgotten.)"""

    name = "session-sticky"
    options = ("sessions", "stale")

    def __init__(self, seed: int = 0, *, sessions: int = SESSIONS,
                 stale: Optional[float] = None) -> None:
        super().__init__(seed, stale=stale)
        self.sessions = validation.positive_int("sessions", sessions)
        """How many sessions it remembers at most."""
        self.served: "OrderedDict[Hashable, int]" = OrderedDict()
        """Each remembered session's replica, least recently routed first."""

    def pick(self, replicas: Sequence[Replica], request: Optional[Request]) -> int:
        session = getattr(request, "session", None)
        if session is None:
            return _least([e.backlog for e in replicas])
        served = self.served
        i = served.get(session)
        if i is None or i >= len(replicas):
            i = _least([e.backlog for e in replicas])
            served[session] = i
            if len(served) > self.sessions:
                served.popitem(last=False)
        else:
            served.move_to_end(session)
        return i

    def _fields(self) -> str:
        return ", ".join(f for f in (f"sessions={self.sessions!r}", super()._fields()) if f)


ROUTERS: Dict[str, Callable[..., Router]] = {
    cls.name: cls for cls in (RandomRouter, RoundRobin, JSQ, JSQTokens, PowerOfTwo,
                              PrefixAffinity, PrefixScore, SessionSticky)}

#: The routers of docs/model.md §9.3 (what ``router=all`` of the ``parallel`` experiment runs).
BASIC = ("random", "round-robin", "jsq", "jsq-tokens", "power-of-two")


def check_traffic(router: str, ids: bool, sessions: bool = False) -> None:
    """Refuse a router that reads what this traffic lacks: a cache-aware
    router on requests without prefix ids (or on engines without a prefix
    cache), ``session-sticky`` on traffic without sessions."""
    validation.choice("router", router, ROUTERS)
    if router in BASIC:
        return
    lacks = "sessions" if router == "session-sticky" else "prefix ids"
    if (sessions if router == "session-sticky" else ids):
        return
    raise ValueError(f"router {router!r} reads {lacks}, which this traffic does not have (it "
                     f"needs prefix caching: kv=..., prefix=on and a workload with ids); "
                     f"allowed here: {', '.join(BASIC)}")


def router_names(cache_aware: bool = True) -> List[str]:
    """Names of the built-in routers (``cache_aware=False``: docs/model.md §9.3's only,
    without those of docs/model.md §8.6)."""
    return list(ROUTERS) if cache_aware else list(BASIC)


def make_router(spec: object, seed: Optional[int] = 0, **options: Any) -> Router:
    """A router from its name (seeded where it draws; ``options``: its
    keywords, such as ``weight`` of ``prefix-score`` or ``stale``) or a
    :class:`Router` (taken as it is: no options)."""
    if isinstance(spec, Router):
        if options:
            raise ValueError(f"router options {', '.join(options)} need a router name; got "
                             f"the router {spec!r}")
        return spec
    name = validation.choice("router", spec, ROUTERS)
    cls = ROUTERS[name]
    allowed = getattr(cls, "options", ())
    for key in options:
        if key not in allowed:
            raise ValueError(f"router {name!r} takes no option {key!r}; allowed: "
                             f"{', '.join(allowed) or '(none)'}")
    return cls(seed=seed or 0, **options)
