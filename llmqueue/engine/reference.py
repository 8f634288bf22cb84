"""The reference engine: the simplest correct stepping of SPEC section 2.

No SimPy, no skip-ahead, no counters: one iteration at a time, every resident
scanned and every token counted by hand (a context-aware latency model gets
each iteration's context built from the members' own counts, SPEC 8.2).  It is
slow on purpose and exists so tests can check the fast engine against it, batch
for batch.
"""

from __future__ import annotations

from collections import deque
from typing import Deque, Iterable, List, Optional, Sequence, Tuple

from llmqueue.common.units import UNLIMITED, to_ticks
from llmqueue.engine.kv import KV
from llmqueue.engine.reference_kv import run_reference_kv
from llmqueue.engine.results import Batch
from llmqueue.models.context import BatchContext
from llmqueue.models.latency import LatencyModel, Staircase
from llmqueue.policies.builtin import Policy
from llmqueue.policies.view import Request, SimpleView

INF = float("inf")


def run_reference(arrivals: Iterable[Sequence], policy: Policy, *, bmax: Optional[int] = 128,
                  kmax: Optional[int] = 100, latency: Optional[LatencyModel] = None,
                  horizon: Optional[float] = None, kv: Optional[KV] = None
                  ) -> Tuple[List[Batch], List[Request]]:
    """Step the model; return the batch log and every request that arrived
    (times in nanoseconds, as the fast engine's logs).  With a KV cache ``kv``
    the stepping is SPEC 7's (:func:`~llmqueue.engine.reference_kv.run_reference_kv`,
    which also gives the memory log)."""
    if kv is not None:
        out = run_reference_kv(arrivals, policy, kv, bmax=bmax, kmax=kmax, latency=latency,
                               horizon=horizon)
        return out.batches, out.requests
    latency = latency or Staircase()
    policy = policy.for_engine(latency, kmax)
    budget = bmax if bmax is not None else UNLIMITED
    slots = kmax if kmax is not None else INF
    until = to_ticks(horizon) if horizon is not None else None
    incoming: Deque[Request] = deque()
    for rid, a in enumerate(arrivals):
        at = to_ticks(a[0])
        if until is not None and at >= until:
            break
        r = Request(rid, a[1], a[2], a[3] if len(a) > 3 else None)
        r.arrival = at
        incoming.append(r)
    everyone = list(incoming)
    waiting: Deque[Request] = deque()
    residents: List[Request] = []
    batches: List[Batch] = []
    now = 0

    def admit(r: Request, at: int) -> None:
        r.admitted = at
        if r.prefill_left == 0:
            r.prefill_done = at
        residents.append(r)

    def arrive_until(limit: int, inclusive: bool) -> None:
        while incoming and (incoming[0].arrival < limit
                            or (inclusive and incoming[0].arrival == limit)):
            r = incoming.popleft()
            if not waiting and len(residents) < slots:
                admit(r, r.arrival)
            else:
                waiting.append(r)

    while True:
        arrive_until(now, inclusive=True)
        if not residents:
            if not incoming:
                break
            now = incoming[0].arrival
            continue
        view = SimpleView([r for r in residents if r.prefill_left == 0],
                          [r for r in residents if r.prefill_left > 0])
        plan = policy(view, budget)
        decode = len(plan.decode)
        prefill = sum(n for _, n in plan.prefill)
        requests = decode + len(plan.prefill)
        if getattr(latency, "needs_context", False):
            context = BatchContext.of([r.vp + r.vd - r.decode_left for r in plan.decode],
                                      [(n, r.vp - r.prefill_left) for r, n in plan.prefill])
            t = to_ticks(latency.batch_time(decode, prefill, requests,  # type: ignore[call-arg]
                                            context=context))
        else:
            t = to_ticks(latency.batch_time(decode, prefill, requests))
        end = now + t
        if until is not None and end >= until:
            arrive_until(until, inclusive=False)  # they came before the horizon
            break
        arrive_until(end, inclusive=False)
        batches.append(Batch(now, t, prefill, decode, requests, tuple(r.rid for r in plan.decode),
                              tuple((r.rid, n) for r, n in plan.prefill)))
        for r in plan.decode:
            r.decode_left -= 1
            if r.first_token is None:
                r.first_token = end
            if r.decode_left == 0:
                r.finished = end
        for r, n in plan.prefill:
            r.prefill_left -= n
            if r.prefill_left == 0:
                r.prefill_done = end
        residents = [r for r in residents if r.finished is None]
        while waiting and len(residents) < slots:
            admit(waiting.popleft(), end)
        now = end
    return batches, everyone
