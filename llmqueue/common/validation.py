"""Argument checks shared by the API, the CLI and the file readers.

Every check raises :class:`ValueError` with a message that names the
parameter, the value given and what is allowed.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Optional

from llmqueue.common.units import MAX_SECONDS

#: Largest token count a request, a law or a trace may give (about 10^12).
MAX_TOKENS = 2**40
def token_count(name: str, value: Any, minimum: int = 0) -> int:
    """Return ``value`` if it is an integer in ``[minimum, MAX_TOKENS]``."""
    if not _is_int(value) or not minimum <= value <= MAX_TOKENS:
        raise ValueError(f"{name} must be a whole number of tokens from {minimum} to "
                         f"{MAX_TOKENS}, got {value!r}")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """Whether ``value`` is a finite int or float (not a bool)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def positive_int(name: str, value: Any) -> int:
    """Return ``value`` if it is an integer >= 1."""
    if not _is_int(value) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def nonnegative_int(name: str, value: Any) -> int:
    """Return ``value`` if it is an integer >= 0."""
    if not _is_int(value) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    return value


def optional_positive_int(name: str, value: Any) -> Optional[int]:
    """Return ``value`` if it is ``None`` (unlimited) or an integer >= 1."""
    if value is None:
        return None
    if not _is_int(value) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1 or None (unlimited), got {value!r}")
    return value


def positive_number(name: str, value: Any) -> float:
    """Return ``value`` if it is a finite number > 0."""
    if not is_number(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def gap_seconds(name: str, value: Any) -> float:
    """Return ``value`` if it is a time between events, in seconds: a finite
    number > 0 and at most ``MAX_SECONDS`` (the longest time a run holds)."""
    if not is_number(value) or not 0 < value <= MAX_SECONDS:
        raise ValueError(f"{name} must be a finite number > 0 and at most {MAX_SECONDS:g} s, "
                         f"got {value!r}")
    return float(value)


def arrival_rate(name: str, value: Any) -> float:
    """Return ``value`` if it is an arrival rate, per second: a finite number
    whose mean gap ``1 / value`` is a :func:`gap_seconds`."""
    if not is_number(value) or not value >= 1 / MAX_SECONDS:
        raise ValueError(f"{name} must be a finite number > 0 and at least "
                         f"{1 / MAX_SECONDS:g} per second (a mean gap of at most "
                         f"{MAX_SECONDS:g} s), got {value!r}")
    return float(value)


def time_point(name: str, value: Any) -> float:
    """Return ``value`` if it is a time in seconds from 0 to ``MAX_SECONDS``."""
    if not is_number(value) or not 0 <= value <= MAX_SECONDS:
        raise ValueError(f"{name} must be a finite number >= 0 and at most {MAX_SECONDS:g} s, "
                         f"got {value!r}")
    return float(value)


def nonnegative_number(name: str, value: Any) -> float:
    """Return ``value`` if it is a finite number >= 0."""
    if not is_number(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def fraction(name: str, value: Any) -> float:
    """Return ``value`` if it is a number in [0, 1]."""
    if not is_number(value) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)


def choice(name: str, value: Any, allowed: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``allowed``."""
    allowed = list(allowed)
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
    return value

