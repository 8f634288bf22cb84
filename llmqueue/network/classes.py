"""Request classes: each with its own arrival rate and size laws (docs/model.md §9.4),
and figures broken down by class.

Sizes follow the laws of :mod:`llmqueue.models.sizes` (a plain integer is a fixed
size).  A class stream superposes independent Poisson streams, one per class,
into one :class:`~llmqueue.workload.Workload` whose arrivals carry their class;
any engine, pool or :func:`~llmqueue.simulate` run takes it as is.
:func:`by_class` turns the requests of a run back into per-class figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Hashable, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from llmqueue.common import validation
from llmqueue.common.percentiles import named_percentiles
from llmqueue.common.units import to_seconds
from llmqueue.models.sizes import Fixed, SizeLike, as_law, decode_sizes
from llmqueue.models.workload import Arrival, Workload
from llmqueue.policies.view import Request


@dataclass(frozen=True)
class RequestClass:
    """A class of requests: Poisson arrivals at ``rate`` per second with
    prefill and decode sizes from their own laws."""

    name: Hashable
    rate: float
    prefill: SizeLike
    decode: SizeLike

    def __post_init__(self) -> None:
        validation.positive_number(f"class {self.name!r} rate", self.rate)


def class_stream(classes: Sequence[RequestClass], seed: int = 0,
                 count: Optional[int] = None) -> Workload:
    """Poisson arrivals of every class, merged in time order (the superposition
    is Poisson at the total rate; each arrival's class is drawn in proportion to
    the rates), each class's sizes from its own laws."""
    if not classes:
        raise ValueError("classes must name at least one RequestClass, got none")
    validation.seed("seed", seed)
    rates = np.array([c.rate for c in classes], dtype=float)
    total = float(rates.sum())
    share = rates / total
    laws = [(as_law("prefill", c.prefill), as_law("decode", c.decode)) for c in classes]
    for _, decode in laws:
        if isinstance(decode, Fixed) and decode.value < 1:
            raise ValueError(f"decode sizes must be >= 1, got a fixed {decode.value}")

    def make() -> Iterator[Arrival]:
        rng = np.random.default_rng(seed)
        t = 0.0
        while True:
            t += float(rng.exponential(1.0 / total))
            i = int(rng.choice(len(classes), p=share))
            prefill, decode = laws[i]
            yield Arrival(t, prefill.draw(rng), int(decode_sizes(decode, rng, 1)[0]),
                          classes[i].name)

    names = ", ".join(f"{c.name}@{c.rate}/s" for c in classes)
    return Workload(make, count, f"classes {names}, seed={seed}", rate=total)


def by_class(requests: Iterable[Request], end: Optional[int] = None
             ) -> Dict[Hashable, Dict[str, Any]]:
    """Per-class figures from a run's requests (``Result.request_log`` or a
    network's calls): counts, pending (time average over ``[0, end]`` and at
    the end), tokens served per second by finished requests, and TTFT / TPOT /
    E2E percentiles in seconds.  ``end`` (ticks) is the run's end; by default
    the last event among the requests."""
    requests = list(requests)
    if end is None:
        end = max((r.finished if r.finished is not None else r.arrival for r in requests),
                  default=0)
    groups: Dict[Hashable, List[Request]] = {}
    for r in requests:
        groups.setdefault(r.klass, []).append(r)
    out: Dict[Hashable, Dict[str, Any]] = {}
    for klass, rs in groups.items():
        done = [r for r in rs if r.finished is not None and r.finished <= end]
        marks = [_marks(r) for r in done]
        ttft = [to_seconds(first - r.arrival) for r, (first, _) in zip(done, marks)]
        tpot = [to_seconds(last - first) / (r.vd - 1) for r, (first, last) in zip(done, marks)
                if r.vd > 1]
        e2e = [to_seconds(last - r.arrival) for r, (_, last) in zip(done, marks)]
        # pending(t) for the class integrates to the time its requests spent in the system
        sojourn = sum(min(r.finished if r.finished is not None else end, end) - r.arrival
                      for r in rs if r.arrival <= end)
        row: Dict[str, Any] = {
            "arrivals": len(rs), "completed": len(done),
            "pending_mean": sojourn / end if end else None,
            "pending_final": sum(1 for r in rs if r.arrival <= end
                                 and (r.finished is None or r.finished > end)),
            "tokens_per_s": sum(r.vd if r.prefilled else r.vp + r.vd for r in done)
            / to_seconds(end) if end else None}
        for name, values in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
            row.update(named_percentiles(name, values))
        out[klass] = row
    return out


def _marks(r: Request) -> Tuple[int, int]:
    """``(first_token, finished)`` of a finished request, which has both."""
    assert r.first_token is not None and r.finished is not None
    return r.first_token, r.finished
