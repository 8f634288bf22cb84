"""Service-level objectives and attainment (docs/model.md §7.5).

* :class:`SLO`: thresholds in seconds on a request's TTFT, TPOT, largest
  inter-token gap (TBT), end-to-end latency and scheduling delay; ``None`` =
  not gated.  :meth:`SLO.relative` states them as multiples of each request's
  **unloaded** latencies (docs/model.md §7.6, :func:`llmqueue.theory.bounds.unloaded_latency`),
  as Splitwise and Mooncake do.  Per-class SLOs are a dict class -> SLO.
* :class:`RequestLatency`: one request's measured latencies (seconds).
* :func:`attainment`: the share of good requests (joint, DistServe's ``A``),
  the share meeting each gated metric, and in ``mode="quantile"`` whether each
  gated metric's ``q``-quantile is within its threshold (DistServe-sim, Vidur,
  Sarathi-Serve); :func:`good_throughput`: good requests per second.

A request is **good** when every gated metric is within its threshold.  A
request that has not finished counts as +inf on every metric (not good;
docs/model.md §7.5), and a finished request with ``vd = 1`` (TPOT and TBT undefined) passes
any TPOT or TBT threshold.  Quantiles are order statistics (the inverse of the
empirical CDF: the smallest value with at least a share ``q`` at or below it),
so a metric's ``q``-quantile is within its threshold exactly when its
per-metric attainment is at least ``q``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, Hashable, List, Mapping, NamedTuple, Optional, Sequence, Union

from llmqueue.common import validation

#: The gated metrics, in docs/model.md §7.5's order, and the :class:`RequestLatency` field of each.
METRICS = ("ttft", "tpot", "tbt", "e2e", "sched_delay")
FIELD = {"ttft": "ttft", "tpot": "tpot", "tbt": "tbt_max", "e2e": "e2e",
         "sched_delay": "sched_delay"}
#: Metrics undefined for a request of one decode token; such a request passes them.
UNDEFINED_AT_VD1 = ("tpot", "tbt")
#: The attainment conventions of docs/model.md §7.5.
MODES = ("joint", "quantile")


@dataclass(frozen=True)
class SLO:
    """Latency thresholds, one per metric, ``None`` = not gated.

    In seconds; with ``is_relative`` (built by :meth:`relative`) multiples of
    the request's unloaded latency of the same metric.  Every threshold given
    must be a finite number > 0.

    Examples:
        Three lone requests of 10 + 2 tokens on the paper's staircase have
        TTFT 2 x 0.04675 s and E2E 3 x 0.04675 s: all meet a 0.1 s TTFT, none
        a 0.1 s E2E.

        >>> import llmqueue as q
        >>> from llmqueue.theory.slo import attainment
        >>> run = q.simulate(q.renewal(1.0, 10, 2, count=3), requests=True)
        >>> attainment(run.latencies(), SLO(ttft=0.1, e2e=0.1)).per_metric
        {'ttft': 1.0, 'e2e': 0.0}
        >>> SLO(ttft=0.1).gated, SLO.relative(ttft=10).is_relative
        ({'ttft': 0.1}, True)
    """

    ttft: Optional[float] = None
    """Time to first token: first token - arrival (s)."""
    tpot: Optional[float] = None
    """Time per output token after the first: (finish - first token)/(vd - 1) (s)."""
    tbt: Optional[float] = None
    """Largest gap between two consecutive decode tokens of a request (s)."""
    e2e: Optional[float] = None
    """End-to-end latency: finish - arrival (s)."""
    sched_delay: Optional[float] = None
    """Start of the first iteration holding any of the request's tokens - arrival (s)."""
    is_relative: bool = False
    """Thresholds are multiples of each request's unloaded latencies (docs/model.md §7.6)."""

    def __post_init__(self) -> None:
        for name in METRICS:
            value = getattr(self, name)
            if value is not None:
                validation.positive_number(name, value)
        if not isinstance(self.is_relative, bool):
            raise ValueError(f"is_relative must be True or False, got {self.is_relative!r}")
        if self.is_relative and self.sched_delay is not None:
            raise ValueError(f"sched_delay cannot be relative (a request's unloaded scheduling "
                             f"delay is 0); got sched_delay={self.sched_delay!r}: give it in "
                             f"seconds with SLO(...) instead")

    @classmethod
    def relative(cls, ttft: Optional[float] = None, tpot: Optional[float] = None,
                 tbt: Optional[float] = None, e2e: Optional[float] = None) -> "SLO":
        """Thresholds as multiples of each request's unloaded TTFT, TPOT, TBT and
        E2E (``SLO.relative(ttft=10, tpot=5)``: 10 x its unloaded TTFT, ...)."""
        return cls(ttft=ttft, tpot=tpot, tbt=tbt, e2e=e2e, is_relative=True)

    @property
    def gated(self) -> Dict[str, float]:
        """The gated metrics and their thresholds (seconds, or multiples)."""
        return {name: getattr(self, name) for name in METRICS if getattr(self, name) is not None}


