"""Run one engine on one workload: the main entry point of the Python API."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np
import simpy

from llmqueue.common.units import UNLIMITED, to_seconds, to_ticks
from llmqueue.theory.drift import window_times
from llmqueue.engine.processes import Diverged, Engine, feed, restart_at, sample_windows
from llmqueue.models.latency import LatencyModel
from llmqueue.engine.recorder import BatchRow, Recorder
from llmqueue.policies.builtin import make_policy
from llmqueue.theory.stability import assess
from llmqueue.policies.view import Request
from llmqueue.models.workload import Workload
from llmqueue.common import validation


@dataclass
class Result:
    """What one run produced: its summary and whatever logs were asked for."""

    summary: Dict[str, object]
    params: Dict[str, object] = field(default_factory=dict)
    batch_log: Optional[List[BatchRow]] = None
    request_log: Optional[List[Request]] = None
    series: Optional[List[Tuple[int, int, int]]] = None
    #: TTFT and TPOT (seconds) of every finished request, in finishing order
    ttft: Optional[np.ndarray] = None
    tpot: Optional[np.ndarray] = None

    def row(self, label: str) -> Dict[str, object]:
        """The summary as one row of the ``--json`` contract."""
        return {"label": label, **self.summary}

    def batches(self) -> List[Dict[str, object]]:
        """The batch log: one dict per iteration, times in seconds."""
        _need(self.batch_log, "batches")
        return [{"start": to_seconds(s), "duration": to_seconds(t), "prefill_tokens": p,
                 "decode_tokens": d, "requests": n, "decode": list(rids),
                 "prefill": dict(chunks)}
                for s, t, p, d, n, rids, chunks in self.batch_log]

    def timeseries(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(time s, pending, backlog)`` arrays, a point at each change."""
        _need(self.series, "timeseries")
        rows = np.array(self.series, dtype=float).reshape(-1, 3)
        return rows[:, 0] / 1e9, rows[:, 1], rows[:, 2]

    def write_batches(self, path: str) -> None:
        """CSV ``start,duration,prefill_tokens,decode_tokens,requests,members``."""
        _need(self.batch_log, "batches")
        with open(path, "w", newline="") as handle:
            out = csv.writer(handle)
            out.writerow(["start", "duration", "prefill_tokens", "decode_tokens",
                          "requests", "members"])
            for s, t, p, d, n, rids, chunks in self.batch_log:
                members = [f"{rid}:d" for rid in rids] + [f"{rid}:p{c}" for rid, c in chunks]
                out.writerow([to_seconds(s), to_seconds(t), p, d, n, " ".join(members)])

    def write_requests(self, path: str) -> None:
        """CSV ``id,arrival,admitted,prefill_done,first_token,finished,vp,vd``;
        empty cells for what had not happened when the run ended."""
        _need(self.request_log, "requests")
        with open(path, "w", newline="") as handle:
            out = csv.writer(handle)
            out.writerow(["id", "arrival", "admitted", "prefill_done", "first_token",
                          "finished", "vp", "vd"])
            for r in sorted(self.request_log, key=lambda r: r.rid):
                times = [r.arrival, r.admitted, r.prefill_done, r.first_token, r.finished]
                out.writerow([r.rid] + ["" if x is None else to_seconds(x) for x in times]
                             + [r.vp, r.vd])

    def write_timeseries(self, path: str) -> None:
        """CSV ``time,pending,backlog``, a row at each change."""
        _need(self.series, "timeseries")
        with open(path, "w", newline="") as handle:
            out = csv.writer(handle)
            out.writerow(["time", "pending", "backlog"])
            for t, pending, backlog in self.series:
                out.writerow([to_seconds(t), pending, backlog])


def _need(log: object, name: str) -> None:
    if log is None:
        raise ValueError(f"this run kept no {name} log; run it with {name}=True")


def simulate(workload: Workload, policy: object = "sarathi", *, bmax: Optional[int] = 128,
             kmax: Optional[int] = 100, latency: Optional[LatencyModel] = None,
             chunked: bool = True, horizon: Optional[float] = None, batches: bool = False,
             requests: bool = False, timeseries: bool = False,
             skip_ahead: bool = True, warmup: float = 0.0,
             max_pending: Optional[int] = None) -> Result:
    """Simulate one engine serving ``workload``.

    The run ends at ``horizon`` seconds, or, without one, when every request of
    a finite workload has arrived and finished.  ``batches``, ``requests`` and
    ``timeseries`` keep the logs of those names.  ``warmup`` seconds at the
    start are left out of the summary (warm-up deletion): its figures, and
    the backlog drift windows, cover ``[warmup, horizon]``.  ``max_pending``
    stops the run as soon as more requests are pending: the summary's verdict
    is then ``diverged`` and ``diverged_at`` the time (s).
    """
    if horizon is not None:
        validation.positive_number("horizon", horizon)
    elif getattr(workload, "count", None) is None:
        raise ValueError("horizon must be given for an endless arrival stream "
                         "(or give the workload a count)")
    validation.nonnegative_number("warmup", warmup)
    if warmup and (horizon is None or warmup >= horizon):
        raise ValueError(f"warmup must be below the horizon ({horizon}); got {warmup}")
    pol = make_policy(policy, chunked=chunked)
    env = simpy.Environment()
    until = to_ticks(horizon) if horizon is not None else None
    recorder = Recorder(bmax if bmax is not None else UNLIMITED, batches=batches,
                        requests=requests, timeseries=timeseries)
    engine = Engine(env, pol, bmax=bmax, kmax=kmax, latency=latency, recorder=recorder,
                    until=until, skip_ahead=skip_ahead, max_pending=max_pending)
    env.process(feed(env, engine, workload, until))
    if until is not None:
        origin = to_ticks(warmup)
        if origin:
            env.process(restart_at(env, recorder, origin))
        edges = [origin + edge for edge in window_times(until - origin)[:-1]]
        env.process(sample_windows(env, recorder, edges))
    diverged: Optional[Diverged] = None
    try:
        env.run(until=until)
    except Diverged as stop:
        diverged = stop
    end = until if until is not None and diverged is None else env.now
    recorder.close(end)
    if recorder.request_log is not None:
        recorder.request_log.extend(engine.residents)
        recorder.request_log.extend(engine.waiting)
    summary = recorder.summary(end, waiting=len(engine.waiting),
                               residents=len(engine.residents))
    summary.update(assess(summary, rate=getattr(workload, "rate", None),
                          mean_prefill=getattr(workload, "mean_prefill", None),
                          mean_decode=getattr(workload, "mean_decode", None),
                          work_conserving=pol.work_conserving, bmax=bmax, kmax=kmax,
                          latency=engine.latency))
    summary["diverged_at"] = None
    if diverged is not None:
        summary.update(verdict="diverged", diverged_at=to_seconds(diverged.now))
    params = {"scheduler": pol.name, "chunked": pol.chunked, "bmax": bmax, "kmax": kmax,
              "latency": repr(engine.latency), "horizon": horizon, "warmup": warmup,
              "workload": getattr(workload, "description", repr(workload))}
    return Result(summary, params, recorder.batch_log, recorder.request_log, recorder.series,
                  np.array(recorder.ttft), np.array(recorder.tpot))
