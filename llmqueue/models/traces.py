"""Trace files: requests recorded elsewhere, read into a :class:`Trace`.

Two formats, told apart by the header line:

* generic: ``arrival,prefill,decode[,class]`` (seconds, tokens, tokens, a label);
* Azure LLM inference 2023 (Patel et al., *Splitwise*, ISCA 2024):
  ``TIMESTAMP,ContextTokens,GeneratedTokens`` with timestamps such as
  ``2023-11-16 18:17:03.9799600`` (seven fractional digits, which
  ``datetime.fromisoformat`` does not take before Python 3.11).  The arrival of
  a row is the seconds since the first row, computed with whole seconds and
  fractions apart so no digit is lost; a row earlier than the first is an error.

A malformed row is a ``ValueError`` naming the file and line.  The model needs
``vd >= 1``: a row with 0 decode (generated) tokens is read, by default, as one
decode token (``zero_decode="one"``: the request still had its prompt processed
and, in the model, yields its first token); ``"drop"`` leaves such rows out and
``"error"`` refuses them.  The two Azure 2023 files hold no such row.

A file of more request rows than one run may bring
(:func:`~llmqueue.common.limits.check_requests`, ``LLMQUEUE_MAX_REQUESTS``)
is refused with the limit's message before its rows are parsed: a file of
more lines than the limit is counted first (a pass of the csv module alone,
a few seconds for 10^7 rows), not read into memory.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, replace
from typing import Hashable, List, Optional, Tuple

import numpy as np

from llmqueue.common import files, limits, validation
from llmqueue.models.arrivals import TraceTimes
from llmqueue.models.sizes import Empirical
from llmqueue.models.workload import Workload, from_list

GENERIC = ["arrival", "prefill", "decode"]
AZURE = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
ZERO_DECODE = ("one", "drop", "error")
_STAMP = re.compile(r"\s*(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\s*$")


@dataclass
class Trace:
    """The requests of a trace file, in arrival order."""

    path: str
    format: str                     # "generic" or "azure-2023"
    times: np.ndarray               # seconds (Azure: since the first row)
    prefill: np.ndarray             # tokens
    decode: np.ndarray              # tokens, >= 1
    classes: Optional[List[Hashable]] = None
    zero_decode_rows: int = 0       # rows that had 0 decode tokens

    def __len__(self) -> int:
        return int(self.times.size)

    def arrival_law(self, rate: Optional[float] = None) -> TraceTimes:
        """The trace's arrival times, rescaled to ``rate`` per second if given."""
        return TraceTimes(self.times, rate)

    def prefill_law(self) -> Empirical:
        """Prefill sizes resampled from this trace."""
        return Empirical(self.prefill)

    def decode_law(self) -> Empirical:
        """Decode sizes resampled from this trace."""
        return Empirical(self.decode)

    def workload(self, rate: Optional[float] = None, limit: Optional[int] = None,
                 speedup: float = 1.0) -> Workload:
        """Replay the first ``limit`` requests (all by default) with their own
        sizes; their times rescaled to ``rate`` per second, or divided by
        ``speedup`` (which multiplies whatever rate they arrive at)."""
        n = len(self) if limit is None else min(validation.positive_int("limit", limit), len(self))
        if n == 0:
            raise ValueError(f"path: {self.path} holds no requests")
        validation.positive_number("speedup", speedup)
        if rate is not None and speedup != 1.0:
            raise ValueError(f"give rate or speedup, not both; got rate={rate!r}, "
                             f"speedup={speedup!r}")
        times = [t / speedup for t in TraceTimes(self.times[:n], rate).times(None)]
        sizes = zip(self.prefill[:n].tolist(), self.decode[:n].tolist())
        rows: List[Tuple[object, ...]]
        if self.classes is None:
            rows = [(t, p, d) for t, (p, d) in zip(times, sizes)]
        else:
            rows = [(t, p, d, k) for t, (p, d), k in zip(times, sizes, self.classes)]
        description = f"{n} requests of {self.path} ({self.format})" + (
            f" at {rate:g}/s" if rate is not None else "") + (
            f", {speedup:g}x faster" if speedup != 1.0 else "")
        return replace(from_list(rows), description=description)


