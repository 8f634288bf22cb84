"""Run one engine on one workload: the main entry point of the Python API."""

from __future__ import annotations

from typing import Any, Generator, Iterable, Optional

import numpy as np
import simpy

from llmqueue.common import limits, progress, validation
from llmqueue.common.units import UNLIMITED, to_seconds, to_ticks
from llmqueue.engine.clock import PAST_END, delay_until, now_ticks
from llmqueue.engine.errors import Diverged
from llmqueue.engine.first_token import check_first_token, make_early
from llmqueue.engine.kv import KV
from llmqueue.engine.kv_invariants import asked as invariants_asked
from llmqueue.engine.kv_residents import MemoryResidents
from llmqueue.engine.kv_recorder import MemoryRecorder, memory_figures
from llmqueue.engine.prefix_cache import prefix_request
from llmqueue.engine.prefix_stats import effective_load
from llmqueue.engine.processes import Engine
from llmqueue.engine.sessions import feed_sessions
from llmqueue.engine.recorder import Recorder
from llmqueue.engine.results import Result
from llmqueue.models.latency import LatencyModel
from llmqueue.models.sessions import Sessions
from llmqueue.models.workload import Arrival, Workload, as_workload
from llmqueue.policies.builtin import make_policy
from llmqueue.policies.view import Request
from llmqueue.policies.wait import Wait
from llmqueue.theory.drift import window_times
from llmqueue.theory.stability import assess


