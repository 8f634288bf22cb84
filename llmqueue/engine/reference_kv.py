"""The reference engine with a KV cache: the plain stepping of docs/model.md §6.1-6.4.

An independent, slow, obviously-correct counterpart of the fast engine under
memory, for equivalence tests.  It shares only the parameter holder
(:class:`~llmqueue.engine.kv.KV`, read for its fields), the policies, the
latency models and the result records with the fast engine; the gate, the
resident order, preemption and the memory accounting are written again here
from docs/model.md §6, scanning every resident at every step:

* a started resident occupies ``ceil(held / B)`` blocks, ``held`` being its KV
  (``lazy``), its KV plus the rest of its current prompt (``prompt``) or its
  peak (``peak``; ``max_tokens`` when set); the free blocks are ``N`` minus the
  sum of these over the started residents, recounted at every choice;
* residents are ordered by a key (docs/model.md §6.2): started ones ``(0, start)``, then
  preempted ones ``(1, -step, start)`` (latest step first, one step's victims
  oldest first), then the others ``(2, admission)``;
* the policy proposes with no budget; the gate (docs/model.md §6.3) walks the started
  residents' items (pass 1, preempting the latest start not yet allocated),
  then, only if nobody was preempted, the new starts (pass 2, head of line:
  the preempted residents' items first, by key, then the others in proposal
  order);
  when nothing was accepted it falls back to the started residents alone
  (docs/model.md §6.3 step 5), before re-proposing after a preemption for a one-phase
  policy, and otherwise re-proposes after a preemption (step 1); a policy
  that starts FCFS (WAIT) has its new starts walked by key;
* WAIT runs as the engine runs it: no budget, IDLE until the next arrival,
  and the drain (the arrivals over, or every slot taken) in the view; the
  policy reads each resident's key as the public order key ``seq``.

Decisions where docs/model.md is silent follow those documented in
:mod:`llmqueue.engine.kv`: a victim keeps its kmax slot, its admission, first
prefill end and first token; a chunk bigger than the budget left is cut (a
whole prompt is skipped in pass 1 and stops pass 2); recomputed tokens are the
positions at or below the most KV the request held; memory area is the sum over
iterations of the KV after allocation; livelocks and batches that can never
form raise :class:`~llmqueue.engine.errors.Stalled`.  ``preemption="swap"``
follows :mod:`llmqueue.engine.kv_swap`'s documented rules: one step's victims,
oldest start first, move to the pool while it holds their blocks (else they
are recomputed); while any is swapped the policy sees the started residents
only (no new starts); after a pass 1 that preempted nobody they come back,
oldest swap-out first, each with its next item, as the latest starts; the KV
moved at a choice costs ``swap_seconds_per_token`` each, added to the iteration.

A prefix cache (docs/model.md §8, ``cache``: :mod:`~llmqueue.engine.reference_prefix`)
plugs in at the hooks of :class:`~llmqueue.engine.reference_common.NoCache`;
the free blocks are recounted from the residents at every step, less the
blocks their common entries count twice (``cache.shared``).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Deque, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from llmqueue.common.units import UNLIMITED, to_ticks
from llmqueue.engine.errors import Stalled
from llmqueue.engine.kv import KV
from llmqueue.engine.kv_recorder import KVBatch
from llmqueue.engine.reference_common import (Memory, NoCache, arriving, incoming,
                                               iteration_end, kv_of, logged, next_choice, price,
                                               settings)
from llmqueue.engine.results import Batch
from llmqueue.models.context import BatchContext
from llmqueue.models.latency import LatencyModel
from llmqueue.policies.builtin import Policy
from llmqueue.policies.view import FRESH, IDLE, PREEMPTED, Plan, Request, SimpleView

Item = Tuple[Request, int, bool]  # (resident, tokens, is a decode)


class KVReference(NamedTuple):
    """What :func:`run_reference_kv` returns (times in nanoseconds)."""

    batches: List[Batch]
    """The batch log."""
    kv_log: List[KVBatch]
    """Memory per iteration, aligned with ``batches``."""
    requests: List[Request]
    """Every request that arrived, its :class:`Memory` in ``memory``."""


def public_seq(key: Tuple[int, ...]) -> int:
    """The order key a policy sees (``Request.seq``, :data:`UNSTARTED` and
    after) for a reference key: a start number; a preempted resident's key
    (later steps first, then by start); a fresh one's admission number."""
    if key[0] == 0:
        return key[1]
    if key[0] == 1:
        return PREEMPTED + ((1 << 30) + key[1]) * (1 << 28) + key[2]
    return FRESH + key[1]


