"""What a run produces, in one schema: a :class:`Summary` of figures, the
iterations as :class:`Batch` rows, the requests as :class:`RequestTimes` rows,
and the :class:`Result` holding them with its CSV writers.

Times are seconds at this boundary.  Inside the engine they are integer
nanoseconds; :attr:`Result.batch_log` and :attr:`Result.request_log` keep that
internal form (exact, for equivalence tests), and :meth:`Result.batches`,
:meth:`Result.requests` and the writers convert.
"""

from __future__ import annotations

import csv
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np

from llmqueue.common.frames import frame
from llmqueue.common.units import to_seconds
from llmqueue.engine.records import Batch, RequestMemory, RequestTimes, memory_columns, seconds
from llmqueue.policies.view import Request, output_tokens
from llmqueue.theory.histogram import GapHistogram
from llmqueue.theory.slo import RequestLatency

if TYPE_CHECKING:  # pragma: no cover
    import pandas


@dataclass(frozen=True, eq=False)
class Summary(Mapping[str, Any]):
    """The figures of one run (docs/model.md §5), times in seconds.

    It reads like the ``--json`` row it becomes (``summary["pending_mean"]``,
    ``dict(summary)``); the typed fields below are the engine's own figures,
    and :attr:`figures` holds those a caller adds (stability verdicts, an
    experiment's own columns).  Rows that aggregate several runs (built with
    :meth:`from_mapping`) hold only the fields they were given.
    """

    arrivals: Optional[int] = None
    """Requests that arrived in the observed span."""
    completed: Optional[int] = None
    """Requests that finished in the observed span."""
    residents_final: Optional[int] = None
    """Requests holding a slot at the end."""
    waiting_final: Optional[int] = None
    """Requests waiting for a slot at the end."""
    pending_mean: Optional[float] = None
    """Time average of pending (residents + waiting), requests."""
    pending_max: Optional[int] = None
    """Largest pending held for a positive time, requests."""
    pending_final: Optional[int] = None
    """Pending at the end, requests."""
    backlog_mean: Optional[float] = None
    """Time average of the unprocessed tokens in the system, tokens."""
    backlog_max: Optional[int] = None
    """Largest backlog held for a positive time, tokens."""
    backlog_final: Optional[int] = None
    """Backlog at the end, tokens."""
    batches: Optional[int] = None
    """Iterations run."""
    decode_batch_mean: Optional[float] = None
    """Mean decode tokens over the iterations holding at least one decode."""
    mixed_fraction: Optional[float] = None
    """Share of iterations with both prefill and decode tokens."""
    decode_only_fraction: Optional[float] = None
    """Share of iterations with decode tokens only."""
    prefill_only_fraction: Optional[float] = None
    """Share of iterations with prefill tokens only."""
    busy_fraction: Optional[float] = None
    """Share of the span the GPU ran iterations."""
    throughput_tokens_per_s: Optional[float] = None
    """Tokens processed per second of the span (prefill, recomputed and decode tokens)."""
    output_tokens_per_s: Optional[float] = None
    """Output tokens per second of the span: decode tokens, and first tokens
    emitted with prefills (``first_token="prefill"``)."""
    prefill_tokens_per_s: Optional[float] = None
    """Prompt tokens computed per second of the span, recomputed ones included."""
    ttft_p50: Optional[float] = None
    """Time to first token, median, s."""
    ttft_p90: Optional[float] = None
    """Time to first token, 90th percentile, s."""
    ttft_p99: Optional[float] = None
    """Time to first token, 99th percentile, s."""
    tpot_p50: Optional[float] = None
    """Time per output token after the first, median, s."""
    tpot_p90: Optional[float] = None
    """Time per output token, 90th percentile, s."""
    tpot_p99: Optional[float] = None
    """Time per output token, 99th percentile, s."""
    tbt_p50: Optional[float] = None
    """Gap between two consecutive decode tokens, over every gap, median, s (exact,
    or within 0.5 % past 4096 different lengths: docs/model.md §7.5's 1 % bins)."""
    tbt_p90: Optional[float] = None
    """Inter-token gap over every gap, 90th percentile, s."""
    tbt_p99: Optional[float] = None
    """Inter-token gap over every gap, 99th percentile, s (Sarathi-Serve's P99 TBT)."""
    sched_delay_p50: Optional[float] = None
    """Scheduling delay (first iteration with its tokens - arrival), median, s."""
    sched_delay_p90: Optional[float] = None
    """Scheduling delay, 90th percentile, s."""
    sched_delay_p99: Optional[float] = None
    """Scheduling delay, 99th percentile, s."""
    e2e_mean: Optional[float] = None
    """Mean arrival-to-finish latency of finished requests, s."""
    non_work_conserving_batches: Optional[int] = None
    """Iterations smaller than min(bmax, demand) (docs/model.md §3)."""
    backlog_slope: Optional[float] = None
    """Backlog drift over the second half of the span, tokens/s."""
    backlog_slope_se: Optional[float] = None
    """Standard error of :attr:`backlog_slope`, tokens/s."""
    duration: Optional[float] = None
    """Length of the observed span (after any warm-up), s."""
    figures: Mapping[str, Any] = field(default_factory=dict)
    """Further figures by name, in the order they were added."""
    present: Tuple[str, ...] = field(default=(), repr=False, compare=False)
    """The typed fields this summary holds (all, for one run's summary)."""

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "Summary":
        """A summary holding exactly ``values``: names of typed fields fill
        those fields, the others go to :attr:`figures`."""
        typed = {k: v for k, v in values.items() if k in _TYPED}
        rest = {k: v for k, v in values.items() if k not in _TYPED}
        return cls(**typed, figures=rest, present=tuple(typed))

    @classmethod
    def of_run(cls, **values: Any) -> "Summary":
        """One run's summary: every typed field must be given."""
        missing = [name for name in _TYPED if name not in values]
        if missing:
            raise TypeError(f"a run's summary needs {', '.join(missing)}")
        return cls.from_mapping(values)

    def with_figures(self, **values: Any) -> "Summary":
        """This summary with ``values`` set (typed fields replaced, others added
        to :attr:`figures`)."""
        typed = {k: v for k, v in values.items() if k in _TYPED}
        rest = {k: v for k, v in values.items() if k not in _TYPED}
        present = self.present + tuple(k for k in typed if k not in self.present)
        return dataclasses.replace(self, **typed, figures={**self.figures, **rest},
                                   present=present)

    def as_dict(self) -> Dict[str, Any]:
        """The figures as one plain dict: typed fields first, in their order."""
        out = {name: getattr(self, name) for name in _TYPED if name in self.present}
        out.update(self.figures)
        return out

    def __getitem__(self, key: str) -> Any:
        if key in _TYPED and key in self.present:
            return getattr(self, key)
        return self.figures[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.as_dict())

    def __len__(self) -> int:
        return len(self.present) + len(self.figures)

    def __eq__(self, other: object) -> bool:
        """Equal to any mapping with the same figures (a summary is its row)."""
        if not isinstance(other, Mapping):
            return NotImplemented
        return self.as_dict() == dict(other)

    __hash__ = None  # type: ignore[assignment]  # a mapping of mutable figures