def simulate(workload: Workload, policy: object = "sarathi", *, bmax: Optional[int] = 128,
             kmax: Optional[int] = 100, latency: Optional[LatencyModel] = None,
             chunked: bool = True, horizon: Optional[float] = None, batches: bool = False,
             requests: bool = False, timeseries: bool = False,
             skip_ahead: bool = True, warmup: float = 0.0,
             max_pending: Optional[int] = None, kv: Optional[KV] = None,
             check_invariants: Optional[bool] = None, first_token: str = "decode") -> Result:
    """Simulate one engine serving ``workload``.

    The run ends at ``horizon`` seconds, or, without one, when every request of
    a finite workload has arrived and finished.  ``batches``, ``requests`` and
    ``timeseries`` keep the logs of those names (``requests`` also keeps each
    request's scheduling delay and largest inter-token gap, and the histogram
    of every gap behind the summary's ``tbt_p*``: :meth:`Result.latencies`
    gives the records SLO attainment reads; without it those are ``None``).
    ``warmup`` seconds at the start are left out of the summary (warm-up
    deletion): its figures, and the backlog drift windows, cover ``[warmup,
    horizon]``.  ``max_pending``
    stops the run as soon as more requests are pending: the summary's verdict
    is then ``diverged`` and ``diverged_at`` the time (s).

    ``kv`` gives the engine a KV cache (:class:`~llmqueue.engine.kv.KV`, docs/model.md §6):
    the summary then adds the memory figures of docs/model.md §6.7 (``kv=None`` leaves
    every figure as it was), ``batches`` and ``timeseries`` also keep
    :attr:`Result.kv_log` and :attr:`Result.kv_series`, and the request log's
    requests carry their KV record.  Every iteration is stepped (no
    skip-ahead) when ``kv`` is set.  ``policy="wait"`` needs its quotas:
    pass ``Wait(n=...)`` (:class:`~llmqueue.policies.wait.Wait`, docs/model.md §6.5) and
    a ``kv``; its summary adds ``threshold_error``, the preemptions its quotas
    let happen (0 when they fit the cache).  ``check_invariants`` checks the KV
    invariants of docs/model.md §6.3 on every iteration (slow; default: the environment
    variable ``LLMQUEUE_CHECK_INVARIANTS=1``).  ``first_token`` says when a
    request's first output token appears: ``"decode"`` (the paper's model) at
    the end of its first decode iteration, ``"prefill"`` (vLLM, TensorRT-LLM)
    with the iteration that completes its prompt, after which it decodes
    ``vd - 1`` tokens (:mod:`~llmqueue.engine.first_token`).

    Examples:
        Three requests of 10 + 2 tokens, one a second: each runs alone, a
        prefill then two decodes of ``t(b <= 128) = 0.04675`` s (the paper's
        staircase), so 3 x 3 batches and the last ends at 3 + 3 x 0.04675 s.

        >>> import llmqueue as q
        >>> s = q.simulate(q.renewal(1.0, 10, 2, count=3)).summary
        >>> s.completed, s.batches, round(s.duration, 5)
        (3, 9, 3.14025)
    """
    workload = as_workload(workload)  # a plain list of rows too
    if horizon is not None:
        validation.positive_number("horizon", horizon)
    elif getattr(workload, "count", None) is None:
        raise ValueError("horizon must be given for an endless arrival stream "
                         "(or give the workload a count)")
    limits.check_requests(offered_rate(workload), horizon, requests_of(workload),
                          getattr(workload, "initial", 0))
    if horizon is not None:  # after the request limit, which names an endless run's horizon
        validation.gap_seconds("horizon", horizon)
    validation.nonnegative_number("warmup", warmup)
    if warmup and (horizon is None or warmup >= horizon):
        raise ValueError(f"warmup must be below the horizon ({horizon}); got {warmup}")
    pol = make_policy(policy, chunked=chunked)
    early = check_first_token(first_token) == "prefill"
    if early:
        refuse_early(workload, pol)
    env = simpy.Environment()
    until = to_ticks(horizon) if horizon is not None else None
    budget = bmax if pol.budgeted else None  # WAIT ignores bmax (docs/model.md §6.5)
    recorder = Recorder(budget if budget is not None else UNLIMITED, batches=batches,
                        requests=requests, timeseries=timeseries)
    if kv is not None:
        recorder.memory = MemoryRecorder(kv, batches=batches, timeseries=timeseries)
    if check_invariants is None:
        check_invariants = invariants_asked()
    elif not isinstance(check_invariants, bool):
        raise ValueError(f"check_invariants must be True, False or None (the environment "
                         f"variable LLMQUEUE_CHECK_INVARIANTS decides); got "
                         f"{validation.shown(check_invariants)}")
    engine = Engine(env, pol, bmax=bmax, kmax=kmax, latency=latency, recorder=recorder,
                    until=until, skip_ahead=skip_ahead, max_pending=max_pending, kv=kv,
                    check_invariants=bool(check_invariants))
    if early:  # the recorder counts the first tokens emitted with prefills
        engine.residents.first_tokens = recorder
    shown = progress.runs_are_shown()
    meter = None
    if shown:  # simulated seconds against the horizon, else arrivals against the count
        meter = progress.bar(horizon if horizon is not None else workload.count,
                             "s" if horizon is not None else "req", True, pol.name, False)
    sessions = None
    if isinstance(workload, Sessions):  # closed loops (docs/model.md §8.5)
        sessions = feed_sessions(env, engine.send, workload, until, on_end=engine.end_arrivals)
    else:
        env.process(feed(env, engine, workload, until, meter, early))
    if until is not None:
        origin = to_ticks(warmup)
        if origin:
            env.process(restart_at(env, recorder, origin))
        edges = [origin + edge for edge in window_times(until - origin)[:-1]]
        env.process(sample_windows(env, recorder, edges))
    if recorder.memory is not None and not (batches or timeseries) and max_pending is None:
        # no rows to log, no early stop: only the warm-up restart may cut a run
        recorder.memory.announced_before = to_ticks(warmup) + 1 if warmup else 0
    diverged: Optional[Diverged] = None
    try:
        env.run(until=until)
    except Diverged as stop:
        diverged = stop
    finally:
        if meter is not None:
            meter.close()
    end = until if until is not None and diverged is None else now_ticks(env)
    recorder.close(end)
    if isinstance(engine.residents, MemoryResidents):
        engine.residents.book_areas()
    if recorder.request_log is not None:
        recorder.request_log.extend(engine.residents)
        recorder.request_log.extend(engine.waiting)
    summary = recorder.summary(end, waiting=len(engine.waiting),
                               residents=len(engine.residents))
    if sessions is not None:
        summary = summary.with_figures(**sessions.figures())
    summary = summary.with_figures(**assess(summary, rate=offered_rate(workload),
                          mean_prefill=getattr(workload, "mean_prefill", None),
                          mean_decode=decode_work(workload, early),
                          work_conserving=pol.work_conserving, bmax=budget, kmax=kmax,
                          latency=engine.latency), diverged_at=None)
    if warmup:  # what the observed span starts with: arrivals = completed + ignored
        summary = summary.with_figures(pending_start=recorder.pending_start)  # + pending growth
    if diverged is not None:
        summary = summary.with_figures(verdict="diverged", diverged_at=to_seconds(diverged.now))
    params = {"scheduler": pol.name, "chunked": pol.chunked, "bmax": bmax, "kmax": kmax,
              "latency": repr(engine.latency), "horizon": horizon, "warmup": warmup,
              "workload": getattr(workload, "description", repr(workload))}
    if early:
        params["first_token"] = first_token
    memory = recorder.memory
    if memory is not None:
        params["kv"] = repr(kv)
        summary = summary.with_figures(**memory_figures([recorder], end))
        if memory.prefix is not None:  # Theorem 2 at the prompt really computed (model §8.3)
            summary = summary.with_figures(**effective_load(
                [memory.prefix], offered_rate(workload),
                getattr(workload, "mean_prefill", None), decode_work(workload, early),
                budget, engine.latency))
        if isinstance(pol, Wait):  # its quotas should never let memory overflow
            summary = summary.with_figures(threshold_error=memory.preemptions)
    return Result(summary, params, recorder.batch_log, recorder.request_log, recorder.series,
                  np.array(recorder.ttft), np.array(recorder.tpot),
                  np.array(recorder.tbt), np.array(recorder.sched_delay),
                  None if recorder.tokens is None else recorder.tokens.gaps(),
                  recorder.latencies,
                  kv_log=memory.log if memory is not None else None,
                  kv_series=memory.series if memory is not None else None)


