"""What a network run produces (docs/model.md §9.3, §9.4): a Result per engine, the
engines of a pool (or any of them) combined into one, and the
:class:`NetworkResult` that :meth:`~llmqueue.network.network.Network.run`
returns; with the capacity each engine's load is read against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple, TypeVar

import numpy as np

from llmqueue.engine.kv_recorder import KVBatch, memory_figures
from llmqueue.engine.kv_residents import MemoryResidents
from llmqueue.engine.processes import Engine
from llmqueue.engine.recorder import Recorder
from llmqueue.engine.results import Batch, Result, Summary
from llmqueue.network.classes import by_class
from llmqueue.policies.view import Request
from llmqueue.theory import capacity as theory
from llmqueue.theory.shapes import MeanContext, by_batch_size

T = TypeVar("T")


def capacity(engine: Engine) -> Optional[float]:
    """Most tokens per second ``engine`` can serve, ``bmax / t_bmax`` (docs/model.md §9.2);
    ``None`` without a budget.  A latency model not of the batch size alone
    (the roofline) is read at the mix and mean contexts of the requests that
    arrived (:class:`~llmqueue.theory.shapes.MeanContext`: a prefilled prompt
    is context, not work), approximately; ``None`` before any arrived."""
    if engine.bmax is None:
        return None
    latency = engine.latency
    if not by_batch_size(latency):
        count, prompt, prefill, decode = engine.recorder.sizes
        if not count:
            return None
        latency = MeanContext(latency, prefill / count, decode / count, prompt / count)
    return theory.token_capacity(engine.bmax, latency)



def engine_result(engine: Engine, end: int) -> Result:
    """One engine of a network run that ended at ``end`` (ticks) as a Result:
    its summary with the load against its :func:`capacity`, and its memory
    figures when it has a KV cache."""
    recorder = engine.recorder
    recorder.close(end)
    if isinstance(engine.residents, MemoryResidents):
        engine.residents.book_areas()
    log = _kept(recorder.request_log)
    log.extend(engine.residents)
    log.extend(engine.waiting)
    summary = recorder.summary(end, waiting=len(engine.waiting),
                               residents=len(engine.residents))
    summary = summary.with_figures(**_load(summary, capacity(engine), recorder))
    params = {"engine": engine.name, "scheduler": engine.policy.name, "bmax": engine.bmax,
              "kmax": engine.kmax, "latency": repr(engine.latency)}
    memory = recorder.memory
    if memory is not None:
        params["kv"] = repr(engine.kv)
        summary = summary.with_figures(**memory_figures([recorder], end))
    return Result(summary, params, recorder.batch_log, recorder.request_log, recorder.series,
                  kv_log=memory.log if memory is not None else None)


def _load(summary: Summary, cap: Optional[float], recorder: Recorder
          ) -> Dict[str, Optional[float]]:
    """Offered token rate (tokens that arrived per second) against capacity."""
    seconds = summary["duration"]
    arrived = recorder.decode_tokens + recorder.prefill_tokens + recorder.backlog
    offered = arrived / seconds if seconds else None
    return {"capacity_tokens_per_s": cap, "offered_tokens_per_s": offered,
            "load": offered / cap if cap and offered is not None else None}


_ADDITIVE = ("arrivals", "completed", "pending", "backlog", "_pending_area", "_backlog_area",
             "batches", "decode_batches", "decode_tokens", "prefill_tokens", "mixed",
             "decode_only", "prefill_only", "busy", "wc_violations")


def combine(engines: List[Engine], end: int) -> Result:
    """Several engines (of a finished run) as one Result: sums of their counts and
    integrals, maxima of the summed pending/backlog series, pooled latencies;
    ``busy_fraction`` is the mean over engines and ``load`` is against the
    summed capacity.  Its request and batch logs are the engines' merged (request
    ids are per engine, so they repeat across engines)."""
    total = Recorder(1)
    for engine in engines:
        rec = engine.recorder
        for key in _ADDITIVE:
            setattr(total, key, getattr(total, key) + getattr(rec, key))
        total.ttft.extend(rec.ttft)
        total.tpot.extend(rec.tpot)
        total.e2e.extend(rec.e2e)
    series = merge_series([_kept(e.recorder.series) for e in engines])
    held = [row for row in series if row[0] < end]
    total.pending_max = max([p for _, p, _ in held] + [total.pending])
    total.backlog_max = max([b for _, _, b in held] + [total.backlog])
    waiting = sum(len(e.waiting) for e in engines)
    residents = sum(len(e.residents) for e in engines)
    summary = total.summary(end, waiting=waiting, residents=residents)
    if summary.busy_fraction is not None:
        summary = summary.with_figures(busy_fraction=summary.busy_fraction / len(engines))
    caps = [capacity(e) for e in engines]
    known = [c for c in caps if c is not None]
    cap = None if len(known) < len(caps) else sum(known)
    summary = summary.with_figures(**_load(summary, cap, total))
    caches = [e for e in engines if e.kv is not None]
    if caches:  # the engines with a cache together (ignored requests close the count)
        summary = summary.with_figures(**memory_figures([e.recorder for e in caches], end))
    requests: List[Request] = [r for e in engines for r in _kept(e.recorder.request_log)]
    batches, kv_log = _batches(engines)
    return Result(summary, {"engines": [e.name for e in engines]}, batches, requests, series,
                  kv_log=kv_log)


def _batches(engines: Sequence[Engine]) -> Tuple[Optional[List[Batch]], Optional[List[KVBatch]]]:
    """The engines' batch logs merged by start time (``None`` unless every engine
    keeps one), and, when every engine has a cache, their KV rows beside them."""
    logs = [e.recorder.batch_log for e in engines]
    kv_logs = [e.recorder.memory.log if e.recorder.memory is not None else None
               for e in engines]
    kept = [log for log in logs if log is not None]
    if len(kept) < len(logs):
        return None, None
    kv_kept = [kvs for kvs in kv_logs if kvs is not None]
    if len(kv_kept) < len(kv_logs):
        return sorted((row for log in kept for row in log), key=lambda row: row[0]), None
    rows = sorted((pair for log, kvs in zip(kept, kv_kept) for pair in zip(log, kvs)),
                  key=lambda pair: pair[0][0])
    return [row for row, _ in rows], [kv for _, kv in rows]


def _kept(log: Optional[List[T]]) -> List[T]:
    """A log every engine of a network keeps (:meth:`Network.add_engine` asks
    its recorder for the request log and the series)."""
    assert log is not None
    return log


def merge_series(parts: Sequence[List[Tuple[int, int, int]]]) -> List[Tuple[int, int, int]]:
    """The sum of several ``(time, pending, backlog)`` step functions, a row at
    each time any of them changes."""
    arrays = [np.array(p, dtype=np.int64).reshape(-1, 3) for p in parts]
    times = np.unique(np.concatenate([a[:, 0] for a in arrays]))
    pending = np.zeros(len(times), dtype=np.int64)
    backlog = np.zeros(len(times), dtype=np.int64)
    for a in arrays:
        if not len(a):
            continue
        idx = np.searchsorted(a[:, 0], times, side="right") - 1
        seen = idx >= 0
        pending[seen] += a[idx[seen], 1]
        backlog[seen] += a[idx[seen], 2]
    return list(zip(times.tolist(), pending.tolist(), backlog.tolist()))


@dataclass
class NetworkResult:
    """What a network run produced: a Result per engine and one in total."""

    engines: Dict[str, Result]
    total: Result
    end: int

    def rows(self, prefix: str = "") -> List[Tuple[str, Result]]:
        """``(label, Result)`` rows for the CLI: each engine, then ``total``."""
        return [(prefix + name, r) for name, r in self.engines.items()] + \
            [(prefix + "total", self.total)]

    def by_class(self) -> Dict[Hashable, Dict[str, Any]]:
        """Per-class figures over every request of the network."""
        return by_class(_kept(self.total.request_log), self.end)
