"""Skip-ahead under a context-aware latency model (docs/model.md §7.2).

A run of ``k`` iterations of one plan (nothing admitted, finished or changing
phase before its last starts: :meth:`Engine.repeats`) holds the same batch each
time, but every decoder holds one more token each iteration and every chunk's
cached tokens grow by its size, so the iterations last different times.
:func:`context_run` prices each one at its own context, in order (the model's
``batch_times`` when it has one, else ``batch_time`` per iteration), and ends
the run at the last iteration that starts before the next event (while a slot
is free) and ends before the horizon: exactly what stepping one iteration at a
time gives.  Long runs count their ticks in numpy, with the same rounding
(half to even) of the same products as :func:`~llmqueue.common.units.to_ticks`.
"""

from __future__ import annotations

from typing import Any, List

import numpy as np

from llmqueue.common.units import MAX_SECONDS, TICKS_PER_SECOND, to_ticks
from llmqueue.engine.clock import now_ticks
from llmqueue.models.context import BatchContext
from llmqueue.policies.view import Plan

#: Runs of at least this many iterations have their ticks counted in numpy.
VECTOR = 16


def context_run(engine: Any, plan: Plan, decode: int, prefill: int, requests: int
                ) -> List[int]:
    """The lengths (ticks) of the iterations of ``plan`` to run as one: the
    first, then, when skip-ahead allows, each later one at its own context.
    ``engine`` is the :class:`~llmqueue.engine.processes.Engine` (which imports
    this module, so it is not imported here)."""
    model = engine.latency
    context = engine.residents.context(plan)
    first = engine._positive(to_ticks(model.batch_time(
        decode, prefill, requests, context=context)), decode, prefill)
    # the engine's bound from the first length is exact when later iterations last
    # at least as long (contexts only grow); otherwise it only cuts a run short
    k = engine.repeats(plan, first) if engine.skip_ahead else 1
    if k == 1:
        return [first]
    many = getattr(model, "batch_times", None)
    seconds = (many(decode, prefill, requests, context, k) if many is not None else
               _one_by_one(model, decode, prefill, requests, context, k))
    env = engine.env
    now = now_ticks(env)
    nxt = env.peek() if engine.pool.level >= 1 else float("inf")
    until = engine.until if engine.until is not None else float("inf")
    if k < VECTOR:
        times = [first]
        at = now + first
        for x in seconds[1:]:
            t = to_ticks(x) if not 0 < x < MAX_SECONDS else round(x * TICKS_PER_SECOND)
            if at >= nxt or at + t >= until:
                break
            if t <= 0:
                engine._positive(t, decode, prefill)
            times.append(t)
            at += t
        return times
    rest = np.asarray(seconds[1:], dtype=float)
    if not np.all(np.abs(rest) <= MAX_SECONDS):
        raise ValueError(f"times must be within {MAX_SECONDS:g} s; got a batch time of "
                         f"{rest.max()!r} s from {model!r}")
    ticks = np.rint(rest * TICKS_PER_SECOND).astype(np.int64)
    starts = now + first + np.concatenate(([0], np.cumsum(ticks[:-1])))
    cut = min(int(np.searchsorted(starts, nxt, "left")),
              int(np.searchsorted(starts + ticks, until, "left")))
    if cut and ticks[:cut].min() <= 0:
        engine._positive(int(ticks[:cut].min()), decode, prefill)
    return [first] + ticks[:cut].tolist()


def _one_by_one(model: Any, decode: int, prefill: int, requests: int, context: BatchContext,
                k: int) -> List[float]:
    """The seconds of ``k`` iterations from ``context`` for a model without
    ``batch_times`` (not inline: a comprehension in :func:`context_run` would
    make its locals closure cells on every call)."""
    return [model.batch_time(decode, prefill, requests, context=context.after(j, decode, prefill))
            for j in range(k)]