def run_reference_kv(arrivals: Iterable[Sequence], policy: Policy, kv: KV, *,
                     bmax: Optional[int] = 128, kmax: Optional[int] = 100,
                     latency: Optional[LatencyModel] = None,
                     horizon: Optional[float] = None, cache: Optional[NoCache] = None,
                     first_token: str = "decode") -> KVReference:
    """Step the model of docs/model.md §6 with the cache ``kv``; see the module docstring
    (``first_token`` as in :func:`~llmqueue.engine.reference.run_reference`)."""
    cache = cache or NoCache()
    latency, policy, budget, slots, until = settings(policy, bmax, kmax, latency, horizon)
    if not policy.budgeted:
        budget = UNLIMITED  # WAIT ignores bmax (docs/model.md §6.5)
    arrivals = list(arrivals)
    # a horizon that cuts the workload short: its arrivals never end (no drain)
    more = until is not None and any(to_ticks(a[0]) >= until for a in arrivals)
    size, blocks = kv.block_size, kv.blocks
    share = kv.watermark if kv.watermark is not None else (
        0.01 if kv.admission == "prompt" else 0.0)
    reserve = math.floor(share * blocks)
    swap = kv.preemption == "swap"
    pool = (kv.swap_tokens or 0) // size  # blocks of the swap pool
    cost = kv.swap_seconds_per_token

    def ceil_blocks(tokens: int) -> int:
        return -(-tokens // size)

    def peak(r: Request) -> int:
        return kv.max_tokens if kv.max_tokens is not None else r.vp + r.vd

    def held(r: Request) -> int:  # tokens' worth of blocks a started resident occupies
        if kv.admission == "lazy":
            return kv_of(r)
        if kv.admission == "prompt":
            return kv_of(r) + r.prefill_left
        return peak(r)

    def started(r: Request) -> bool:
        return bool(r.memory.key[0] == 0)

    def need(r: Request, n: int, decode: bool) -> int:
        """Blocks ``r`` adds to process ``n`` tokens (one decode when ``decode``)."""
        if kv.admission == "lazy":
            after = kv_of(r) + n
        elif kv.admission == "prompt":
            after = kv_of(r) + r.prefill_left + (1 if decode else 0)
        else:
            after = peak(r)
        return ceil_blocks(after) - (ceil_blocks(held(r)) if started(r) else 0)

    line = incoming(arrivals, until, first_token)
    cache.begin(line)
    for r in line:
        r.memory = Memory()
    everyone = list(line)
    waiting: Deque[Request] = deque()
    residents: List[Request] = []
    batches: List[Batch] = []
    kv_log: List[KVBatch] = []
    swapped: List[Request] = []  # KV in the swap pool, in the order they come back
    counter = {"admitted": 0, "start": 0, "step": 0, "moved": 0}
    now = 0
    stale = 0

    def admit(r: Request, at: int) -> None:
        r.admitted = at
        if r.prefill_left == 0:
            r.prefill_done = at
        r.memory.key = (2, counter["admitted"])
        counter["admitted"] += 1
        residents.append(r)

    def arrive_until(limit: int, inclusive: bool) -> None:
        for r in arriving(line, limit, inclusive):
            cache.arrive(r)
            if (kv.max_tokens is not None and r.vp + r.vd > kv.max_tokens) \
                    or ceil_blocks(r.vp + r.vd) > blocks - reserve:
                r.memory.ignored = True  # never fits (docs/model.md §6.1)
            elif not waiting and len(residents) < slots:
                admit(r, r.arrival)
            else:
                waiting.append(r)

    def ordered() -> List[Request]:
        """The residents in key order, each given its key as the public order
        key ``seq`` that policies read (WAIT's groups, ``holds_kv``)."""
        for r in residents:
            r.seq = public_seq(r.memory.key)
        return sorted(residents, key=lambda r: r.memory.key)

    def preempt(victims: List[Request]) -> None:
        """One step's victims, oldest start first, move to the swap pool while it
        holds them (``swap``); the others go to the front of the unstarted."""
        counter["step"] += 1
        for r in victims:
            mem = r.memory
            if swap and ceil_blocks(kv_of(r)) <= pool - sum(ceil_blocks(kv_of(s))
                                                            for s in swapped):
                mem.preemptions += 1
                mem.swaps += 1
                mem.key = (3, 0)  # out of every view, holding no block of the cache
                swapped.append(r)
                counter["moved"] += kv_of(r)
                continue
            mem.high = max(mem.high, kv_of(r))
            mem.preemptions += 1
            mem.key = (1, -counter["step"], mem.key[1])
            decoded = r.vd - r.decode_left
            if kv.restart == "keep":
                r.prefill_left, r.decode_left = r.vp + decoded, r.vd - decoded
            else:
                r.prefill_left, r.decode_left = r.vp, r.vd
            cache.release(r, now)

    def room(holders: List[Request], spent: int) -> int:
        """Blocks free (empty or evictable) with ``holders`` holding KV (or, not
        yet started, their hits) and ``spent`` more blocks taken."""
        return (blocks - spent - sum(ceil_blocks(held(r)) for r in holders if started(r))
                + cache.shared(holders))

    def gate(proposal: Plan) -> Tuple[Plan, List[Request], List[Request]]:
        """docs/model.md §6.3 steps 2-3: the accepted plan, the victims, the new starts."""
        decodes: List[Item] = [(r, 1, True) for r in proposal.decode]
        chunks: List[Item] = [(r, n, False) for r, n in proposal.prefill]
        items = chunks + decodes if policy.prefill_first else decodes + chunks
        holders = [r for r in residents if started(r)]
        left, spent = budget, 0  # tokens of budget left, blocks taken
        accepted: Dict[int, int] = {}
        victims: List[Request] = []
        starts: List[Request] = []
        for r, n, decode in [item for item in items if started(item[0])]:  # pass 1
            if r in victims:
                continue
            if left <= 0:
                break
            if n > left:
                if not policy.chunked:
                    continue
                n = left
            wanted = need(r, n, decode)
            while room([s for s in holders if s not in victims], spent) < wanted:
                if kv.preemption == "none":
                    raise ValueError("KV cache full with preemption='none'")
                victim = max((s for s in holders if id(s) not in accepted
                              and s not in victims), key=lambda s: s.memory.key)
                victims.append(victim)
                if victim is r:
                    break
            if r in victims:
                break
            spent += wanted
            left -= n
            accepted[id(r)] = n
        if not victims:
            fresh = [item for item in items if not started(item[0])]
            # pass 2: the preempted first (by key: decodes and chunks merged), then the
            # others in proposal order; a group that starts FCFS (WAIT), all by key
            if policy.starts_fcfs:
                line = sorted(fresh, key=lambda item: item[0].memory.key)
            else:
                victims_first = sorted((i for i in fresh if i[0].memory.key[0] == 1),
                                       key=lambda item: item[0].memory.key)
                line = victims_first + [i for i in fresh if i[0].memory.key[0] != 1]
            prompts_blocked = False  # a whole prompt over the budget: no later prompt
            for r, n, decode in line:
                if left <= 0:
                    break
                if prompts_blocked and not decode:
                    continue
                if n > left:
                    if not policy.chunked:
                        prompts_blocked = True
                        continue
                    n = left
                wanted = need(r, n, decode)
                if room(holders + starts + [r], spent + wanted) < reserve:
                    break
                spent += wanted
                left -= n
                accepted[id(r)] = n
                starts.append(r)
        plan = Plan([r for r in proposal.decode if id(r) in accepted],
                    [(r, accepted[id(r)]) for r, _ in proposal.prefill if id(r) in accepted])
        if not victims and swapped:
            plan = swap_in(plan, left, room(holders + starts, spent))
        return plan, victims, starts

    def swap_in(plan: Plan, left: int, free: int) -> Plan:
        """Swapped requests come back after pass 1, oldest swap-out first, each
        with its next item, while it fits the budget and the watermark."""
        decode, prefill = list(plan.decode), list(plan.prefill)
        while swapped and left > 0:
            r = swapped[0]
            n = 1 if r.prefill_left == 0 else r.prefill_left
            if n > left:
                if not policy.chunked:
                    break
                n = left
            wanted = need(r, n, r.prefill_left == 0)  # not started: all its blocks
            if free - wanted < reserve:
                break
            swapped.pop(0)
            r.memory.key = (0, counter["start"])  # the latest start
            counter["start"] += 1
            counter["moved"] += kv_of(r)
            free -= wanted
            left -= n
            if r.prefill_left == 0:
                decode.append(r)
            else:
                prefill.append((r, n))
        return Plan(decode, prefill)

    def choose() -> Optional[Tuple[Plan, int, int]]:
        """Propose and gate until a batch forms: the plan, preemptions, new
        starts; ``None`` when the policy idles (WAIT)."""
        preempted = 0
        fallback = False
        while True:
            cache.peek([r for r in residents if not started(r)])
            order = [r for r in ordered() if started(r) or not (fallback or swapped)]
            draining = not (line or more or cache.more()) or len(residents) >= slots
            view = SimpleView([r for r in order if r.prefill_left == 0],
                              [r for r in order if r.prefill_left > 0], draining=draining)
            proposal = policy(view, UNLIMITED)
            if proposal is IDLE:
                return None
            plan, victims, starts = gate(proposal)
            if victims:
                preempted += len(victims)
                preempt(sorted(victims, key=lambda r: r.memory.key))
            if plan.decode or plan.prefill:
                for r in starts:
                    r.memory.key = (0, counter["start"])
                    counter["start"] += 1
                    cache.start(r, now)
                return plan, preempted, len(starts)
            if not fallback and any(started(r) for r in residents) and (
                    not victims or not policy.mixed):
                fallback = True  # step 5 comes before step 1's re-proposal
            elif victims:
                fallback = False
            else:
                raise Stalled(f"no batch can form at t={now} ns under {kv!r}")

    def context(plan: Plan) -> BatchContext:  # docs/model.md §7.2, with the decoders left out
        sitting = sum(1 for r in residents if r.prefill_left == 0 and r not in swapped)
        return BatchContext.of([kv_of(r) for r in plan.decode],
                               [(n, kv_of(r)) for r, n in plan.prefill],
                               sitting - len(plan.decode))

    while True:
        start = next_choice(now, residents, line, arrive_until)
        if start is None:
            break
        now = start
        counter["moved"] = 0
        chosen = choose()
        if chosen is None:  # idle until the next arrival (none: until the horizon)
            if not line:
                break
            now = line[0].arrival
            continue
        plan, preempted, new = chosen
        cache.settle(room([r for r in residents if started(r)],
                          sum(need(r, 1, True) for r in plan.decode)
                          + sum(need(r, n, False) for r, n in plan.prefill)), now)
        decode, prefill, requests, t = price(latency, plan, context)
        shares = [(r, 1 if kv_of(r) < r.memory.high else 0) for r in plan.decode] + [
            (r, max(0, min(kv_of(r) + n, r.memory.high) - kv_of(r))) for r, n in plan.prefill]
        recomputed = sum(over for _, over in shares)
        stale = stale + recomputed if recomputed == decode + prefill else 0
        if stale > 8 * sum(r.vp + r.vd for r in residents):
            raise Stalled(f"livelock at t={now} ns: only recomputed tokens")
        if counter["moved"] and cost:  # the swap traffic of this choice
            t += to_ticks(cost * counter["moved"])
        end = iteration_end(now, t, until, arrive_until)
        if end is None:
            break
        batches.append(logged(now, t, plan, prefill))
        served = list(residents)
        for r, over in shares:
            r.memory.recomputed += over
        cache.serve(plan, end)
        in_use = [r for r in served if started(r)]
        kv_log.append(KVBatch(sum(kv_of(r) for r in in_use),
                              blocks - room(in_use, 0), preempted, recomputed, new))
        for r in in_use:
            r.memory.area += kv_of(r)
            if r.finished is not None:
                cache.finish(r, end)
        residents = [r for r in residents if r.finished is None]
        while waiting and len(residents) < slots:
            admit(waiting.popleft(), end)
        now = end
    return KVReference(batches, kv_log, everyone)
