"""The reference engine: the simplest correct stepping of docs/model.md §2.

No SimPy, no skip-ahead, no counters: one iteration at a time, every resident
scanned and every token counted by hand (a context-aware latency model gets
each iteration's context built from the members' own counts, docs/model.md §7.2).  It is
slow on purpose and exists so tests can check the fast engine against it, batch
for batch.
"""

from __future__ import annotations

from collections import deque
from typing import Deque, Iterable, List, Optional, Sequence, Tuple

from llmqueue.engine.kv import KV
from llmqueue.engine.reference_kv import run_reference_kv
from llmqueue.engine.reference_common import (arriving, incoming, iteration_end, logged,
                                               next_choice, price, serve, settings)
from llmqueue.engine.results import Batch
from llmqueue.models.context import BatchContext
from llmqueue.models.latency import LatencyModel
from llmqueue.policies.builtin import Policy
from llmqueue.policies.view import Plan, Request, SimpleView



def context(plan: Plan) -> BatchContext:
    """What ``plan``'s members hold in KV caches before it runs (docs/model.md §7.2)."""
    return BatchContext.of([r.vp + r.vd - r.decode_left for r in plan.decode],
                           [(n, r.vp - r.prefill_left) for r, n in plan.prefill])


def run_reference(arrivals: Iterable[Sequence], policy: Policy, *, bmax: Optional[int] = 128,
                  kmax: Optional[int] = 100, latency: Optional[LatencyModel] = None,
                  horizon: Optional[float] = None, kv: Optional[KV] = None,
                  first_token: str = "decode") -> Tuple[List[Batch], List[Request]]:
    """Step the model; return the batch log and every request that arrived
    (times in nanoseconds, as the fast engine's logs).  With a KV cache ``kv``
    the stepping is docs/model.md §6's (:func:`~llmqueue.engine.reference_kv.run_reference_kv`,
    which also gives the memory log).  ``first_token`` as in
    :func:`llmqueue.simulate` (its requests' ``vd`` count the decode tokens)."""
    if kv is not None:
        out = run_reference_kv(arrivals, policy, kv, bmax=bmax, kmax=kmax, latency=latency,
                               horizon=horizon, first_token=first_token)
        return out.batches, out.requests
    latency, policy, budget, slots, until = settings(policy, bmax, kmax, latency, horizon)
    line = incoming(arrivals, until, first_token)
    everyone = list(line)
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
        for r in arriving(line, limit, inclusive):
            if not waiting and len(residents) < slots:
                admit(r, r.arrival)
            else:
                waiting.append(r)

    while True:
        start = next_choice(now, residents, line, arrive_until)
        if start is None:
            break
        now = start
        view = SimpleView([r for r in residents if r.prefill_left == 0],
                          [r for r in residents if r.prefill_left > 0])
        plan = policy(view, budget)
        decode, prefill, requests, t = price(latency, plan, context)
        end = iteration_end(now, t, until, arrive_until)
        if end is None:
            break
        batches.append(logged(now, t, plan, prefill))
        serve(plan, end)
        residents = [r for r in residents if r.finished is None]
        while waiting and len(residents) < slots:
            admit(waiting.popleft(), end)
        now = end
    return batches, everyone
