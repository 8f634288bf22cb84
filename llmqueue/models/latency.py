"""Batch-time models: how long one iteration takes (docs/model.md §4).

A model maps a batch summary (decode tokens, prefill tokens, requests in the
batch) to seconds: :class:`Staircase` (the default), :class:`Constant`,
:class:`StepModel` (docs/model.md §4's decode/prefill step model), :class:`Linear` and
:class:`Interpolated` (a table of measurements).  :mod:`llmqueue.theory.fit` fits
a staircase or a linear model to measured samples.  Any object with a
``batch_time(decode, prefill, requests)`` method plugs into the engine; models
must be pure (same batch, same time).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Protocol, Sequence, runtime_checkable

import numpy as np

from llmqueue.common import validation
from llmqueue.common.units import MAX_SECONDS
from llmqueue.models.context import BatchContext


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
    ``a = 0`` with ``c > 0`` is a constant iteration time; ``a > 0``
    allows ``c = 0``.

    Examples:
        One step up to ``b0`` tokens, two just above: 0.01128 + 0.03547 (x 2).

        >>> t = Staircase()
        >>> round(t.tokens_time(128), 5), round(t.tokens_time(129), 5)
        (0.04675, 0.08222)
    """

    c: float = 0.01128
    a: float = 0.03547
    b0: int = 128

    def __post_init__(self) -> None:
        for name in ("c", "a"):
            value = validation.nonnegative_number(name, getattr(self, name))
            if value > MAX_SECONDS:
                raise ValueError(f"{name} must be a number from 0 to {MAX_SECONDS:g} s; "
                                 f"got {value!r}")
        validation.positive_int("b0", self.b0)
        if self.a == 0 and self.c == 0:
            raise ValueError("a must be > 0 when c is 0 (a batch must take time); "
                             "allowed: a > 0, or a = 0 with c > 0 (constant time)")

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

    def tokens_time(self, tokens: int) -> float:
        """Seconds for a batch of ``tokens`` tokens (any batch)."""
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


@dataclass(frozen=True)
class StepModel:
    """docs/model.md §4's step model of ``d`` decode and ``p`` prefill tokens:
    ``t = base + per_decode * d + per_prefill * p + attention * p ** exponent``.

    The defaults are docs/model.md's (5 ms + 0.8 ms * d + 0.02 ms * p + 0.3 ms * p**0.6);
    the last, super-linear term stands for attention cost at long prompts.
    """

    base: float = 0.005
    """Seconds every iteration costs."""
    per_decode: float = 0.0008
    """Seconds per decode token."""
    per_prefill: float = 0.00002
    """Seconds per prefill token."""
    attention: float = 0.0003
    """Seconds times ``p ** exponent``: attention over the prompt tokens."""
    exponent: float = 0.6
    """The power of the attention term."""
    charge_waiting: bool = False
    """Also charge ``per_decode`` for each decoder a batch leaves waiting: the
    chunked-prefill notebook's whole-prefill baseline (docs/model.md §9.6 ``baseline=notebook``)."""

    @property
    def needs_context(self) -> bool:
        """Whether the engine must tell it the batch's context (only to count the
        waiting decoders, with ``charge_waiting``)."""
        return self.charge_waiting

    def __post_init__(self) -> None:
        validation.positive_number("base", self.base)
        for name in ("per_decode", "per_prefill", "attention", "exponent"):
            validation.nonnegative_number(name, getattr(self, name))

    def batch_time(self, decode: int, prefill: int, requests: int,
                   context: Optional[BatchContext] = None) -> float:
        """Seconds for a batch of ``decode`` decode and ``prefill`` prefill tokens
        (with ``charge_waiting``, also the decoders the batch leaves waiting)."""
        if self.charge_waiting and context is not None:
            decode += context.waiting
        return (self.base + self.per_decode * decode + self.per_prefill * prefill
                + (self.attention * prefill ** self.exponent if prefill else 0.0))


@dataclass(frozen=True)
class Linear:
    """``t_b = c + per_token * b`` for a batch of ``b`` tokens."""

    c: float = 0.01128
    per_token: float = 0.03547 / 128

    def __post_init__(self) -> None:
        validation.nonnegative_number("c", self.c)
        validation.nonnegative_number("per_token", self.per_token)
        if self.c + self.per_token <= 0:
            raise ValueError(f"c and per_token must not both be 0 (a batch must take time); "
                             f"got c={self.c!r}, per_token={self.per_token!r}")

    def batch_time(self, decode: int, prefill: int, requests: int) -> float:
        """Seconds for a batch of ``decode + prefill`` tokens."""
        return self.tokens_time(decode + prefill)

    def tokens_time(self, tokens: int) -> float:
        """Seconds for a batch of ``tokens`` tokens."""
        return self.c + self.per_token * tokens


class Interpolated:
    """Batch time interpolated linearly in a table of measured
    ``(batch tokens, seconds)`` points.

    Between points the time is the straight line joining them; beyond the
    largest point it follows the last segment's slope (never below the last
    time); below the smallest point it is the smallest point's time.
    """

    def __init__(self, tokens: Sequence[float], seconds: Sequence[float]) -> None:
        x, y = _numbers("tokens", tokens), _numbers("seconds", seconds)
        if x.ndim != 1 or x.shape != y.shape or x.size < 2:
            raise ValueError(f"tokens and seconds must be two lists of the same length >= 2; "
                             f"got {x.size} and {y.size} values")
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y)) and np.all(y > 0)):
            raise ValueError("seconds must be finite numbers > 0 and tokens finite numbers")
        order = np.argsort(x, kind="stable")
        x, y = x[order], y[order]
        if np.any(np.diff(x) == 0):
            raise ValueError("tokens must not repeat (average repeated measurements first); "
                             f"got repeated values {sorted(set(x[1:][np.diff(x) == 0]))}")
        self.tokens, self.seconds = x, y
        self._slope = max((y[-1] - y[-2]) / (x[-1] - x[-2]), 0.0)

    def __repr__(self) -> str:
        return (f"Interpolated({self.tokens.size} points, {self.tokens[0]:g}.."
                f"{self.tokens[-1]:g} tokens)")

    def batch_time(self, decode: int, prefill: int, requests: int) -> float:
        """Seconds for a batch of ``decode + prefill`` tokens."""
        return self.tokens_time(decode + prefill)

    def tokens_time(self, tokens: int) -> float:
        """Seconds for a batch of ``tokens`` tokens."""
        if tokens > self.tokens[-1]:
            return float(self.seconds[-1] + self._slope * (tokens - self.tokens[-1]))
        return float(np.interp(tokens, self.tokens, self.seconds))


def _numbers(name: str, values: Sequence[float]) -> np.ndarray:
    """``values`` (a list, tuple or 1-D array) as floats, if each is a number:
    a finite int or float, or numpy's, never a bool or a text; else a ValueError."""
    items = list(values) if isinstance(values, (list, tuple, np.ndarray)) else None
    numpy_number = (np.integer, np.floating)
    if items is None or not all(validation.is_number(v) or isinstance(v, numpy_number)
                                for v in items):
        raise ValueError(f"{name} must be a list of numbers, got {validation.shown(values)}")
    return np.asarray(items, dtype=float)
