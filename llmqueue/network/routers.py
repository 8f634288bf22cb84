"""Routers: which replica of a pool takes the next request (SPEC 6.3).

A router is a small object whose :meth:`Router.choose` reads the replicas'
state at the instant of an arrival and returns the index of the one to use.
Ties go to the lowest index, so the deterministic routers need no random
numbers; ``random`` and ``power-of-two`` draw from their own seeded numpy
generator, so the same seed gives the same routing.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Protocol, Sequence

import numpy as np

from llmqueue.common import validation


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


class Router:
    """Base class: pick one of ``engines`` for a request arriving now."""

    name: str = "router"

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(validation.seed("seed", seed))

    def choose(self, engines: Sequence[Replica]) -> int:
        """Index of the replica that takes the request."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class RandomRouter(Router):
    """Each request goes to a replica drawn uniformly at random."""

    name = "random"

    def choose(self, engines: Sequence[Replica]) -> int:
        return int(self.rng.integers(len(engines)))


class RoundRobin(Router):
    """Replicas take requests in turn: 0, 1, ..., K-1, 0, ..."""

    name = "round-robin"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self.next = 0

    def choose(self, engines: Sequence[Replica]) -> int:
        i = self.next % len(engines)
        self.next = i + 1
        return i


def _least(values: Sequence[int]) -> int:
    return min(range(len(values)), key=values.__getitem__)


class JSQ(Router):
    """Join the shortest queue: the replica with the fewest pending requests."""

    name = "jsq"

    def choose(self, engines: Sequence[Replica]) -> int:
        return _least([e.pending for e in engines])


class JSQTokens(Router):
    """Join the replica with the fewest unprocessed tokens (Prop. 3's router)."""

    name = "jsq-tokens"

    def choose(self, engines: Sequence[Replica]) -> int:
        return _least([e.backlog for e in engines])


class PowerOfTwo(Router):
    """Sample two distinct replicas at random; the one with fewer unprocessed
    tokens takes the request (with one replica, that one)."""

    name = "power-of-two"

    def choose(self, engines: Sequence[Replica]) -> int:
        if len(engines) == 1:
            return 0
        i, j = (int(x) for x in self.rng.choice(len(engines), size=2, replace=False))
        return i if engines[i].backlog <= engines[j].backlog else j


ROUTERS: Dict[str, Callable[..., Router]] = {
    cls.name: cls for cls in (RandomRouter, RoundRobin, JSQ, JSQTokens, PowerOfTwo)}


def router_names() -> List[str]:
    """Names of the built-in routers."""
    return list(ROUTERS)


def make_router(spec: object, seed: Optional[int] = 0) -> Router:
    """A router from its name (seeded where it draws) or a :class:`Router`."""
    if isinstance(spec, Router):
        return spec
    name = validation.choice("router", spec, ROUTERS)
    return ROUTERS[name](seed=seed or 0)
