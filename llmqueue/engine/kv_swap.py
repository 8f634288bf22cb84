"""Preemption by swapping (docs/model.md §6.3 step 4, ``KV(preemption="swap")``): a
victim's KV moves to a CPU pool of ``swap_tokens`` and comes back later, so
the victim keeps its progress and recomputes nothing.

Decisions where docs/model.md §6 is silent (vLLM v0's swap path where it has one):

* **swap-out.**  The gate picks the victims as under ``recompute`` (latest
  (re)start first).  One step's victims are then taken oldest (re)start first;
  each moves its ``kv`` tokens (``ceil(kv / B)`` blocks of the pool) when they
  fit what is free in the pool, and is recomputed instead (``restart`` as
  configured) when they do not, so a full pool never stops a run (vLLM v0
  aborts the engine there: "lack of CPU swap space").  A swap-out is a
  preemption in every count (``preemptions``, per request and per
  iteration); the request keeps its slot, its progress, its first token.
* **while swapped** a request holds no block of the cache and its memory area
  does not grow; it stays a resident (pending, counted against kmax) but is
  out of the policy's view.  While any request is swapped, the policy
  proposes on the started residents alone: **no new starts** (vLLM v0
  schedules no prefill while its swapped queue is not empty).
* **swap-in** (vLLM v0's ``_schedule_swapped``): in a gate call that preempted
  nobody, after pass 1, swapped requests come back **oldest swap-out first**
  (one step's victims oldest (re)start first), each with its next item (a
  decode token, or its next prefill chunk, cut to the budget when prompts are
  chunked), while budget is left and ``free - need >= reserve`` (the
  watermark, as vLLM's ``can_swap_in``), ``need`` being the blocks it
  occupies with that item (its mode's reservation included).  The first that
  does not fit stops the others (head of line).  It takes a new (re)start
  number: the latest start, so the first victim of the next shortage.
* **cost.**  ``swap_seconds_per_token`` times the KV tokens moved (out and in)
  at a batch choice is added to the iteration that choice starts (moves of
  re-proposals at the same instant included): the batch log's duration
  includes it.
* **figures** (only with ``swap``): ``swap_outs``, ``swapped_out_tokens``,
  ``swap_ins``, ``swapped_in_tokens``, ``swap_fallbacks`` (victims
  recomputed because the pool was full), ``swap_seconds`` and ``swap_max``
  (most KV tokens in the pool).
* **skip-ahead** is off while any request is swapped and for an iteration
  whose choice moved KV; otherwise a run with ``swap`` is one without
  preemption so far, and skips as it would.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Deque, Iterator, List, Sequence, Tuple

from llmqueue.engine.kv import KV, kv_tokens
from llmqueue.engine.kv_recorder import MemoryRecorder
from llmqueue.engine.kv_residents import MemoryResidents
from llmqueue.policies.view import _NO_CLOCK, Plan, Request


def memory_residents(kv: KV) -> MemoryResidents:
    """The residents of an engine with cache ``kv``: with a swap pool when
    ``kv`` swaps."""
    if kv.prefix:
        from llmqueue.engine.prefix_residents import PrefixResidents
        return PrefixResidents(kv)
    return SwapResidents(kv) if kv.preemption == "swap" else MemoryResidents(kv)


class SwapResidents(MemoryResidents):
    """:class:`MemoryResidents` with a CPU swap pool."""

    def __init__(self, kv: KV) -> None:
        super().__init__(kv)
        self.swapped: Deque[Request] = deque()
        """Swapped requests, in the order they come back."""
        self.swap_free = kv.swap_blocks
        """Blocks free in the swap pool."""
        self.swap_tokens = 0
        """KV tokens in the swap pool."""
        self.moved = 0
        """KV tokens moved out or in since the last iteration started."""

    def __len__(self) -> int:
        return super().__len__() + len(self.swapped)

    def __iter__(self) -> Iterator[Request]:
        return itertools.chain(super().__iter__(), self.swapped)

    def swap_out(self, r: Request) -> int:
        """Move started ``r``'s KV to the pool (it must fit); return its tokens."""
        held = kv_tokens(r)
        rec = r.memory
        self._detach(r)
        left = r.decode_left
        r.clock = _NO_CLOCK  # off the decode clock: decode_left reads end_mark
        r.end_mark = left
        rec.preemptions += 1
        rec.swaps += 1
        rec.swapped = True
        self.swapped.append(r)
        self.swap_free -= self.kv.blocks_for(held)
        self.swap_tokens += held
        self.used_tokens -= held
        self.moved += held
        return held

    def swap_in(self, r: Request) -> int:
        """Bring back the first swapped request ``r`` as the latest start (the
        caller allocates its blocks); return its KV tokens."""
        held = kv_tokens(r)
        rec = r.memory
        self.swapped.popleft()
        rec.swapped = False
        rec.n0, rec.cs0 = self.iterations, self._clock_sum  # no area while swapped
        r.seq = self._next_start
        self._next_start += 1
        if r.prefill_left > 0:
            self.prefilling.insert(self.started_prefilling, r)  # the latest start
            self.started_prefilling += 1
            self.prefill_tokens += r.prefill_left
        else:
            self._start_decoding(r)
        self.swap_free += self.kv.blocks_for(held)
        self.swap_tokens -= held
        self.used_tokens += held
        self.moved += held
        return held

    def book_areas(self) -> None:
        for r in self.swapped:  # nothing held on the GPU since the swap-out
            r.memory.n0, r.memory.cs0 = self.iterations, self._clock_sum
        super().book_areas()


def preempt(residents: SwapResidents, victims: Sequence[Request], restart: str,
            memory: MemoryRecorder) -> Tuple[int, int]:
    """Swap out one gate step's ``victims`` (oldest (re)start first) while the
    pool holds them, recompute the others; return the KV tokens dropped and
    the number recomputed."""
    kv = residents.kv
    recompute: List[Request] = []
    for r in sorted(victims, key=lambda v: v.seq):
        if kv.blocks_for(kv_tokens(r)) <= residents.swap_free:
            memory.swapped_out(residents.swap_out(r), residents.swap_tokens)
        else:
            recompute.append(r)
    if not recompute:
        return 0, 0
    memory.swap_fallbacks += len(recompute)
    return residents.preempt(recompute, restart), len(recompute)


def swap_back(residents: SwapResidents, plan: Plan, budget: int, chunked: bool,
              memory: MemoryRecorder) -> Plan:
    """Swap in the swapped requests that fit after ``plan`` (pass 1's
    accepted items), oldest swap-out first, each with its next item; return
    ``plan`` with those items added."""
    kv = residents.kv
    left = budget - plan.tokens
    free = residents.free
    decode: List[Request] = []
    prefill: List[Tuple[Request, int]] = []
    while residents.swapped and left > 0:
        r = residents.swapped[0]
        is_decode = r.prefill_left == 0
        n = 1 if is_decode else r.prefill_left
        if n > left:
            if not chunked:
                break  # a whole prompt that does not fit blocks the line
            n = left
        need = kv.held_blocks(r) + kv.need(r, n, is_decode, True)
        if free - need < kv.reserve:
            break
        memory.swapped_in(residents.swap_in(r))
        free -= need
        left -= n
        if is_decode:
            decode.append(r)
        else:
            prefill.append((r, n))
    residents.free = free
    if not decode and not prefill:
        return plan
    return Plan(list(plan.decode) + decode, list(plan.prefill) + prefill)
