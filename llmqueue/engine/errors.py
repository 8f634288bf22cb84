"""Errors a run can end with."""

from __future__ import annotations


class Stalled(ValueError):
    """The policy formed an empty batch while residents still have work."""


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
