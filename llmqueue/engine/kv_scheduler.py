"""The scheduler process of an engine with a KV cache (docs/model.md §6.3).

At each batch choice, after progress, releases and admissions of the instant
are settled (docs/model.md §6.3 step 6):

1. the policy proposes with no token budget (:data:`UNLIMITED`) on the view of
   :meth:`MemoryResidents.view`; builtin policies walk the residents in
   order, so they are shown the unstarted prefillers only as far as the budget
   and the free blocks could start them (at least one), which keeps a choice
   O(batch) however long the line; any other policy sees every resident;
2. the gate (:func:`llmqueue.engine.gate.gate`) charges ``bmax``, allocates and
   names victims; the victims are preempted at once (their dropped KV is
   added back to the backlog), or swapped out with ``preemption="swap"``
   (:mod:`~llmqueue.engine.kv_swap`: then, while any request is swapped, the
   policy proposes on the started residents alone, and a gate call that
   preempted nobody swaps requests back in after pass 1);
3. if the gate accepted nothing while started residents exist, and either
   preempted nobody or the policy is one-phase (``vllm``,
   ``fastertransformer``: its item preempted itself), the policy proposes on
   the started residents alone and that is gated (the fallback of §6.3 step 5:
   a ``vllm`` prefill step that cannot start becomes a decode step);
   otherwise, or if that is empty too, a gate that preempted proposes again
   at the same instant (the victims now unstarted); a policy that returns
   :data:`~llmqueue.policies.view.IDLE` leaves the GPU idle until an arrival
   (or until the arrivals end: the view then says it is draining, and WAIT
   starts what it has);
4. the iteration runs, progress is applied, finished residents release their
   slot and their KV.

A run whose iterations only recompute lost tokens for longer than any
recovery could take (more than eight times the residents' tokens) is a
livelock, and raises :class:`Stalled` rather than loop forever (not
``vllm`` + ``lazy`` with chunks: the fallback decodes the others first).

Skip-ahead (:func:`repeats`) runs ``k`` identical iterations as one only where
memory provably cannot change them: the choice preempted nobody and
recomputed nothing, its new starts (if any) are prompts that later choices
walk in the same place of the budget (a policy that charges decodes first),
the decoders are all served when blocks hold more than one token, the
started residents fitting all ``k`` allocations, and no KV moved to or from
a swap pool nor any request swapped out; under a prefix cache, no entry is
made before the last iteration nor evicted; otherwise, and whenever
``check_invariants`` is on, every iteration is stepped.  Either way the
figures are the same (``tests/test_kv_skip.py``, ``test_prefix_engine.py``).
"""

from __future__ import annotations

from typing import Generator, NamedTuple, Optional, Tuple

import simpy

from llmqueue.common.units import UNLIMITED, to_ticks
from llmqueue.engine.errors import Stalled
from llmqueue.engine.gate import gate
from llmqueue.engine.kv_blocks import Growth, block_growth, block_steps
from llmqueue.engine.kv_invariants import check_state
from llmqueue.engine.kv_swap import SwapResidents, preempt, swap_back
from llmqueue.policies.builtin import VLLM, FasterTransformer, Sarathi
from llmqueue.policies.view import IDLE, UNSTARTED, Plan, check_plan


class Choice(NamedTuple):
    """One batch choice under memory (its new starts: ``engine.last_starts``)."""

    plan: Plan
    preemptions: int
    moved: int = 0
    """KV tokens moved to or from the swap pool (``kv_swap``)."""


def _starts_repeat(engine, plan: Plan) -> bool:  # noqa: ANN001
    """Whether this choice's new starts leave the next choices the same batch:
    they are prompts (no decoder), the policy charges decodes first, and they
    close the plan's prefill chunks, so next time, started, they are walked in
    pass 1 in the same place of the budget as now in pass 2."""
    started, prefill = engine.last_starts, plan.prefill
    n = len(prefill) - len(started)
    if engine.prefill_first or n < 0:
        return False
    for s in started:
        r = prefill[n][0]
        if r is not s or r.prefill_left <= 0:
            return False
        n += 1
    return True


def roomy(engine) -> bool:  # noqa: ANN001 - an Engine
    """Whether this engine's choices may skip the gate when memory cannot bind
    them (:func:`choose_roomy`): no swap, and a decodes-first built-in policy
    (``sarathi``, ``vllm``, ``fastertransformer``) with a finite budget."""
    return (engine.kv.preemption != "swap" and not engine.kv.prefix
            and engine.budget != UNLIMITED
            and not engine.prefill_first and not engine.check_plans
            and type(engine.policy) in (Sarathi, VLLM, FasterTransformer))