class Unloaded(NamedTuple):
    """A request's latencies on an otherwise empty engine (seconds, docs/model.md §7.6);
    ``tpot`` and ``tbt_max`` are ``None`` for a request of one decode token."""

    ttft: float
    tpot: Optional[float]
    tbt_max: Optional[float]
    e2e: float


class RequestLatency(NamedTuple):
    """One request's latencies in seconds (docs/model.md §7.5); ``None`` where undefined
    (``tpot`` and ``tbt_max`` at ``vd = 1``) or not reached when the run ended."""

    ttft: Optional[float] = None
    tpot: Optional[float] = None
    tbt_max: Optional[float] = None
    e2e: Optional[float] = None
    sched_delay: Optional[float] = None
    finished: bool = True
    """Whether its last token came before the run ended."""
    klass: Hashable = None
    """Its request class (the key of a per-class SLO)."""
    unloaded: Optional[Unloaded] = None
    """Its unloaded latencies, needed by relative SLOs."""

    @classmethod
    def from_times(cls, arrival: float, first_token: Optional[float],
                   finish: Optional[float], vd: int, scheduled: Optional[float] = None,
                   tbt_max: Optional[float] = None, klass: Hashable = None,
                   unloaded: Optional[Unloaded] = None) -> "RequestLatency":
        """The latencies of a request from its timestamps (seconds, ``None`` =
        not reached): ``ttft = first_token - arrival``, ``tpot = (finish -
        first_token)/(vd - 1)`` for ``vd > 1``, ``e2e = finish - arrival``,
        ``sched_delay = scheduled - arrival``; ``tbt_max`` as measured."""
        validation.positive_int("vd", vd)

        def since(t: Optional[float], origin: Optional[float]) -> Optional[float]:
            return None if t is None or origin is None else t - origin
        tpot = None
        if vd > 1 and finish is not None and first_token is not None:
            tpot = (finish - first_token) / (vd - 1)
        return cls(since(first_token, arrival), tpot, tbt_max if vd > 1 else None,
                   since(finish, arrival), since(scheduled, arrival), finish is not None,
                   klass, unloaded)


SLOLike = Union[SLO, Mapping[Hashable, SLO]]


@dataclass(frozen=True)
class Attainment:
    """What :func:`attainment` found.

    ``joint`` is ``A = good / n``.  ``per_metric`` holds, for each gated metric,
    the share of requests within its threshold.  In ``mode="quantile"``,
    ``quantiles`` holds each gated metric's ``q``-quantile (seconds; multiples of
    the unloaded latency for a relative SLO; +inf when more than a share ``1 - q``
    did not finish) and ``meets`` whether it is within its threshold; both are
    empty in joint mode and, for per-class SLOs, at the top level (see
    ``by_class``, where every class has its own result).
    """

    mode: str
    q: float
    n: int
    good: int
    joint: float
    per_metric: Dict[str, float]
    quantiles: Dict[str, float] = field(default_factory=dict)
    meets: Dict[str, bool] = field(default_factory=dict)
    by_class: Dict[Hashable, "Attainment"] = field(default_factory=dict)

    def passes(self, target: float = 0.9) -> bool:
        """Joint mode: ``A >= target``.  Quantile mode: every gated metric's
        ``q``-quantile within its threshold (``target`` unused)."""
        if self.mode == "quantile":
            return all(self.meets.values())
        return self.joint >= validation.fraction("target", target)


def _quantile_index(q: float, n: int) -> int:
    """Index of the ``q``-quantile order statistic among ``n`` sorted values:
    ``ceil(q n) - 1`` (rounded first, so 0.9 * 10 is 9, not 9.000000000000002)."""
    return max(0, math.ceil(round(q * n, 9)) - 1)


def _check_record(i: int, record: RequestLatency) -> None:
    if not isinstance(record, RequestLatency):
        raise ValueError(f"records[{i}] must be a RequestLatency, got {record!r}")
    for name in ("ttft", "tpot", "tbt_max", "e2e", "sched_delay"):
        value = getattr(record, name)
        if value is not None and not (isinstance(value, (int, float)) and value >= 0):
            raise ValueError(f"records[{i}].{name} must be a number of seconds >= 0 or None, "
                             f"got {value!r}")


