"""Request classes: each with its own arrival rate and size laws (SPEC 6.4),
and figures broken down by class.

A size law draws token counts from a seeded numpy generator.  A class stream
superposes independent Poisson streams, one per class, into one
:class:`~llmqueue.workload.Workload` whose arrivals carry their class; any
engine, pool or :func:`~llmqueue.simulate` run takes it as is.
:func:`by_class` turns the requests of a run back into per-class figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Hashable, Iterable, Iterator, List, Optional, Sequence, Union

import numpy as np

from .clock import to_seconds
from .state import Resident
from .workload import Arrival, Workload
from . import validation


@dataclass(frozen=True)
class Fixed:
    """Always ``tokens`` tokens."""

    tokens: int

    def __post_init__(self) -> None:
        validation.nonnegative_int("tokens", self.tokens)

    def draw(self, rng: np.random.Generator) -> int:
        """One size."""
        return self.tokens


@dataclass(frozen=True)
class PoissonSize:
    """Poisson(``mean``) tokens, raised to ``minimum`` when a draw falls below
    it (decode sizes need ``minimum=1``; Poisson(32) is 0 with probability
    e^-32, about 1e-14, so the mean is unchanged for any practical purpose)."""

    mean: float
    minimum: int = 0

    def __post_init__(self) -> None:
        validation.positive_number("mean", self.mean)
        validation.nonnegative_int("minimum", self.minimum)

    def draw(self, rng: np.random.Generator) -> int:
        """One size."""
        return max(self.minimum, int(rng.poisson(self.mean)))


@dataclass(frozen=True)
class Uniform:
    """Uniform on the integers ``low .. high - 1``."""

    low: int
    high: int

    def __post_init__(self) -> None:
        validation.nonnegative_int("low", self.low)
        if not isinstance(self.high, int) or self.high <= self.low:
            raise ValueError(f"high must be an integer > low={self.low}, got {self.high!r}")

    def draw(self, rng: np.random.Generator) -> int:
        """One size."""
        return int(rng.integers(self.low, self.high))


@dataclass(frozen=True)
class Geometric:
    """Geometric tokens on 1, 2, ... with mean ``mean`` (the discrete
    exponential: a high-variance size law)."""

    mean: float

    def __post_init__(self) -> None:
        if not isinstance(self.mean, (int, float)) or not self.mean >= 1:
            raise ValueError(f"mean must be a number >= 1, got {self.mean!r}")

    def draw(self, rng: np.random.Generator) -> int:
        """One size."""
        return int(rng.geometric(1.0 / self.mean))


SizeLaw = Union[Fixed, PoissonSize, Uniform, Geometric]


def size_law(spec: Union[int, SizeLaw]) -> SizeLaw:
    """A size law, or a fixed one from a plain integer."""
    return Fixed(spec) if isinstance(spec, int) and not isinstance(spec, bool) else spec


@dataclass(frozen=True)
class RequestClass:
    """A class of requests: Poisson arrivals at ``rate`` per second with
    prefill and decode sizes from their own laws."""

    name: Hashable
    rate: float
    prefill: Union[int, SizeLaw]
    decode: Union[int, SizeLaw]

    def __post_init__(self) -> None:
        validation.positive_number(f"class {self.name!r} rate", self.rate)


def class_stream(classes: Sequence[RequestClass], seed: int = 0,
                 count: Optional[int] = None) -> Workload:
    """Poisson arrivals of every class, merged in time order (the superposition
    is Poisson at the total rate; each arrival's class is drawn in proportion to
    the rates), each class's sizes from its own laws."""
    if not classes:
        raise ValueError("classes must name at least one RequestClass, got none")
    validation.nonnegative_int("seed", seed)
    rates = np.array([c.rate for c in classes], dtype=float)
    total = float(rates.sum())
    share = rates / total
    laws = [(size_law(c.prefill), size_law(c.decode)) for c in classes]
    for prefill, decode in laws:
        if isinstance(decode, Fixed) and decode.tokens < 1:
            raise ValueError(f"decode sizes must be >= 1, got a fixed {decode.tokens}")

    def make() -> Iterator[Arrival]:
        rng = np.random.default_rng(seed)
        t = 0.0
        while True:
            t += float(rng.exponential(1.0 / total))
            i = int(rng.choice(len(classes), p=share))
            prefill, decode = laws[i]
            yield Arrival(t, prefill.draw(rng), max(1, decode.draw(rng)), classes[i].name)

    names = ", ".join(f"{c.name}@{c.rate}/s" for c in classes)
    return Workload(make, count, f"classes {names}, seed={seed}")


def by_class(requests: Iterable[Resident]) -> Dict[Hashable, Dict[str, object]]:
    """Per-class figures from a run's requests (``Result.request_log`` or a
    network's calls): counts and TTFT / TPOT / E2E percentiles in seconds."""
    groups: Dict[Hashable, List[Resident]] = {}
    for r in requests:
        groups.setdefault(r.klass, []).append(r)
    out: Dict[Hashable, Dict[str, object]] = {}
    for klass, rs in groups.items():
        done = [r for r in rs if r.finished is not None]
        ttft = [to_seconds(r.first_token - r.arrival) for r in done]
        tpot = [to_seconds(r.finished - r.first_token) / (r.vd - 1) for r in done if r.vd > 1]
        e2e = [to_seconds(r.finished - r.arrival) for r in done]
        row: Dict[str, object] = {"arrivals": len(rs), "completed": len(done)}
        for name, values in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
            row.update(percentiles(name, values))
        out[klass] = row
    return out


def percentiles(name: str, values: Sequence[float]) -> Dict[str, Optional[float]]:
    """``name_p50``, ``name_p90``, ``name_p99`` of ``values`` (None when empty)."""
    if not len(values):
        return {f"{name}_p{q}": None for q in (50, 90, 99)}
    p = np.percentile(np.asarray(values, dtype=float), [50, 90, 99])
    return {f"{name}_p50": float(p[0]), f"{name}_p90": float(p[1]), f"{name}_p99": float(p[2])}