def choose_roomy(engine, one: bool) -> Optional[Plan]:  # noqa: ANN001 - an Engine
    """The choice when memory does not bind it: the policy's own batch under
    ``bmax``, when its items' blocks fit the free blocks (less the watermark's
    reserve if it starts anyone) and every decoder holds KV already.
    Then the gate would accept that batch as it is (pass 1 takes the started
    residents' items in order, pass 2 the new starts after them, both charged
    in the order the policy charges them, and no step runs short of blocks),
    so the new starts are its items that hold no KV yet (``engine.last_starts``),
    the last of its prefill items (the policy walks the started residents
    first), which the next choices walk in the same place (``_starts_repeat``).
    ``one``: a block per token processed (blocks of one token, ``lazy``).
    ``tests/test_kv_skip.py`` checks that this gives the gate's figures.
    ``None`` (left to :func:`choose`, which knows preemption, the fallback and
    the stalls) when the batch is empty or its blocks do not fit."""
    residents, kv = engine.residents, engine.kv
    plan = engine.policy.plan(residents, engine.budget)
    decode = plan.decode
    if not decode:
        if not plan.prefill:
            return None
        blocks = 0
    elif one:
        blocks = len(decode)
    elif len(decode) == len(residents.decoding):
        blocks = residents.decode_need()
    else:
        blocks = 0
        for r in decode:
            blocks += kv.need(r, 1, True, True)
    starts = []
    for r, n in plan.prefill:
        fresh = r.seq >= UNSTARTED
        blocks += n if one else kv.need(r, n, False, not fresh)
        if fresh:
            starts.append(r)
    if blocks > residents.free - (kv.reserve if starts else 0):
        return None
    residents.free -= blocks
    for r in starts:
        residents.start(r)
    engine.last_starts = starts
    return plan


def choose(engine, swap: bool = False, drains: bool = False  # noqa: ANN001 - an Engine
           ) -> Optional[Choice]:
    """Propose, gate, preempt and start until a batch is found; ``None``
    when the policy asked to idle.  ``swap``: the residents may swap
    (:class:`SwapResidents`); ``drains``: the policy reads whether arrivals are
    over (``wait``), so the view must say so."""
    residents, kv, policy, budget = engine.residents, engine.kv, engine.policy, engine.budget
    recorder, prefill_first, prefix = engine.recorder, engine.prefill_first, kv.prefix
    fcfs, one_phase = policy.starts_fcfs, not policy.mixed
    preempted, fallback = 0, False
    while True:
        free = residents.free
        cap = min(budget, free * kv.block_size) if engine.fcfs else None
        if drains:
            residents.draining = engine.draining
        swapped = swap and bool(residents.swapped)  # no new starts while any is swapped
        view = residents.view(cap, started_only=fallback or swapped)
        proposal = policy.plan(view, UNLIMITED)
        if proposal is IDLE:
            return None
        if engine.check_plans:
            check_plan(proposal, view, UNLIMITED, policy.name)
        hint = None  # the blocks of all decoders at once, when the proposal takes them all
        if residents.serves_all(proposal, view) and not residents.unstarted_decoders:
            hint = residents.decode_need()
        gated = gate(proposal, residents.gate_kv() if prefix else kv, free, budget,
                     residents.started_order, policy.chunked, prefill_first, hint, fcfs)
        if gated.victims:
            now = engine.env.now
            if swap:
                dropped, recomputed = preempt(residents, gated.victims, kv.restart,
                                              recorder.memory)
            else:
                dropped, recomputed = residents.preempt(gated.victims, kv.restart), 1
            preempted += len(gated.victims)
            recorder.memory.preempted(len(gated.victims))
            if recomputed:
                recorder.add_work(now, dropped)
        residents.free = gated.free
        plan = gated.plan
        if swapped and not gated.victims:  # swap-in after pass 1 (kv_swap)
            plan = swap_back(residents, plan, budget, policy.chunked, recorder.memory)
        if plan.decode or plan.prefill:
            starts = gated.starts
            for r in starts:
                residents.start(r)
            engine.last_starts = starts
            if swap:
                moved, residents.moved = residents.moved, 0
                return Choice(plan, preempted, moved)
            return Choice(plan, preempted)
        if not fallback and residents.any_started() and (one_phase or not gated.victims):
            fallback = True  # step 5, before step 1's re-proposal for a one-phase policy
            continue
        if gated.victims:
            fallback = False
            continue
        raise Stalled(_stall_message(engine, proposal, fallback))


