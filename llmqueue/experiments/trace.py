"""Replay a trace of requests on one engine until every request has finished
(or until ``--horizon``): a CSV (``arrival,prefill,decode``, or Azure's 2023
columns) or a Mooncake JSON Lines file (``.jsonl``: with each prompt's hash
ids, which a prefix cache reads: ``--set prefix=on`` with ``kv``).

A replay keeps the trace's own times unless ``speedup`` rescales them or
``limit`` keeps only the first requests, and says which in its replay line
(:func:`replay_line`), printed under the table and kept in ``--json``.  A
run to completion has no second half of steady arrivals for the drift check
of a run with a horizon, so a replay checks the backlog's drift over the
second half of its arrivals instead (:func:`replay_figures`): its
``replay_verdict`` says whether the engine kept up with the trace.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional

import numpy as np

from llmqueue.common.units import to_ticks
from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result
from llmqueue.engine.simulate import simulate
from llmqueue.experiments.base import (ENGINE_PARAMS, Experiment, Param, Rows, engine_kwargs,
                                       register)
from llmqueue.experiments.presets import SERVING_PARAMS
from llmqueue.experiments.traffic import PREFIX_PARAMS
from llmqueue.models.traces import Trace, read_trace
from llmqueue.theory.drift import WINDOWS, edge_slope, window_times
from llmqueue.theory.stability import measured_verdict

#: The keys that rescale a replay (quiet at their defaults: the trace as recorded).
REPLAY_PARAMS: Dict[str, Param] = {
    "speedup": Param("float", 1.0, "divide the trace's arrival times by this (2: twice its "
                     "rate; 1: as recorded)", quiet_default=True),
    "limit": Param("int-or-none", None, "replay only the first N requests (none: all)",
                   low=1, quiet_default=True),
}


def replay_info(trace: Trace, limit: Optional[int], speedup: float) -> Dict[str, Any]:
    """What a replay of ``trace`` (its first ``limit`` requests, times divided
    by ``speedup``) offers: requests, arrival span (s), tokens/s, and whether
    it was rescaled, with :func:`replay_line`'s text as ``note``."""
    n = len(trace) if limit is None else min(limit, len(trace))
    times = trace.times[:n] / speedup
    first, last = float(times[0]), float(times[-1])
    tokens = int(trace.prefill[:n].sum()) + int(trace.decode[:n].sum())
    info: Dict[str, Any] = {
        "path": trace.path, "format": trace.format, "requests": n, "of": len(trace),
        "speedup": speedup, "limit": limit, "rescaled": speedup != 1.0 or n < len(trace),
        "first_arrival_s": first, "last_arrival_s": last, "tokens": tokens,
        "offered_tokens_per_s": tokens / (last - first) if last > first else None}
    info["note"] = replay_line(info)
    return info


def replay_line(info: Mapping[str, Any]) -> str:
    """One line: the trace replayed, any rescaling (speedup, first requests
    only) and the tokens per second it offers."""
    n, of, speedup = info["requests"], info["of"], info["speedup"]
    which = f"the first {n:,} of {of:,} requests" if n < of else f"{n:,} requests"
    scale = "as recorded (no rescaling)" if speedup == 1.0 else (
        f"at speedup {speedup:g}: arrival times divided by {speedup:g}, so {speedup:g}x the "
        "recorded rate (speedup=1 replays it as recorded)")
    offered = info["offered_tokens_per_s"]
    rate = "" if offered is None else f", {offered:,.0f} tokens/s offered"
    span = info["last_arrival_s"] - info["first_arrival_s"]
    return (f"replay: {which} of {os.path.basename(info['path'])} ({info['format']}) {scale}; "
            f"arrivals over {span:,.0f} s{rate}")


def replay_figures(result: Result, info: Mapping[str, Any],
                   horizon: Optional[float] = None) -> Dict[str, Any]:
    """``offered_tokens_per_s`` and the backlog's drift over the second half of
    the arrivals (up to ``horizon``, or where the run diverged), from
    ``result``'s series: the slope and standard error of
    :func:`~llmqueue.theory.drift.edge_slope` and the verdict of
    :func:`~llmqueue.theory.stability.measured_verdict`, as a run with a
    horizon checks its second half."""
    start = to_ticks(info["first_arrival_s"])
    stop = [t for t in (horizon, result.summary.get("diverged_at")) if t is not None]
    end = to_ticks(min([info["last_arrival_s"], *stop]))  # what the run saw of the arrivals
    slope = se = None
    if result.series and end - start >= 2 * WINDOWS:
        rows = np.array(result.series, dtype=np.int64).reshape(-1, 3)
        edges = [start + edge for edge in window_times(end - start)]
        at = np.searchsorted(rows[:, 0], edges, side="right") - 1
        backlog = np.where(at >= 0, rows[np.maximum(at, 0), 2], 0)
        slope, se = edge_slope(edges, backlog.tolist())
    offered = info["offered_tokens_per_s"]
    return {"offered_tokens_per_s": offered, "replay_slope": slope, "replay_slope_se": se,
            "replay_verdict": measured_verdict(slope, se, offered)}


def replayed(result: Result, info: Mapping[str, Any], options: RunOptions) -> Result:
    """``result`` of a run made with a series, with :func:`replay_figures`
    added, ``info`` as its ``replay`` parameter, and the series dropped
    unless ``options`` asked for it."""
    result.add_figures(**replay_figures(result, info, options.horizon))
    result.params["replay"] = dict(info)
    if not options.timeseries:
        result.series = result.kv_series = None
    return result


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """One row labelled by its scheduler."""
    if not params["path"]:
        raise ValueError("path must name a trace file (a CSV of arrival,prefill,decode, or a "
                         "Mooncake .jsonl); give it with --set path=FILE")
    trace = read_trace(str(params["path"]), hash_block=params["hash_block"])
    workload = trace.workload(limit=params["limit"], speedup=params["speedup"])
    if not params["prefix"]:  # a trace's ids mean nothing to an engine without the cache
        workload = workload.without_ids()
    info = replay_info(trace, params["limit"], params["speedup"])
    result = simulate(workload, horizon=options.horizon, **engine_kwargs(params),
                      **{**options.logs(), "timeseries": True},  # for the replay's drift
                      first_token=params["first_token"])
    return [(str(params["scheduler"]), replayed(result, info, options))]


EXPERIMENT = register(Experiment(
    name="trace",
    summary="replay a trace (CSV, or Mooncake .jsonl with prefix ids) until all finish",
    params={**ENGINE_PARAMS, "path": Param("str", "", "the trace file to replay (.csv or "
                                           ".jsonl)"),
            "hash_block": PREFIX_PARAMS["hash_block"], **SERVING_PARAMS, **REPLAY_PARAMS},
    run=run,
))
