"""Batch-time models: how long one iteration takes (SPEC section 4).

A model maps a batch summary (decode tokens, prefill tokens, requests in the
batch) to seconds.  Any object with a ``batch_time(decode, prefill, requests)``
method plugs into the engine; models must be pure (same batch, same time).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from . import validation


@runtime_checkable
class LatencyModel(Protocol):
    """What the engine asks of a batch-time model."""

    def batch_time(self, decode: int, prefill: int, requests: int) -> float:
        """Seconds one iteration with this many tokens and requests lasts."""
        ...


@dataclass(frozen=True)
class Staircase:
    """``t_b = c + a * ceil(b / b0)`` for a batch of ``b`` tokens (Assumption 1).

    The defaults are the paper's fit for CodeLlama-34B on one A100-80GB.
    """

    c: float = 0.01128
    a: float = 0.03547
    b0: int = 128

    def __post_init__(self) -> None:
        validation.nonnegative_number("c", self.c)
        validation.positive_number("a", self.a)
        validation.positive_int("b0", self.b0)

    def batch_time(self, decode: int, prefill: int, requests: int) -> float:
        """Seconds for a batch of ``decode + prefill`` tokens."""
        return self.tokens_time(decode + prefill)

    def tokens_time(self, tokens: int) -> float:
        """Seconds for a batch of ``tokens`` tokens."""
        return self.c + self.a * math.ceil(tokens / self.b0)


@dataclass(frozen=True)
class Constant:
    """Every batch lasts the same time, whatever it holds."""

    seconds: float = 1.0

    def __post_init__(self) -> None:
        validation.positive_number("seconds", self.seconds)

    def batch_time(self, decode: int, prefill: int, requests: int) -> float:
        """Seconds for any batch."""
        return self.seconds


def tokens_time(model: LatencyModel, tokens: int) -> float:
    """Seconds for a batch of ``tokens`` tokens, used for capacity figures.

    A full budget is priced as if it were all prefill in one request; models
    whose time depends on the split should say so in their own ``tokens_time``.
    """
    own = getattr(model, "tokens_time", None)
    if own is not None:
        return own(tokens)
    return model.batch_time(0, tokens, 1)
