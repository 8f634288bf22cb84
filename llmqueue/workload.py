"""Where requests come from: arrival streams of ``(time, prefill, decode[, class])``.

A workload is an iterable of :class:`Arrival` in time order (seconds).  Its
``count`` is the number of requests it yields, or ``None`` for an endless
stream, which then needs a horizon.
"""

from __future__ import annotations

import csv
import itertools
from typing import Hashable, Iterable, Iterator, List, NamedTuple, Optional, Sequence

import numpy as np

from . import validation


class Arrival(NamedTuple):
    """One request: arrival time (s), prefill tokens, decode tokens, class."""

    time: float
    prefill: int
    decode: int
    klass: Hashable = None


class Workload:
    """A replayable stream of arrivals: each iteration starts afresh.

    ``rate`` (requests/s), ``mean_prefill`` and ``mean_decode`` (tokens) are the
    stream's long-run figures where known (``None`` otherwise); the stability
    verdicts of a run compare it with Theorem 2 through them.
    """

    def __init__(self, make: "callable[[], Iterator[Arrival]]", count: Optional[int],
                 description: str, rate: Optional[float] = None,
                 mean_prefill: Optional[float] = None,
                 mean_decode: Optional[float] = None) -> None:
        self._make = make
        self.count = count
        self.description = description
        self.rate = rate
        self.mean_prefill = mean_prefill
        self.mean_decode = mean_decode

    def __iter__(self) -> Iterator[Arrival]:
        it = self._make()
        return it if self.count is None else itertools.islice(it, self.count)

    def __repr__(self) -> str:
        return f"Workload({self.description})"


def _sizes(prefill: int, decode: int) -> None:
    validation.nonnegative_int("vp", prefill)
    validation.positive_int("vd", decode)


def renewal(gap: float, prefill: int, decode: int, count: Optional[int] = None) -> Workload:
    """Arrivals at ``gap, 2*gap, 3*gap, ...`` (SPEC 2), each of fixed size."""
    validation.positive_number("gap", gap)
    _sizes(prefill, decode)
    if count is not None:
        validation.positive_int("count", count)

    def make() -> Iterator[Arrival]:
        for k in itertools.count(1):
            yield Arrival(k * gap, prefill, decode)

    return Workload(make, count, f"renewal gap={gap} s, {prefill}+{decode} tokens",
                    rate=1.0 / gap, mean_prefill=prefill, mean_decode=decode)


def poisson(rate: float, prefill: int, decode: int, seed: int = 0,
            count: Optional[int] = None) -> Workload:
    """Poisson arrivals at ``rate`` per second from a seeded numpy generator."""
    validation.positive_number("rate", rate)
    _sizes(prefill, decode)
    validation.nonnegative_int("seed", seed)
    if count is not None:
        validation.positive_int("count", count)

    def make() -> Iterator[Arrival]:
        rng = np.random.default_rng(seed)
        t = 0.0
        while True:
            for gap in rng.exponential(1.0 / rate, 4096).tolist():
                t += gap
                yield Arrival(t, prefill, decode)

    return Workload(make, count, f"poisson rate={rate}/s, {prefill}+{decode} tokens, seed={seed}",
                    rate=rate, mean_prefill=prefill, mean_decode=decode)


def from_list(rows: Iterable[Sequence]) -> Workload:
    """Arrivals from ``(time, prefill, decode[, class])`` rows, checked and sorted
    by time (stable, so equal times keep their order)."""
    arrivals: List[Arrival] = []
    for i, row in enumerate(rows):
        if len(row) not in (3, 4):
            raise ValueError(f"request {i}: expected (arrival, prefill, decode[, class]), "
                             f"got {row!r}")
        time = validation.nonnegative_number(f"request {i} arrival", row[0])
        prefill = validation.nonnegative_int(f"request {i} prefill", row[1])
        decode = validation.positive_int(f"request {i} decode", row[2])
        arrivals.append(Arrival(time, prefill, decode, row[3] if len(row) == 4 else None))
    arrivals.sort(key=lambda a: a.time)
    n = len(arrivals)
    span = arrivals[-1].time if arrivals else 0.0
    return Workload(lambda: iter(arrivals), n, f"{n} listed requests",
                    rate=n / span if span > 0 else None,  # n arrivals in (0, t_n], as renewal
                    mean_prefill=sum(a.prefill for a in arrivals) / n if n else None,
                    mean_decode=sum(a.decode for a in arrivals) / n if n else None)


def read_csv(path: str) -> Workload:
    """Requests from a CSV file with the header ``arrival,prefill,decode[,class]``
    (seconds, tokens, tokens).  A malformed row is an error naming the file and line."""
    rows = []
    try:
        handle = open(path, newline="")
    except OSError as exc:
        raise ValueError(f"path: cannot read {path!r}: {exc.strerror}") from None
    with handle:
        reader = csv.reader(handle)
        header = [h.strip() for h in next(reader, [])]
        if header[:3] != ["arrival", "prefill", "decode"]:
            raise ValueError(f"{path}:1: header must be arrival,prefill,decode[,class]; "
                             f"got {','.join(header)!r}")
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            try:
                if len(row) != len(header):
                    raise ValueError(f"expected {len(header)} fields, got {len(row)}")
                values = [float(row[0]), _int(row[1]), _int(row[2])]
                if len(row) == 4:
                    values.append(row[3].strip())
                rows.append(values)
            except ValueError as exc:
                raise ValueError(f"{path}:{line}: {exc}") from None
    try:
        return from_list(rows)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _int(text: str) -> int:
    value = float(text)
    if not value.is_integer():
        raise ValueError(f"token count must be a whole number, got {text!r}")
    return int(value)