def token_rates(decode: int, prefill: int, emitted: int, span: int) -> Dict[str, Optional[float]]:
    """A run's token rates over ``span`` ns: ``throughput_tokens_per_s`` (every
    token processed), ``output_tokens_per_s`` (``decode`` tokens and the
    ``emitted`` first tokens that came with a prefill) and
    ``prefill_tokens_per_s``; ``None`` for an empty span.  Output plus prefill
    is the throughput plus the emitted first tokens' rate (they cost no token
    of work: the prefill's iteration samples them)."""
    if not span:
        return {"throughput_tokens_per_s": None, "output_tokens_per_s": None,
                "prefill_tokens_per_s": None}
    seconds = to_seconds(span)
    return {"throughput_tokens_per_s": (decode + prefill) / seconds,
            "output_tokens_per_s": (decode + emitted) / seconds,
            "prefill_tokens_per_s": prefill / seconds}


_TYPED: Tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Summary)
                                if f.name not in ("figures", "present"))


@dataclass
class Result:
    """What one run produced: its summary and whatever logs were asked for."""

    summary: Summary
    params: Dict[str, Any] = field(default_factory=dict)
    batch_log: Optional[List[Batch]] = None
    """Every iteration, times in ns (kept when run with ``batches=True``)."""
    request_log: Optional[List[Request]] = None
    """Every request that arrived, times in ns (``requests=True``)."""
    series: Optional[List[Tuple[int, int, int]]] = None
    """``(time ns, pending, backlog)`` at each change (``timeseries=True``)."""
    ttft: Optional[np.ndarray] = None
    """TTFT (s) of every finished request, in finishing order."""
    tpot: Optional[np.ndarray] = None
    """TPOT (s) of every finished request with vd > 1, in finishing order."""
    tbt_max: Optional[np.ndarray] = None
    """Largest inter-token gap (s) of every finished request with vd > 1."""
    sched_delay: Optional[np.ndarray] = None
    """Scheduling delay (s) of every finished request, in finishing order."""
    gaps: Optional[GapHistogram] = None
    """Every inter-token gap after the warm-up, in 1 % bins (s)."""
    token_times: Optional[Dict[Request, Tuple[Optional[int], Optional[int]]]] = None
    """With ``requests=True``: ``(first scheduled, tbt_max)`` in ns of each
    finished request (``tbt_max`` None at vd = 1)."""
    kv_log: Optional[List[Any]] = None
    """With a KV cache and ``batches=True``: a ``KVBatch`` per iteration, aligned
    with :attr:`batch_log` (KV after allocation, preemptions, recompute, starts)."""
    kv_series: Optional[List[Tuple[int, int, int]]] = None
    """With a KV cache and ``timeseries=True``: ``(time ns, KV tokens, blocks)``
    at each change."""

    def __post_init__(self) -> None:
        if not isinstance(self.summary, Summary):
            self.summary = Summary.from_mapping(self.summary)

    def add_figures(self, **values: Any) -> None:
        """Set figures of the summary (see :meth:`Summary.with_figures`)."""
        self.summary = self.summary.with_figures(**values)

    def row(self, label: str) -> Dict[str, Any]:
        """The summary as one row of the ``--json`` contract."""
        return {"label": label, **self.summary.as_dict()}

    def batches(self) -> List[Dict[str, Any]]:
        """The batch log: one dict per iteration, times in seconds (with a KV
        cache, also the fields of its ``KVBatch``)."""
        log = _need(self.batch_log, "batches")
        rows = [{"start": to_seconds(b.start), "duration": to_seconds(b.duration),
                 "prefill_tokens": b.prefill_tokens, "decode_tokens": b.decode_tokens,
                 "requests": b.requests, "decode": list(b.decode), "prefill": dict(b.prefill)}
                for b in log]
        if self.kv_log is not None:
            for row, kv in zip(rows, self.kv_log):
                row.update(kv._asdict())
        return rows

    def to_frame(self, label: str = "") -> "pandas.DataFrame":
        """The summary as a one-row pandas DataFrame (the ``--json`` row)."""
        return frame([self.row(label)], "Result.to_frame")

    def requests_frame(self) -> "pandas.DataFrame":
        """:meth:`requests` as a pandas DataFrame, a row per request, times in
        seconds (with a KV cache, also the :class:`RequestMemory` columns)."""
        rows = [r._asdict() for r in self.requests()]
        log = self.request_log
        if log and log[0].memory is not None:
            shown = RequestMemory._fields[:memory_columns(log)]
            for row, memory in zip(rows, self.request_memory()):
                row.update(zip(shown, memory))
        return frame(rows, "Result.requests_frame")

    def batches_frame(self) -> "pandas.DataFrame":
        """:meth:`batches` as a pandas DataFrame, a row per iteration, times in seconds."""
        return frame(self.batches(), "Result.batches_frame")

    def request_memory(self) -> List[RequestMemory]:
        """Every request's KV record, by id (runs with a KV cache)."""
        log = _need(self.request_log, "requests")
        if not log or log[0].memory is None:
            raise ValueError("this run had no KV cache; run it with kv=KV(...)")
        return [RequestMemory.of(r) for r in sorted(log, key=lambda r: r.rid)]

    def kv_timeseries(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(time s, KV tokens, KV blocks)`` arrays, a point at each change."""
        if self.kv_series is None:
            raise ValueError("this run kept no KV series; run it with kv=KV(...) and "
                             "timeseries=True")
        rows = np.array(self.kv_series, dtype=float).reshape(-1, 3)
        return rows[:, 0] / 1e9, rows[:, 1], rows[:, 2]

    def latencies(self) -> List[RequestLatency]:
        """Every request that arrived, by id, as the records SLO attainment reads
        (:func:`llmqueue.theory.slo.attainment`): TTFT, TPOT, largest gap, E2E,
        scheduling delay (s), whether it finished, and its class."""
        log = _need(self.request_log, "requests")
        kept = self.token_times or {}
        s = _seconds
        return [RequestLatency.from_times(to_seconds(r.arrival), s(r.first_token), s(r.finished),
                                          output_tokens(r), s(kept.get(r, (None, None))[0]),
                                          s(kept.get(r, (None, None))[1]), r.klass)
                for r in sorted(log, key=lambda r: r.rid)]

    def requests(self) -> List[RequestTimes]:
        """Every request that arrived, by id, times in seconds."""
        log = _need(self.request_log, "requests")
        return [RequestTimes.of(r) for r in sorted(log, key=lambda r: r.rid)]

    def timeseries(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(time s, pending, backlog)`` arrays, a point at each change."""
        rows = np.array(_need(self.series, "timeseries"), dtype=float).reshape(-1, 3)
        return rows[:, 0] / 1e9, rows[:, 1], rows[:, 2]

    def write_batches(self, path: str) -> None:
        """CSV ``start,duration,prefill_tokens,decode_tokens,requests,members``;
        members are ``ID:d`` (a decode token) or ``ID:pN`` (N prefill tokens)."""
        log = _need(self.batch_log, "batches")
        kv_log = self.kv_log
        with open(path, "w", newline="") as handle:
            out = csv.writer(handle)
            out.writerow(["start", "duration", "prefill_tokens", "decode_tokens",
                          "requests", "members"]
                         + (list(kv_log[0]._fields) if kv_log else []))
            for i, b in enumerate(log):
                members = ([f"{rid}:d" for rid in b.decode]
                           + [f"{rid}:p{c}" for rid, c in b.prefill])
                out.writerow([to_seconds(b.start), to_seconds(b.duration), b.prefill_tokens,
                              b.decode_tokens, b.requests, " ".join(members)]
                             + (list(kv_log[i]) if kv_log else []))

    def write_requests(self, path: str) -> None:
        """CSV ``id,arrival,admitted,prefill_done,first_token,finished,vp,vd``;
        empty cells for what had not happened when the run ended.  With a KV
        cache, also ``ignored,preemptions,recomputed_tokens,memory_area``."""
        rows = self.requests()
        log = self.request_log
        memory = self.request_memory() if log and log[0].memory is not None else None
        width = memory_columns(log) if memory is not None else 1  # type: ignore[arg-type]
        extra = list(RequestMemory._fields[1:width])
        with open(path, "w", newline="") as handle:
            out = csv.writer(handle)
            out.writerow(list(RequestTimes._fields) + extra)
            for i, row in enumerate(rows):
                cells = ["" if x is None else x for x in row]
                out.writerow(cells + (list(memory[i][1:width]) if memory is not None else []))

    def write_timeseries(self, path: str) -> None:
        """CSV ``time,pending,backlog``, a row at each change."""
        series = _need(self.series, "timeseries")
        with open(path, "w", newline="") as handle:
            out = csv.writer(handle)
            out.writerow(["time", "pending", "backlog"])
            for t, pending, backlog in series:
                out.writerow([to_seconds(t), pending, backlog])


_seconds = seconds


def _need(log: Optional[List], name: str) -> List:
    if log is None:
        raise ValueError(f"this run kept no {name} log; run it with {name}=True")
    return log