def read_trace(path: str, zero_decode: str = "one") -> Trace:
    """Read a generic or Azure 2023 trace file (see the module docstring)."""
    validation.choice("zero_decode", zero_decode, ZERO_DECODE)
    _check_rows(path)
    with files.open_text_input(path) as handle:
        reader = files.csv_rows(handle, handle.name)
        header = [h.strip() for h in next(reader, (1, []))[1]]
        if header[:3] == GENERIC and len(header) in (3, 4):
            kind, parse = "generic", _generic_row
        elif header == AZURE:
            kind, parse = "azure-2023", _azure_row
        else:
            raise ValueError(f"{handle.name}:1: header must be arrival,prefill,decode[,class] or "
                             f"TIMESTAMP,ContextTokens,GeneratedTokens (Azure 2023); "
                             f"got {','.join(header)!r}")
        rows: List[Tuple[float, int, int, Hashable]] = []
        zeros = 0
        origin: Optional[Tuple[int, float]] = None
        for line, row in reader:
            if not row or not "".join(row).strip():
                continue
            try:
                if len(row) != len(header):
                    raise ValueError(f"expected {len(header)} fields, got {len(row)}")
                time, prefill, decode, klass, origin = parse(row, origin)
                validation.nonnegative_int("prefill", prefill)
                validation.nonnegative_int("decode", decode)
                if decode == 0:
                    if zero_decode == "error":
                        raise ValueError("decode must be an integer >= 1, got 0 "
                                         "(read with zero_decode='one' or 'drop')")
                    zeros += 1
                    if zero_decode == "drop":
                        continue
                    decode = 1
            except ValueError as exc:
                raise ValueError(f"{handle.name}:{line}: {exc}") from None
            rows.append((time, prefill, decode, klass))
    rows.sort(key=lambda r: r[0])  # stable: equal times keep their order
    classes = [r[3] for r in rows] if kind == "generic" and len(header) == 4 else None
    return Trace(path, kind, np.array([r[0] for r in rows], dtype=float),
                 np.array([r[1] for r in rows], dtype=np.int64),
                 np.array([r[2] for r in rows], dtype=np.int64), classes, zeros)


def _check_rows(path: str) -> None:
    """Refuse a trace of more request rows (rows after the header that are not
    blank) than one run may bring, with :func:`limits.check_requests`'s
    message, before any row is parsed.  Its line breaks are counted first: a
    file of no more lines than the limit is not counted again.  A file that
    cannot be read is left to the read, which names the file and line."""
    cap = limits.limit("max_requests", limits.MAX_REQUESTS)
    rows = -1  # the header is no request
    try:
        with files.open_text_input(path) as handle:
            if sum(part.count("\n") for part in iter(lambda: handle.read(1 << 20), "")) <= cap:
                return  # rows after the header <= line breaks
        with files.open_text_input(path) as handle:
            for _, row in files.csv_rows(handle, handle.name):
                rows += 1 if rows < 0 or "".join(row).strip() else 0
                if rows > cap:
                    break
    except ValueError:
        return
    if rows > cap:
        limits.check_requests(None, None, rows)


def _count(name: str, text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name} must be a whole number of tokens, got {text!r}") from None
    if not value.is_integer():
        raise ValueError(f"{name} must be a whole number of tokens, got {text!r}")
    return validation.token_count(name, int(value))


def _generic_row(row: List[str], origin: Optional[Tuple[int, float]]) -> tuple:
    try:
        time = float(row[0])
    except ValueError:
        raise ValueError(f"arrival must be a time in seconds, got {row[0]!r}") from None
    validation.time_point("arrival", time)
    klass = row[3].strip() if len(row) == 4 else None
    return time, _count("prefill", row[1]), _count("decode", row[2]), klass, origin


def _azure_row(row: List[str], origin: Optional[Tuple[int, float]]) -> tuple:
    whole, frac = parse_timestamp(row[0])
    if origin is None:
        origin = (whole, frac)
    time = (whole - origin[0]) + (frac - origin[1])
    if time < 0:
        raise ValueError(f"TIMESTAMP {row[0].strip()!r} is earlier than the first row's; "
                         "rows must be in time order")
    return (time, _count("ContextTokens", row[1]), _count("GeneratedTokens", row[2]), None,
            origin)


def parse_timestamp(text: str) -> Tuple[int, float]:
    """``YYYY-MM-DD HH:MM:SS[.fraction]`` as (whole seconds since 0001-01-01,
    fraction of a second), any number of fractional digits."""
    match = _STAMP.match(text)
    if match is None:
        raise ValueError(f"TIMESTAMP must look like 2023-11-16 18:17:03.9799600, got {text!r}")
    y, mo, d, h, mi, s = (int(x) for x in match.groups()[:6])
    try:
        days = datetime.date(y, mo, d).toordinal()
    except ValueError as exc:
        raise ValueError(f"TIMESTAMP {text!r}: {exc}") from None
    if h > 23 or mi > 59 or s > 60:
        raise ValueError(f"TIMESTAMP {text!r}: time of day out of range")
    digits = match.group(7) or "0"
    return days * 86400 + h * 3600 + mi * 60 + s, int(digits) / 10 ** len(digits)


def read_csv(path: str) -> Workload:
    """Requests from a trace file: the generic CSV ``arrival,prefill,decode[,class]``
    (seconds, tokens, tokens) or the Azure LLM inference 2023 format, told apart
    by the header (see :mod:`llmqueue.models.traces`).  A malformed row is an error
    naming the file and line."""
    return read_trace(path).workload()