def _stall_message(engine, proposal: Plan, fallback: bool) -> str:  # noqa: ANN001
    policy, kv = engine.policy, engine.kv
    now = engine.env.now / 1e9
    if fallback:
        return (f"policy {policy.name!r} gave the started residents nothing to do at "
                f"t={now:.6f} s although they hold KV; the run can never make progress")
    if not proposal:
        return (f"policy {policy.name!r} formed an empty batch at t={now:.6f} s while "
                f"{len(engine.residents)} residents have work; the run can never make progress")
    items = [(r, 1) for r in proposal.decode] + list(proposal.prefill)
    r, n = items[0]
    return (f"nothing fits at t={now:.6f} s with the KV cache empty: request {r.rid} "
            f"needs {n} tokens in one piece (bmax={engine.budget}, chunked="
            f"{str(policy.chunked).lower()}, {kv.blocks} blocks of {kv.block_size}); a "
            "recomputed prompt (prompt + decoded tokens under restart='keep') can outgrow "
            "bmax: allowed: chunked=true, restart='scratch', or bmax >= vp + vd")


def repeats(engine, plan: Plan, k: int, tokens: int, decoders: int,  # noqa: ANN001
            listed: bool) -> Tuple[int, Growth]:
    """How many of the ``k > 1`` iterations of ``plan`` that the engine's own
    skip-ahead allows (:meth:`Engine.repeats`) may run as one under memory, and
    the blocks each after the first adds: a number, or with blocks of ``B > 1``
    tokens the running total after each further iteration
    (:func:`~llmqueue.engine.kv_blocks.block_steps`), or, unless the run is
    ``listed`` (the recorder may book it step by step) and when all of them
    fit, the closed form of those totals
    (:func:`~llmqueue.engine.kv_blocks.block_growth`).  The residents
    take the KV tokens and blocks of those further iterations at once.

    Called only when this choice preempted and recomputed nothing and started
    only prompts that the next choices walk in the same place (``_starts_repeat``):
    then, while no resident changes phase or arrives (the engine's own
    skip-ahead bounds), the next choices are the same batch, provided the
    started residents keep fitting.  Every further iteration adds ``tokens``
    KV tokens and, in blocks of one token, ``tokens`` blocks (``lazy``),
    ``decoders`` (``prompt``: chunks are reserved) or none (``peak``); larger
    blocks grow unevenly.  A new start that failed keeps failing (free blocks
    only fall during the run) and one that was not tried is still not tried.
    """
    kv, residents = engine.kv, engine.residents
    grow: Growth = 0
    if kv.admission == "peak":
        added = 0
    elif kv.block_size > 1:
        if plan.decode and len(plan.decode) != len(residents.decoding):
            return 1, 0  # a partial decode batch: its decoders' blocks are not counted
        if not plan.decode and kv.admission != "lazy":
            added = 0  # a prompt step under ``prompt`` admission reserved its blocks
        else:
            growth = None if listed else block_growth(residents, plan, k)
            if growth is None:  # rows wanted, or memory runs short: step by step
                steps = block_steps(residents, plan, k)
                k = 1 + len(steps)
                added = steps[-1] if steps else 0
                grow = steps
            else:
                added = growth[1]
                grow = growth
    else:
        each = tokens if kv.admission == "lazy" else decoders
        if each:
            k = min(k, 1 + residents.free // each)
        added = (k - 1) * each
        grow = each
    residents.free -= added
    residents.used_tokens += (k - 1) * tokens
    return k, grow


def memory_scheduler(engine) -> Generator[simpy.Event, object, None]:  # noqa: ANN001
    """The scheduler process of ``engine`` (which has a KV cache)."""
    env, residents, recorder = engine.env, engine.residents, engine.recorder
    memory, kv = recorder.memory, engine.kv
    gpu_request = None
    check = engine.check_invariants
    skip = engine.skip_ahead and not engine.contexts  # a context model's runs: stepped
    cache = residents.cache if kv.prefix else None
    if cache is not None:
        residents.attach(env, recorder)
    swap = isinstance(residents, SwapResidents)
    drains = not engine.fcfs  # the built-in FCFS policies never read the drain; others may
    fast, budget = roomy(engine), engine.budget
    one = kv.block_size == 1 and kv.admission == "lazy"  # a block per token processed
    stale = 0  # tokens processed since the last iteration with a fresh token
    ticks = None if engine.contexts else engine._batch_ticks  # a context model sees the plan
    until = UNLIMITED if engine.until is None else engine.until  # a run to it is announced
    announced_before = memory.announced_before  # set before the run begins
    while True:
        wait = engine.settle()
        if wait is not None:
            yield wait
        if not len(residents):
            if gpu_request is not None:
                engine.gpu.release(gpu_request)
                gpu_request = None
            yield from engine.sleep()
            continue
        if gpu_request is None:
            gpu_request = engine.gpu.request()
            yield gpu_request
            continue
        residents.settle()
        plan: Optional[Plan] = None
        if fast and residents.free >= budget and not residents.unstarted_decoders:
            plan = choose_roomy(engine, one)
        if plan is not None:
            preemptions = moved = 0
            # its new starts close the plan: a built-in policy walks the started first
            steady = True
        else:
            choice = choose(engine, swap, drains)
            if choice is None:
                memory.level(env.now, residents.used_tokens, kv.blocks - residents.free)
                engine.gpu.release(gpu_request)
                gpu_request = None
                yield from engine.sleep()
                continue
            plan, preemptions, moved = choice
            if cache is not None:  # evict what this choice's allocation needs
                cache.settle(residents.free, env.now)
            steady = (not preemptions and not moved and not (swap and residents.swapped)
                      and (not engine.last_starts or _starts_repeat(engine, plan)))
        used = kv.blocks - residents.free
        decode = len(plan.decode)
        prefill = 0
        for _, chunk in plan.prefill:
            prefill += chunk
        requests = decode + len(plan.prefill)
        tokens = decode + prefill
        residents.used_tokens = held = residents.used_tokens + tokens
        t = ticks(decode, prefill, requests) if ticks else engine.batch_ticks(
            decode, prefill, requests, plan)
        if moved and kv.swap_seconds_per_token:  # the swap traffic of this choice
            cost = to_ticks(kv.swap_seconds_per_token * moved)
            memory.swap_ticks += cost
            t += cost
        start = env.now
        if residents.scarred:  # only a resident preempted before may recompute
            recomputed, shares = residents.recompute(plan)
            if recomputed < tokens:
                stale = 0
            else:
                stale += recomputed
                if stale > 8 * residents.total_tokens:
                    raise Stalled(f"livelock at t={start / 1e9:.6f} s: the last {stale} "
                                  "tokens processed were all recomputed after preemptions, "
                                  f"with no progress (policy {engine.policy.name!r}, {kv!r}); "
                                  "a new start keeps preempting itself; allowed: "
                                  "admission='prompt' or 'peak', a mixed policy, or a larger "
                                  "cache")
        else:
            recomputed, shares, stale = 0, None, 0
        listed = start < announced_before  # booked as its iterations end: blocks listed
        k, grow = 1, 0  # type: Tuple[int, Growth]
        if skip and steady and not recomputed and not residents.redo:
            k = engine.repeats(plan, t)
            if k > 1 and cache is not None:  # a quiet run: no entry made, none evicted
                k = residents.quiet(plan, k)
            if k > 1:
                hidden = cache.evictable * cache.m if cache is not None else 0
                residents.free -= hidden  # a skipped run takes empty blocks only
                k, grow = repeats(engine, plan, k, tokens, decode, listed)
                residents.free += hidden
        recorder.start_run(start, t, k, plan, decode, prefill, requests, residents.demand)
        span = k * t
        announce = listed or start + span >= until  # a single iteration may reach it
        if announce:
            memory.allocate(start, held, used, preemptions, recomputed, len(engine.last_starts),
                            t, k, tokens, grow)
        if check:
            check_state(residents, kv, plan)
        yield env.timeout(span)
        if shares:  # processed now (k is 1 when anything is recomputed)
            for rec, over in shares:
                rec.recomputed += over
        prefilled, finished = residents.apply(plan, k, start, t)
        now = env.now
        recorder.commit(now)
        if announce:
            memory.commit(now)
        else:  # booked at once: nothing cut the run or read its rows
            if preemptions or recomputed:
                memory.ended(recomputed, preemptions)
            if k == 1:
                memory.level(start, held, used)
            else:
                memory.book(start, t, 0, k - 1, held, tokens, used, grow)
        if finished:
            areas = residents.release(finished)
            memory.released(now, residents.used_tokens, kv.blocks - residents.free,
                            len(finished), areas)
        if check:
            check_state(residents, kv, None)
        for r in finished:
            recorder.finish(now, r)
        engine.wake(now, prefilled, finished)
