"""Named, typed parameters read from text (``--set KEY=VALUE``, sweep grids).

A :class:`Param` knows its type, default, meaning, allowed choices and
bounds, and turns text into a checked value or raises ``ValueError`` naming
the parameter and what is allowed.  Experiments declare theirs with it; the
CLI, sweeps and ``--help`` read them.  A ``custom`` parameter reads its text
with its own ``reader`` (size laws, arrival laws: forms this layer does not
know) and says what it accepts in ``forms``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

from llmqueue.common.validation import MAX_INT, MAX_INT_TEXT, shown

#: What each kind of parameter accepts, for error messages and help.
KINDS = {"int": "an integer", "int-or-none": "an integer or none", "float": "a number",
         "float-or-none": "a number or none", "bool": "true or false", "str": "text",
         "custom": "what its reader accepts"}


@dataclass(frozen=True)
class Param:
    """One parameter: its type, default and meaning, and what values are allowed."""

    kind: str
    """One of :data:`KINDS`."""
    default: object
    """The value when none is given."""
    help: str
    """What it means, with its unit."""
    choices: Tuple[str, ...] = ()
    """The allowed values of a text parameter (empty: any text)."""
    low: Optional[float] = None
    """Smallest allowed number (inclusive), if any."""
    above: Optional[float] = None
    """Numbers must be greater than this, if given."""
    high: Optional[float] = None
    """Largest allowed number (inclusive), if any; an integer is at most
    :data:`~llmqueue.common.validation.MAX_INT` whatever this says."""
    quiet_default: bool = False
    """Left out of sweep run seeds while at its default: a parameter added to an
    experiment later keeps the seeds (and numbers) of the runs that do not set it."""
    reader: Optional[Callable[[str, str], object]] = None
    """``reader(name, text)`` of a ``custom`` parameter: the value, or a one-line
    ``ValueError`` naming ``name`` and the allowed forms.  Its values must give
    their text back with ``str()`` (sweeps read grid values again)."""
    forms: str = ""
    """What a ``custom`` parameter accepts, in words (for help and messages)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {self.kind!r}")
        if (self.kind == "custom") != (self.reader is not None) or \
                (self.kind == "custom" and not self.forms):
            raise ValueError("a custom parameter needs a reader and forms, and only a "
                             f"custom one takes a reader; got kind {self.kind!r}")

    def parse(self, name: str, text: str) -> object:
        """Read ``text`` as this parameter's value, or raise ``ValueError``."""
        if self.reader is not None:
            return self.reader(name, text)
        if self.kind.endswith("-or-none") and text.strip().lower() == "none":
            return None
        try:
            value = self._read(text)
        except ValueError:
            raise ValueError(f"{name} must be {self.describe()}; got {shown(text)}") from None
        if self.choices and value not in self.choices:
            raise ValueError(f"{name} must be one of {', '.join(self.choices)}; "
                             f"got {shown(text)}")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and (
                (self.low is not None and value < self.low)
                or (self.above is not None and value <= self.above)):
            raise ValueError(f"{name} must be {self.describe()}; got {shown(text)}")
        high = self._high()
        if high is not None and isinstance(value, (int, float)) and (
                value > high[0] or (self.kind.startswith("int") and value < -MAX_INT)):
            raise ValueError(f"{name} must be {self.describe(limit=True)}; got {shown(text)}")
        return value

    def _high(self) -> Optional[Tuple[float, str]]:
        """The largest allowed number and how a message says it (``None``: no bound)."""
        integer = self.kind in ("int", "int-or-none")
        if self.high is not None and not (integer and self.high > MAX_INT):
            return self.high, f"{self.high:,}" if integer else f"{self.high:g}"
        return (MAX_INT, MAX_INT_TEXT) if integer else None

    def _read(self, text: str) -> object:
        if self.kind in ("int", "int-or-none"):
            return int(text.replace("_", ""))
        if self.kind in ("float", "float-or-none"):
            value = float(text)
            if not math.isfinite(value):
                raise ValueError
            return value
        if self.kind == "bool":
            lowered = text.lower()
            if lowered in ("true", "1", "yes", "on"):
                return True
            if lowered in ("false", "0", "no", "off"):
                return False
            raise ValueError
        return text

    def describe(self, limit: bool = False) -> str:
        """What this parameter accepts, in words (``an integer >= 1 or none``);
        ``limit`` names the largest integer allowed too (``high`` is always named)."""
        if self.kind == "custom":
            return self.forms
        kind = KINDS[self.kind]
        base, _, none = kind.partition(" or ")
        high = self._high() if limit or self.high is not None else None
        bounds = []
        if self.low is not None and high is not None:
            bounds.append(f"from {self.low:g} to {high[1]}")
        elif self.low is not None:
            bounds.append(f">= {self.low:g}")
        elif high is not None and self.kind.startswith("int"):
            bounds.append(f"from -{MAX_INT_TEXT.partition(' ')[0]} to {high[1]}")
        elif high is not None:
            bounds.append(f"<= {high[1]}")
        if self.above is not None:
            bounds.append(f"> {self.above:g}")
        text = " ".join([base] + bounds)
        return f"{text} or {none}" if none else text
