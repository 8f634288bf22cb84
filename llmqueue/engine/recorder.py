"""Streams of what a run produces (docs/model.md §5), recorded as they happen.

The :class:`Recorder` keeps running totals and exact integer integrals of
pending and backlog over time, so a run's memory does not grow with its
iteration count.  Per-request latencies go to compact arrays; the batch log,
the request log and the pending/backlog series are kept only when asked for.

A run of ``k`` identical iterations is announced with :meth:`Recorder.start_run`
and committed lazily: an arrival in the middle of it first commits the
iterations that ended by then, so every figure is what stepping one
iteration at a time would give.  Under a context-aware latency model the
iterations of a run hold the same requests but last different times
(``times``); they are committed one by one from their end times.

Each request's scheduling delay and largest inter-token gap, and the histogram
of every gap, come from :class:`~llmqueue.engine.tokens.TokenTimes`
(:attr:`Recorder.tokens`), which the residents tell of every token.  That costs
a few microseconds per request, so it is kept with the request log (or when
asked with ``tokens=True``); without it those figures are ``None``.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, Dict, Hashable, List, Optional, Tuple

import numpy as np

from llmqueue.common.percentiles import QUANTILES, percentiles
from llmqueue.common.units import to_seconds
from llmqueue.engine.results import Batch, Summary, token_rates
from llmqueue.engine.tokens import TokenTimes
from llmqueue.policies.view import Plan, Request
from llmqueue.theory.capacity import violations
from llmqueue.theory.drift import edge_slope


@dataclass(slots=True)
class _Run:
    """``k`` iterations of one plan, ``t`` long each, from ``start``; ``done`` committed."""

    start: int
    t: int
    k: int
    decode: int
    prefill: int
    requests: int
    demand: int
    done: int = 0
    ends: Optional[List[int]] = None
    """End time of each iteration when they differ (else every one is ``t``)."""


def _batches(run: _Run, first: int, end: int, rids: Tuple[Hashable, ...],
             chunks: Tuple[Tuple[Hashable, int], ...]) -> List[Batch]:
    """The batch-log rows of iterations ``first .. end - 1`` of ``run`` (not inline:
    a generator in a hot method makes its locals closure cells, slower per call)."""
    ends = run.ends
    if ends is None:
        return [Batch(run.start + i * run.t, run.t, run.prefill, run.decode, run.requests,
                      rids, chunks) for i in range(first, end)]
    return [Batch(ends[i - 1] if i else run.start, ends[i] - (ends[i - 1] if i else run.start),
                  run.prefill, run.decode, run.requests, rids, chunks) for i in range(first, end)]


class Recorder:
    """Running figures of one engine."""

    # slots: CPython 3.11 specializes attribute reads of a dict-backed instance
    # only below 30 attributes; a recorder has more, read on every iteration
    __slots__ = ("bmax", "arrivals", "completed", "pending", "pending_start", "backlog",
                 "pending_max", "backlog_max", "_t", "_origin", "_pending_area",
                 "_backlog_area", "batches", "decode_batches", "decode_tokens",
                 "prefill_tokens", "mixed", "decode_only", "prefill_only", "busy",
                 "wc_violations", "_run", "_members", "ttft", "tpot", "e2e", "tbt",
                 "sched_delay", "tokens", "latencies", "batch_log", "request_log", "series",
                 "windows", "memory", "sizes", "emitted")

    def __init__(self, bmax: int, batches: bool = False, requests: bool = False,
                 timeseries: bool = False, tokens: Optional[bool] = None) -> None:
        self.bmax = bmax
        self.arrivals = 0
        self.completed = 0
        self.pending = 0
        #: pending when the observed span began (the warm-up's end; 0 without one)
        self.pending_start = 0
        self.backlog = 0
        self.pending_max = 0
        self.backlog_max = 0
        self._t = 0
        self._origin = 0
        self._pending_area = 0
        self._backlog_area = 0
        self.batches = 0
        self.decode_batches = 0
        self.decode_tokens = 0
        self.prefill_tokens = 0
        self.mixed = 0
        self.decode_only = 0
        self.prefill_only = 0
        self.busy = 0
        self.wc_violations = 0
        self._run: Optional[_Run] = None
        self._members: Tuple[Tuple[Hashable, ...], Tuple[Tuple[Hashable, int], ...]] = ((), ())
        self.ttft = array("d")
        self.tpot = array("d")
        self.e2e = array("d")
        self.tbt = array("d")
        """Largest inter-token gap (s) of each finished request with vd > 1."""
        self.sched_delay = array("d")
        """Scheduling delay (s) of each finished request."""
        self.tokens = TokenTimes() if (requests if tokens is None else tokens) else None
        """Token timing: scheduling delays, gaps (shared with the engine's residents;
        None unless the request log is kept or ``tokens`` is true)."""
        self.latencies: Optional[Dict[Request, Tuple[Optional[int], Optional[int]]]] = \
            {} if requests and self.tokens is not None else None
        """``(first scheduled, tbt_max)`` ticks of each finished request, when kept."""
        self.batch_log: Optional[List[Batch]] = [] if batches else None
        self.request_log: Optional[List[Request]] = [] if requests else None
        self.series: Optional[List[Tuple[int, int, int]]] = [] if timeseries else None
        self.windows: List[Tuple[int, int]] = []
        self.memory: Any = None  # a MemoryRecorder when the engine has a KV cache
        self.sizes = [0, 0, 0, 0]
        """``[requests, prompt tokens, prefill tokens to process, decode tokens]``
        of every arrival, warm-up included (their means price a latency model
        that is not of the batch size alone: ``network.capacity``)."""
        self.emitted = 0
        """First tokens emitted with a prefill (``first_token="prefill"``)."""

    # -- integrals -------------------------------------------------------
    def _advance(self, now: int) -> None:
        """Integrate up to ``now``.  Maxima count only levels held for a
        positive time, so events at one instant never show a passing spike."""
        span = now - self._t
        if span:
            self._pending_area += self.pending * span
            self._backlog_area += self.backlog * span
            self._t = now
            if self.pending > self.pending_max:
                self.pending_max = self.pending
            if self.backlog > self.backlog_max:
                self.backlog_max = self.backlog

    def _mark(self, now: int, backlog: Optional[int] = None) -> None:
        """Add a row to the pending/backlog series; rows at one instant collapse."""
        series = self.series
        if series is not None:
            row = (now, self.pending, self.backlog if backlog is None else backlog)
            if series and series[-1][0] == now:
                series[-1] = row
            else:
                series.append(row)

    # -- events ----------------------------------------------------------
    def arrive(self, now: int, tokens: int, prompt: int = 0, decode: int = 0) -> None:
        """A request with ``tokens`` tokens of work in all arrived (``decode`` of
        them decode tokens; its prompt holds ``prompt`` tokens, prefilled or not)."""
        self.commit(now)
        self._advance(now)
        self.arrivals += 1
        self.pending += 1
        self.backlog += tokens
        sizes = self.sizes
        sizes[0] += 1
        sizes[1] += prompt
        sizes[2] += tokens - decode
        sizes[3] += decode
        self._mark(now)

    def ignore(self, r: Request) -> None:
        """Request ``r`` arrived and was rejected at once (it can never fit the
        KV cache): it counts as an arrival, never as pending or backlog."""
        self.arrivals += 1
        if self.request_log is not None:
            self.request_log.append(r)

    def add_work(self, now: int, tokens: int) -> None:
        """``tokens`` more tokens to process at ``now`` (a preemption's recompute)."""
        self.commit(now)
        self._advance(now)
        self.backlog += tokens
        self._mark(now)

    def start_run(self, start: int, t: int, k: int, plan: Plan, decode: int,
                  prefill: int, requests: int, demand: int,
                  times: Optional[List[int]] = None) -> None:
        """``k`` iterations of ``plan``, each ``t`` long (or ``times[j]`` long),
        begin at ``start``.  A request whose first prompt chunk is among them is
        scheduled now (a request without prompt: at its first decode, when
        the iteration is applied)."""
        tokens = self.tokens
        if tokens is not None:
            for r, _ in plan.prefill:
                if r.prefill_left == r.vp:
                    tokens.schedule(r, start)
        self._run = _Run(start, t, k, decode, prefill, requests, demand)
        if times is not None:
            ends, at = [], start
            for tj in times:
                at += tj
                ends.append(at)
            self._run.ends = ends
        if self.batch_log is not None:
            self._members = (tuple(r.rid for r in plan.decode),
                             tuple((r.rid, n) for r, n in plan.prefill))

    def commit(self, now: int) -> None:
        """Account for the iterations of the current run that ended by ``now``."""
        run = self._run
        if run is None:
            return
        if run.ends is not None:
            self._commit_times(run, now)
            return
        start, t, k, done = run.start, run.t, run.k, run.done
        decode, prefill = run.decode, run.prefill
        n = min(k, (now - start) // t) - done
        if n <= 0:
            return
        b = decode + prefill
        first_end = start + (done + 1) * t
        self._advance(first_end)
        self.backlog -= b
        if n > 1:
            span = (n - 1) * t
            self._pending_area += self.pending * span
            self._backlog_area += t * ((n - 1) * self.backlog - b * (n - 2) * (n - 1) // 2)
            self.backlog -= (n - 1) * b
            self._t = first_end + span
        if self.series is not None:
            final = self.backlog
            for i in range(n):
                self._mark(first_end + i * t, final + (n - 1 - i) * b)
        self._count(run, n, start + (done + n) * t - max(start + done * t, self._origin))
        if self.batch_log is not None:
            self.batch_log.extend(_batches(run, done, done + n, *self._members))
        run.done = done + n
        if done + n == k:
            self._run = None

    def _commit_times(self, run: _Run, now: int) -> None:
        """:meth:`commit` for a run whose iterations last different times."""
        ends, done = run.ends, run.done
        assert ends is not None
        n = min(run.k, bisect_right(ends, now)) - done
        if n <= 0:
            return
        b = run.decode + run.prefill
        begin = ends[done - 1] if done else run.start
        last = done + n - 1
        self._advance(ends[done])
        self.backlog -= b
        if n > 1:
            backlog, area = self.backlog, 0
            for i in range(done + 1, last + 1):
                area += (ends[i] - ends[i - 1]) * backlog
                backlog -= b
            self._pending_area += self.pending * (ends[last] - ends[done])
            self._backlog_area += area
            self.backlog = backlog
            self._t = ends[last]
        if self.series is not None:
            final = self.backlog
            for i in range(n):
                self._mark(ends[done + i], final + (n - 1 - i) * b)
        self._count(run, n, ends[last] - max(begin, self._origin))
        if self.batch_log is not None:
            self.batch_log.extend(_batches(run, done, last + 1, *self._members))
        run.done = last + 1
        if run.done == run.k:
            self._run = None

    def _count(self, run: _Run, n: int, busy: int) -> None:
        """Count ``n`` more iterations of ``run`` (``busy`` ticks in all: only those
        after the observed span's origin, for an iteration that straddles a
        warm-up restart)."""
        decode, prefill, done = run.decode, run.prefill, run.done
        b = decode + prefill
        self.batches += n
        self.busy += busy
        self.decode_tokens += n * decode
        self.prefill_tokens += n * prefill
        if decode:
            self.decode_batches += n
            if prefill:
                self.mixed += n
            else:
                self.decode_only += n
        else:
            self.prefill_only += n
        self.wc_violations += violations(done, n, b, self.bmax, run.demand, prefill)

    def finish(self, now: int, r: Request) -> None:
        """Request ``r`` produced its last token at ``now``."""
        self._advance(now)
        self.pending -= 1
        self.completed += 1
        first, done = r.first_token, r.finished
        assert first is not None and done is not None  # a finished request has both
        self.ttft.append(to_seconds(first - r.arrival))
        self.e2e.append(to_seconds(done - r.arrival))
        n = r.vd + r.early  # output tokens (its first may have come with its prefill)
        if n > 1:
            self.tpot.append(to_seconds(done - first) / (n - 1))
        if self.tokens is not None:
            scheduled, gap = self.tokens.finish(r)
            if scheduled is not None:
                self.sched_delay.append(to_seconds(scheduled - r.arrival))
            if n > 1:
                self.tbt.append(to_seconds(gap))
            if self.latencies is not None:
                self.latencies[r] = (scheduled, gap if n > 1 else None)
        if self.request_log is not None:
            self.request_log.append(r)
        self._mark(now)

    def snapshot(self, now: int) -> None:
        """Note the backlog at ``now`` (a drift window edge)."""
        self.commit(now)
        self.windows.append((now, self.backlog))

    def restart(self, now: int) -> None:
        """Forget everything before ``now`` (warm-up deletion) but the current
        pending and backlog levels: counts, integrals, maxima, batch counters
        and latencies start afresh, and time averages run over ``[now, end]``.
        The logs (batches, requests, series) are kept whole."""
        self.commit(now)
        self._advance(now)
        self._origin = now
        self.pending_start = self.pending
        self._pending_area = self._backlog_area = 0
        self.pending_max = self.backlog_max = 0  # levels count once held after now
        self.arrivals = self.completed = 0
        self.batches = self.decode_batches = self.decode_tokens = self.prefill_tokens = 0
        self.mixed = self.decode_only = self.prefill_only = self.busy = 0
        self.wc_violations = self.emitted = 0
        self.ttft, self.tpot, self.e2e = array("d"), array("d"), array("d")
        self.tbt, self.sched_delay = array("d"), array("d")
        if self.tokens is not None:
            self.tokens.restart()
        if self.memory is not None:
            self.memory.restart(now)

    def close(self, end: int) -> None:
        """Extend the integrals to ``end``, the end of the observed span."""
        self._advance(end)
        if self.windows:
            self.windows.append((end, self.backlog))
        self.pending_max = max(self.pending_max, self.pending)
        self.backlog_max = max(self.backlog_max, self.backlog)
        if self.memory is not None:
            self.memory.close(end)

    # -- results ---------------------------------------------------------
    def summary(self, end: int, waiting: int, residents: int) -> Summary:
        """The summary figures of the ``--json`` contract (times in seconds),
        over ``[origin, end]`` (origin 0 unless :meth:`restart` moved it)."""
        span = end - self._origin
        ttft = percentiles(self.ttft)
        slope, slope_se = edge_slope([t for t, _ in self.windows],
                                     [b for _, b in self.windows])
        tpot = percentiles(self.tpot)
        tokens = self.tokens
        tbt = tuple(None if tokens is None else tokens.quantile(q / 100) for q in QUANTILES)
        sched = percentiles(self.sched_delay)
        return Summary.of_run(**{
            "arrivals": self.arrivals,
            "completed": self.completed,
            "residents_final": residents,
            "waiting_final": waiting,
            "pending_mean": self._pending_area / span if span else None,
            "pending_max": self.pending_max,
            "pending_final": self.pending,
            "backlog_mean": self._backlog_area / span if span else None,
            "backlog_max": self.backlog_max,
            "backlog_final": self.backlog,
            "batches": self.batches,
            "decode_batch_mean": (self.decode_tokens / self.decode_batches
                                  if self.decode_batches else None),
            "mixed_fraction": self.mixed / self.batches if self.batches else None,
            "decode_only_fraction": self.decode_only / self.batches if self.batches else None,
            "prefill_only_fraction": self.prefill_only / self.batches if self.batches else None,
            "busy_fraction": self.busy / span if span else None,
            **token_rates(self.decode_tokens, self.prefill_tokens, self.emitted, span),
            "ttft_p50": ttft[0], "ttft_p90": ttft[1], "ttft_p99": ttft[2],
            "tpot_p50": tpot[0], "tpot_p90": tpot[1], "tpot_p99": tpot[2],
            "tbt_p50": tbt[0], "tbt_p90": tbt[1], "tbt_p99": tbt[2],
            "sched_delay_p50": sched[0], "sched_delay_p90": sched[1],
            "sched_delay_p99": sched[2],
            "e2e_mean": float(np.mean(self.e2e)) if len(self.e2e) else None,
            "non_work_conserving_batches": self.wc_violations,
            "backlog_slope": slope,
            "backlog_slope_se": slope_se,
            "duration": to_seconds(span),
        })

