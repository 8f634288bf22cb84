"""Simulated time: seconds in the public API, whole nanoseconds inside.

The engine keeps time as integer nanoseconds ("ticks") so that an arrival and
an iteration end that the model says coincide (at point C an arrival falls
every ten iterations) really do coincide, on every machine.  Converting a
duration in seconds to ticks rounds it to the nearest nanosecond, so every
reported time is within half a nanosecond per batch of exact arithmetic.
"""

from __future__ import annotations

TICKS_PER_SECOND: int = 1_000_000_000


#: Longest time the engine represents, in seconds (about 31,700 years).
MAX_SECONDS = 1e12


def to_ticks(seconds: float) -> int:
    """Round a time in seconds to whole nanoseconds."""
    if not -MAX_SECONDS <= seconds <= MAX_SECONDS:
        raise ValueError(f"times must be within {MAX_SECONDS:g} s; got {seconds!r} s")
    return round(seconds * TICKS_PER_SECOND)


def to_seconds(ticks: int) -> float:
    """Convert nanoseconds back to seconds."""
    return ticks / TICKS_PER_SECOND


#: The one "no limit" value for integer limits (token budget, slots, repeats):
#: larger than any count a run can reach, and still an ``int``.
UNLIMITED: int = 2**62


def ceil_div(numerator: int, denominator: int) -> int:
    """``ceil(numerator / denominator)`` in exact integer arithmetic."""
    return -(-numerator // denominator)
