"""Errors a run can end with."""

from __future__ import annotations


class Stalled(ValueError):
    """The policy formed an empty batch while residents still have work."""


class InvariantError(AssertionError):
    """A checked invariant of the engine's state failed (a bug, not bad input)."""