def decode_work(workload: Any, early: bool) -> Optional[float]:
    """Mean decode tokens a request of ``workload`` brings to process: its mean
    output, less the first token when that comes with the prefill (``early``,
    prompts of a positive mean; a request without a prompt still decodes it,
    which a law that draws both ignores)."""
    mean = getattr(workload, "mean_decode", None)
    if early and mean is not None and getattr(workload, "mean_prefill", None):
        return mean - 1
    return mean


def refuse_early(workload: Any, policy: object) -> None:
    """Raise unless ``first_token="prefill"`` can run ``workload`` under ``policy``."""
    if isinstance(workload, Sessions):
        raise ValueError("first_token='prefill' is not supported with multi-turn sessions "
                         "(their transcripts count every output token's KV); allowed: "
                         "first_token='decode'")
    if isinstance(policy, Wait):
        raise ValueError("first_token='prefill' is not supported with the wait policy (its "
                         "quotas are per (vp, vd) class of the paper's model); allowed: "
                         "first_token='decode'")


def offered_rate(workload: Any) -> Optional[float]:
    """Requests per second ``workload`` brings in the long run, where known
    (sessions: theirs times their mean turns)."""
    if isinstance(workload, Sessions):
        return workload.request_rate
    return getattr(workload, "rate", None)


def requests_of(workload: Any) -> Optional[int]:
    """How many requests ``workload`` brings, an upper bound where only its
    law says (sessions: their turns' largest draw is not bounded, so their
    count times a generous 8x the mean turns), ``None`` when endless."""
    count = getattr(workload, "count", None)
    if isinstance(workload, Sessions) and count is not None:
        return int(count * 8 * (workload.mean_turns or 1))
    return count


def sample_windows(env: simpy.Environment, recorder: Recorder, edges: Iterable[int]
                   ) -> Generator[simpy.Event, object, None]:
    """A process that snapshots ``recorder`` at each edge before the horizon
    (the recorder adds the last one when it closes)."""
    for edge in edges:
        if edge > env.now:
            yield env.timeout(edge - env.now)
        recorder.snapshot(edge)


def restart_at(env: simpy.Environment, recorder: Recorder, at: int
               ) -> Generator[simpy.Event, object, None]:
    """A process that restarts ``recorder`` at ``at`` (warm-up deletion)."""
    yield env.timeout(at - env.now)
    recorder.restart(at)


def feed(env: simpy.Environment, engine: Engine, arrivals: Iterable[Arrival],
         until: Optional[int] = None, meter: Any = None,
         early: bool = False) -> Generator[simpy.Event, object, None]:
    """A process that submits ``(time, prefill, decode[, class])`` arrivals to ``engine``
    at their times, numbering requests from 0 in arrival order.  A progress
    ``meter`` (a tqdm bar) advances at each arrival: to the arrival time when
    the run has a horizon, else by one request.  ``early``: their first tokens
    come with their prefills (:func:`~llmqueue.engine.first_token.make_early`)."""
    rid = 0
    for arrival in arrivals:
        wait = delay_until(env, arrival[0], until, "arrival times")
        if wait is PAST_END:
            return
        if wait is not None:
            yield wait
        n = len(arrival)
        if n > 4 and (arrival[4] is not None or n > 5 and arrival[5] is not None):  # model §8.1
            r = prefix_request(rid, *arrival[1:7])
        else:
            r = Request(rid, arrival[1], arrival[2], arrival[3] if n > 3 else None)
        engine.submit(make_early(r) if early else r)
        rid += 1
        if meter is not None:
            meter.update(1 if until is None else env.now / 1e9 - meter.n)
    engine.end_arrivals()  # the workload is exhausted before the horizon