def _score(i: int, record: RequestLatency, metric: str, relative: bool) -> float:
    """The number compared with ``metric``'s threshold: seconds, or a multiple
    of the unloaded latency; +inf when unfinished, 0 when undefined at vd = 1."""
    if not record.finished:
        return math.inf
    name = FIELD[metric]
    value = getattr(record, name)
    if value is None:
        if metric in UNDEFINED_AT_VD1:
            return 0.0
        raise ValueError(f"records[{i}].{name} must be a number of seconds for a finished "
                         f"request when {metric} is gated, got None")
    if not relative:
        return float(value)
    if record.unloaded is None:
        raise ValueError(f"records[{i}].unloaded must hold the request's unloaded latencies "
                         f"for a relative SLO, got None")
    base = getattr(record.unloaded, name)
    if base is None:
        return 0.0
    if not base > 0:
        raise ValueError(f"records[{i}].unloaded.{name} must be > 0 seconds, got {base!r}")
    return float(value) / base


def _one(records: Sequence[RequestLatency], offsets: Sequence[int], slo: SLO, mode: str,
         q: float) -> Attainment:
    n = len(records)
    ok = [r.finished for r in records]  # unfinished: never good
    per_metric: Dict[str, float] = {}
    quantiles: Dict[str, float] = {}
    meets: Dict[str, bool] = {}
    for metric, limit in slo.gated.items():
        scores = [_score(i, r, metric, slo.is_relative) for i, r in zip(offsets, records)]
        passed = [s <= limit for s in scores]
        ok = [a and b for a, b in zip(ok, passed)]
        per_metric[metric] = sum(passed) / n
        if mode == "quantile":
            quantiles[metric] = sorted(scores)[_quantile_index(q, n)]
            meets[metric] = quantiles[metric] <= limit
    good = sum(ok)
    return Attainment(mode, q, n, good, good / n, per_metric, quantiles, meets)


def attainment(records: Sequence[RequestLatency], slo: SLOLike, mode: str = "joint",
               q: float = 0.9) -> Attainment:
    """SLO attainment of ``records`` (the requests of the measurement window).

    ``slo`` is one :class:`SLO` or a dict class -> SLO (every record's ``klass``
    must be a key).  ``mode`` is ``"joint"`` or ``"quantile"``; ``q`` in (0, 1)
    is the quantile of quantile mode.  See the module docstring for the rules.
    """
    validation.choice("mode", mode, MODES)
    if not (isinstance(q, (int, float)) and not isinstance(q, bool) and 0 < q < 1):
        raise ValueError(f"q must be a number in (0, 1) (the quantile of quantile mode), "
                         f"got {q!r}")
    records = list(records)
    if not records:
        raise ValueError("records must hold at least one request, got none")
    for i, record in enumerate(records):
        _check_record(i, record)
    if isinstance(slo, SLO):
        return _one(records, range(len(records)), slo, mode, q)
    if not isinstance(slo, Mapping) or not all(isinstance(s, SLO) for s in slo.values()):
        raise ValueError(f"slo must be an SLO or a dict class -> SLO, got {slo!r}")
    groups: Dict[Hashable, List[int]] = {}
    for i, record in enumerate(records):
        if record.klass not in slo:
            raise ValueError(f"slo has no entry for records[{i}].klass={record.klass!r}; "
                             f"its classes are {list(slo)}")
        groups.setdefault(record.klass, []).append(i)
    by_class = {k: _one([records[i] for i in idx], idx, slo[k], mode, q)
                for k, idx in groups.items()}
    good = sum(a.good for a in by_class.values())
    per_metric: Dict[str, float] = {}
    meets: Dict[str, bool] = {}
    for metric in METRICS:
        gating = [a for a in by_class.values() if metric in a.per_metric]
        if gating:
            per_metric[metric] = (sum(a.per_metric[metric] * a.n for a in gating)
                                  / sum(a.n for a in gating))
            if mode == "quantile":
                meets[metric] = all(a.meets[metric] for a in gating)
    return Attainment(mode, q, len(records), good, good / len(records), per_metric, {}, meets,
                      by_class)


def good_throughput(records: Sequence[RequestLatency], slo: SLOLike,
                    arrival_span: float) -> float:
    """Good requests per second: the good requests of ``records`` (joint rule)
    over ``arrival_span``, the seconds between the window's first and last
    arrivals (docs/model.md §7.5)."""
    validation.positive_number("arrival_span", arrival_span)
    return attainment(records, slo).good / arrival_span
