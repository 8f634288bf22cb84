"""Trace files: requests recorded elsewhere, read into a :class:`Trace`.

Two CSV formats, told apart by the header line:

* generic: ``arrival,prefill,decode[,class]`` (seconds, tokens, tokens, a label);
* Azure LLM inference 2023 (Patel et al., *Splitwise*, ISCA 2024):
  ``TIMESTAMP,ContextTokens,GeneratedTokens`` with timestamps such as
  ``2023-11-16 18:17:03.9799600`` (seven fractional digits, which
  ``datetime.fromisoformat`` does not take before Python 3.11).  The arrival of
  a row is the seconds since the first row, computed with whole seconds and
  fractions apart so no digit is lost; a row earlier than the first is an error;

and the Mooncake FAST'25 JSON Lines (docs/model.md §8.5, :mod:`llmqueue.models.mooncake`),
read by default from a file named ``*.jsonl``: ``timestamp`` (ms) becomes the
arrival in seconds, ``input_length`` the prompt, ``output_length`` the decode
tokens and ``hash_ids`` the prompt's content ids (``Trace.blocks``, one per
``hash_block`` = 512 tokens unless given), which its workload's arrivals carry.

A malformed row (a malformed line of JSON) is a ``ValueError`` naming the file
and line.  The model needs
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
from typing import Any, Callable, Hashable, Iterator, List, Optional, Tuple

import numpy as np

from llmqueue.common import files, limits, validation
from llmqueue.models import mooncake
from llmqueue.models.arrivals import TraceTimes
from llmqueue.models.prefixes import hash_block_size
from llmqueue.models.sizes import Empirical
from llmqueue.models.workload import Workload, from_list

GENERIC = ["arrival", "prefill", "decode"]
AZURE = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
ZERO_DECODE = ("one", "drop", "error")
#: What ``read_trace(format=...)`` takes: ``"csv"`` is generic or Azure 2023 by the header.
FORMATS = ("csv", "generic", "azure-2023", "mooncake")
_Row = Tuple[float, int, int, Any]  # a parsed row: time, prefill, decode, class or hash ids
_STAMP = re.compile(r"\s*(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\s*$")


@dataclass
class Trace:
    """The requests of a trace file, in arrival order."""

    path: str
    format: str                     # "generic", "azure-2023" or "mooncake"
    times: np.ndarray               # seconds (Azure: since the first row)
    prefill: np.ndarray             # tokens
    decode: np.ndarray              # tokens, >= 1
    classes: Optional[List[Hashable]] = None
    zero_decode_rows: int = 0       # rows that had 0 decode tokens
    blocks: Optional[List[Tuple[int, ...]]] = None  # each prompt's hash ids (Mooncake)
    hash_block: Optional[int] = None  # tokens per id

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
        ``speedup`` (which multiplies whatever rate they arrive at).  A trace
        with hash ids gives arrivals with ``blocks`` and ``hash_block``."""
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
        work = from_list(rows)  # in the trace's order: its times do not decrease
        if self.blocks is not None:
            listed = [a._replace(blocks=ids, hash_block=self.hash_block)
                      for a, ids in zip(work, self.blocks[:n])]
            work = replace(work, make=lambda: iter(listed), hash_block=self.hash_block)
        return replace(work, description=description)


def read_trace(path: str, zero_decode: str = "one", format: Optional[str] = None,
               hash_block: Optional[int] = None) -> Trace:
    """Read a trace file (see the module docstring): ``format`` ``"csv"``
    (generic or Azure 2023, told apart by the header; ``"generic"`` or
    ``"azure-2023"`` insist on one) or ``"mooncake"`` (JSON Lines, with the
    prompts' hash ids: ``Trace.blocks``, ``hash_block`` tokens per id, 512 by
    default); by default ``"mooncake"`` for a name ending in ``.jsonl``, else
    ``"csv"``."""
    validation.choice("zero_decode", zero_decode, ZERO_DECODE)
    name = files.file_name("path", path)
    if format is None:
        format = "mooncake" if name.lower().endswith(".jsonl") else "csv"
    validation.choice("format", format, FORMATS)
    if hash_block is not None:
        if format != "mooncake":
            raise ValueError(f"hash_block applies to Mooncake traces (format='mooncake'), "
                             f"not to {format!r} ones; got hash_block={hash_block!r}")
        hash_block = hash_block_size(hash_block)
    _check_rows(path, header=format != "mooncake")
    rows: List[_Row] = []
    zeros = 0
    with files.open_text_input(path) as handle:
        if format == "mooncake":
            kind, classed = "mooncake", False
            records: Iterator[Tuple[int, Any]] = ((line, text) for line, text in
                                                  enumerate(handle, 1) if text.strip())
            parse: Callable[[Any], _Row] = mooncake.parse_line
        else:
            kind, classed, records, parse = _csv_records(handle, format)
        for line, record in records:
            try:
                time, prefill, decode, extra = parse(record)
                if decode == 0:
                    zeros += 1
                    if not _keep_zero(zero_decode, kind):
                        continue
                    decode = 1
            except ValueError as exc:
                raise ValueError(f"{handle.name}:{line}: {exc}") from None
            rows.append((time, prefill, decode, extra))
    rows.sort(key=lambda r: r[0])  # stable: equal times keep their order
    extras = [r[3] for r in rows]
    return Trace(path, kind, np.array([r[0] for r in rows], dtype=float),
                 np.array([r[1] for r in rows], dtype=np.int64),
                 np.array([r[2] for r in rows], dtype=np.int64), extras if classed else None,
                 zeros, extras if kind == "mooncake" else None,
                 (hash_block or mooncake.HASH_BLOCK) if kind == "mooncake" else None)


