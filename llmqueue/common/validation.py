"""Argument checks shared by the API, the CLI and the file readers.

Every check raises :class:`ValueError` with a message that names the
parameter, the value given and what is allowed.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Optional

from llmqueue.common.units import MAX_SECONDS, UNLIMITED

#: Largest token count a request, a law or a trace may give (about 10^12).
MAX_TOKENS = 2**40
#: Largest integer setting of any kind (a budget, slots, a cache or pool size,
#: a count of requests or engines): 2**62, the engine's own "unlimited", which
#: no count of a run reaches; a larger one could mean nothing more (give
#: ``None``, ``none`` on the command line, for no limit).  Seeds are not
#: settings of this kind (:func:`seed`).
MAX_INT = UNLIMITED
#: How :data:`MAX_INT` reads in messages.
MAX_INT_TEXT = f"2**62 = {MAX_INT:,}"


def shown(value: Any) -> str:
    """``repr(value)`` for a message, an integer of more than 30 digits (or a
    text of more than 60 characters) cut to its size, so that a hostile value
    never floods the one line of an error."""
    if _is_int(value) and abs(value) >= 10**30:
        return f"an integer of {len(str(abs(value)))} digits"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def token_count(name: str, value: Any, minimum: int = 0) -> int:
    """Return ``value`` if it is an integer in ``[minimum, MAX_TOKENS]``."""
    if not _is_int(value) or not minimum <= value <= MAX_TOKENS:
        raise ValueError(f"{name} must be a whole number of tokens from {minimum} to "
                         f"{MAX_TOKENS}, got {shown(value)}")
    return value


def token_text(name: str, text: str, forms: str = "") -> int:
    """``text`` read as a :func:`token_count`: ASCII digits (``_`` between them
    allowed), else a ValueError naming ``name`` (and the other ``forms`` allowed)."""
    digits = text.strip().replace("_", "")
    if not (digits.isascii() and digits.isdigit()) or len(digits.lstrip("0")) > 30:
        raise ValueError(f"{name} must be a whole number of tokens from 0 to {MAX_TOKENS} "
                         f"(digits 0-9){forms}; got {shown(text)}")
    return token_count(name, int(digits))


def cell(text: str, kind: Callable[[str], Any] = int) -> Any:
    """A text cell as ``kind`` (``int`` or ``float``), or the text itself when
    it is not one, for a validator to refuse naming its column:
    ``positive_int("tp", cell(text))``."""
    try:
        return kind(text)
    except ValueError:
        return text


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """Whether ``value`` is a finite int or float (not a bool); an integer too
    large for a float is not."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond the largest float
        return False


def _whole(name: str, value: Any, low: int, high: int, unlimited: str = "") -> int:
    """Return ``value`` if it is an integer in ``[low, high]``; the message
    says ``>= low`` (with ``unlimited``, e.g. `` or None (unlimited)``) and
    names ``high`` only when the value is above it."""
    if not _is_int(value) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}{unlimited}, got {shown(value)}")
    if value > high:
        limit = MAX_INT_TEXT if high == MAX_INT else f"{high:,}"
        raise ValueError(f"{name} must be an integer from {low} to {limit}{unlimited}, "
                         f"got {shown(value)}")
    return value


def positive_int(name: str, value: Any, high: int = MAX_INT) -> int:
    """Return ``value`` if it is an integer from 1 to ``high`` (:data:`MAX_INT`)."""
    return _whole(name, value, 1, high)


def nonnegative_int(name: str, value: Any, high: int = MAX_INT) -> int:
    """Return ``value`` if it is an integer from 0 to ``high`` (:data:`MAX_INT`)."""
    return _whole(name, value, 0, high)


def optional_positive_int(name: str, value: Any, high: int = MAX_INT) -> Optional[int]:
    """Return ``value`` if it is ``None`` (unlimited) or an integer from 1 to
    ``high`` (:data:`MAX_INT`)."""
    if value is None:
        return None
    return _whole(name, value, 1, high, " or None (unlimited)")


def seed(name: str, value: Any) -> int:
    """Return ``value`` if it is a random seed: an integer >= 0 of any size
    (numpy's ``SeedSequence`` takes them all; a sweep's run seeds reach 2**63)."""
    if not _is_int(value) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {shown(value)}")
    return value


def positive_number(name: str, value: Any) -> float:
    """Return ``value`` if it is a finite number > 0."""
    if not is_number(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {shown(value)}")
    return float(value)


def gap_seconds(name: str, value: Any) -> float:
    """Return ``value`` if it is a time between events, in seconds: a finite
    number > 0 and at most ``MAX_SECONDS`` (the longest time a run holds)."""
    if not is_number(value) or not 0 < value <= MAX_SECONDS:
        raise ValueError(f"{name} must be a finite number > 0 and at most {MAX_SECONDS:g} s, "
                         f"got {shown(value)}")
    return float(value)


def arrival_rate(name: str, value: Any) -> float:
    """Return ``value`` if it is an arrival rate, per second: a finite number
    whose mean gap ``1 / value`` is a :func:`gap_seconds`."""
    if not is_number(value) or not value >= 1 / MAX_SECONDS:
        raise ValueError(f"{name} must be a finite number > 0 and at least "
                         f"{1 / MAX_SECONDS:g} per second (a mean gap of at most "
                         f"{MAX_SECONDS:g} s), got {shown(value)}")
    return float(value)


def time_point(name: str, value: Any) -> float:
    """Return ``value`` if it is a time in seconds from 0 to ``MAX_SECONDS``."""
    if not is_number(value) or not 0 <= value <= MAX_SECONDS:
        raise ValueError(f"{name} must be a finite number >= 0 and at most {MAX_SECONDS:g} s, "
                         f"got {shown(value)}")
    return float(value)


def nonnegative_number(name: str, value: Any) -> float:
    """Return ``value`` if it is a finite number >= 0."""
    if not is_number(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {shown(value)}")
    return float(value)


def number_within(name: str, value: Any, low: float, high: float) -> float:
    """Return ``value`` if it is a finite number from ``low`` to ``high``."""
    if not is_number(value) or not low <= value <= high:
        raise ValueError(f"{name} must be a number from {low:g} to {high:g}, "
                         f"got {shown(value)}")
    return float(value)


def fraction(name: str, value: Any) -> float:
    """Return ``value`` if it is a number in [0, 1]."""
    if not is_number(value) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be a number in [0, 1], got {shown(value)}")
    return float(value)


def choice(name: str, value: Any, allowed: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``allowed``."""
    allowed = list(allowed)
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {shown(value)}")
    return value

