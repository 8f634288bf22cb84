"""Errors a run can end with."""

from __future__ import annotations

from typing import Hashable


class Stalled(ValueError):
    """The policy formed an empty batch while residents still have work."""


class RequestIgnored(ValueError):
    """A request can never fit its engine's KV cache (docs/model.md §6.1): it is ignored,
    and the event of its :meth:`~llmqueue.engine.processes.Engine.call` fails
    with this, so a workflow waiting for it learns at once (and may catch it)."""

    def __init__(self, engine: str, rid: Hashable) -> None:
        super().__init__(engine, rid)  # SimPy rebuilds exceptions from their args
        self.engine = engine
        self.rid = rid

    def __str__(self) -> str:
        return (f"request {self.rid} of engine {self.engine!r} can never fit its KV cache: "
                "it is ignored")


class InvariantError(AssertionError):
    """A checked invariant of the engine's state failed (a bug, not bad input)."""


class Diverged(Exception):
    """More requests are pending than the run allows (``max_pending``)."""

    def __init__(self, now: int, pending: int) -> None:
        super().__init__(now, pending)  # SimPy rebuilds exceptions from their args
        self.now = now
        self.pending = pending

    def __str__(self) -> str:
        return f"{self.pending} requests pending at t={self.now / 1e9:.3f} s"