def _keep_zero(zero_decode: str, kind: str) -> bool:
    """Whether a row of 0 decode tokens is kept (as one token); ``"error"``
    refuses it."""
    if zero_decode == "error":
        column = "output_length" if kind == "mooncake" else "decode"
        raise ValueError(f"{column} must be an integer >= 1, got 0 "
                         "(read with zero_decode='one' or 'drop')")
    return zero_decode == "one"


def _csv_records(handle: files.TextInput, format: str
                 ) -> Tuple[str, bool, Iterator[Tuple[int, Any]], Callable[[Any], _Row]]:
    """A CSV trace's kind (by its header), whether it has classes, its
    non-blank rows with their line numbers, and the parser of a row."""
    reader = files.csv_rows(handle, handle.name)
    header = [h.strip() for h in next(reader, (1, []))[1]]
    if header[:3] == GENERIC and len(header) in (3, 4):
        kind, parse = "generic", _generic_row
    elif header == AZURE:
        kind, parse = "azure-2023", _AzureRows().parse
    else:
        raise ValueError(f"{handle.name}:1: header must be arrival,prefill,decode[,class] or "
                         f"TIMESTAMP,ContextTokens,GeneratedTokens (Azure 2023); "
                         f"got {','.join(header)!r}")
    if format not in ("csv", kind):
        raise ValueError(f"{handle.name}:1: format={format!r}, but the header is that of a "
                         f"{kind!r} trace: {','.join(header)!r}")
    width = len(header)

    def checked(row: List[str]) -> _Row:
        if len(row) != width:
            raise ValueError(f"expected {width} fields, got {len(row)}")
        return parse(row)

    records = ((line, row) for line, row in reader if row and "".join(row).strip())
    return kind, width == 4, records, checked


def _check_rows(path: str, header: bool = True) -> None:
    """Refuse a trace of more request rows (rows after the ``header`` that are
    not blank) than one run may bring, with :func:`limits.check_requests`'s
    message, before any row is parsed.  Its line breaks are counted first: a
    file of no more lines than the limit is not counted again.  A file that
    cannot be read is left to the read, which names the file and line."""
    cap = limits.limit("max_requests", limits.MAX_REQUESTS)
    rows = -1 if header else 0  # the header is no request
    try:
        with files.open_text_input(path) as handle:
            if sum(part.count("\n") for part in iter(lambda: handle.read(1 << 20), "")) <= cap:
                return  # rows after the header <= line breaks
        with files.open_text_input(path) as handle:
            lines = (row for _, row in files.csv_rows(handle, handle.name)) if header else (
                [line] for line in handle)
            for row in lines:
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


def _generic_row(row: List[str]) -> _Row:
    try:
        time = float(row[0])
    except ValueError:
        raise ValueError(f"arrival must be a time in seconds, got {row[0]!r}") from None
    validation.time_point("arrival", time)
    klass = row[3].strip() if len(row) == 4 else None
    return time, _count("prefill", row[1]), _count("decode", row[2]), klass


class _AzureRows:
    """Azure 2023 rows: seconds since the first row's timestamp."""

    def __init__(self) -> None:
        self.origin: Optional[Tuple[int, float]] = None

    def parse(self, row: List[str]) -> _Row:
        """One row as ``(time, prefill, decode, None)``."""
        whole, frac = parse_timestamp(row[0])
        if self.origin is None:
            self.origin = (whole, frac)
        time = (whole - self.origin[0]) + (frac - self.origin[1])
        if time < 0:
            raise ValueError(f"TIMESTAMP {row[0].strip()!r} is earlier than the first row's; "
                             "rows must be in time order")
        return time, _count("ContextTokens", row[1]), _count("GeneratedTokens", row[2]), None


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
