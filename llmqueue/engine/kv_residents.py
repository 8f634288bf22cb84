"""The residents of an engine with a KV cache (docs/model.md §6.2-6.3, §6.7).

:class:`MemoryResidents` extends :class:`~llmqueue.engine.residents.Residents`
with what memory adds, still touching only the residents that change:

* **order.**  ``Request.seq`` is an order key (:mod:`llmqueue.engine.kv`):
  started residents carry their (re)start number, unstarted ones a larger key,
  preempted ones (latest step first, one step's victims oldest first) ahead of
  the others (by admission).  ``decoding`` and ``prefilling`` stay sorted by it,
  so policies walk started residents in (re)start order, then the unstarted.
  The first :attr:`started_prefilling` prefillers are the started ones.
* **blocks.**  :attr:`free` blocks and :attr:`used_tokens` (the KV actually
  held).  A started decoder's KV is ``vp + vd - end_mark + clock``, so it
  grows with the shared decode clock and is never stored; with blocks of
  ``B > 1`` tokens, decoders are counted by ``(end_mark - vp - vd) mod B``
  (:attr:`due`), the clock value mod ``B`` at which their KV is a multiple
  of ``B``, so the blocks a full decode batch needs at clock ``c`` are
  ``due[c mod B]``: one lookup, no walk.
* **memory area** (Σ over iterations of a resident's KV after allocation):
  with ``C_n`` the sum of the clock over the first ``n`` iterations, a decoder
  on the clock adds ``(vp + vd - end_mark) Δn + ΔC`` between two touches, any
  other resident ``kv Δn``; so a record is settled only when its resident is
  touched (a chunk, a partial decode batch, a phase change, preemption).
* **recompute.**  ``high`` is the most tokens a request ever held; tokens at
  positions up to it are recomputed.  Under ``scratch`` a restarted decoder
  re-decodes until its KV reaches ``high``: such decoders sit in :attr:`redo`.
* **preemption** (:meth:`preempt`): the victim keeps its slot (releasing it
  and retaking it at once from the front of the wait line is the same) and
  becomes an unstarted resident with its new work (``keep``: prefill
  ``vp + d``, decode ``vd - d``; ``scratch``: ``vp`` and ``vd``).
"""

from __future__ import annotations

from dataclasses import dataclass

import bisect
import itertools
from heapq import heapify
from typing import Any, List, Optional, Sequence, Tuple

from llmqueue.engine.kv import KV, kv_tokens
from llmqueue.engine.residents import Residents
from llmqueue.policies.view import (_NO_CLOCK, FRESH, PREEMPTED, UNSTARTED, Plan, Request,
                                     SimpleView)


def _seq(r: Request) -> int:
    return r.seq


@dataclass(slots=True)
class Held:
    """One request's KV record (``Request.memory``)."""

    preemptions: int = 0
    """Times it was preempted."""
    recomputed: int = 0
    """Tokens it processed a second (or later) time."""
    high: int = 0
    """Most KV tokens it ever held before its last preemption."""
    redo: bool = False
    """Whether its next decode tokens re-process positions it held before."""
    area: int = 0
    """Σ over iterations of its KV (token-iterations), settled to ``n0``."""
    n0: int = 0
    """The iteration count up to which ``area`` is settled."""
    cs0: int = 0
    """The decode clocks' running sum at ``n0`` (for the area of a served decoder)."""
    first_prefill: Optional[int] = None
    """When its first incarnation's prefill ended (ns), noted at its first
    preemption if it had ended by then; its prefill end ever after."""
    ignored: bool = False
    """Rejected on arrival: it could never fit (docs/model.md §6.1)."""
    swaps: int = 0
    """Of its preemptions, those that moved its KV to the swap pool."""
    swapped: bool = False
    """Its KV is in the swap pool now (it holds no blocks of the cache)."""


class MemoryResidents(Residents):
    """Residents in the order of docs/model.md §6.2, with the KV cache they share."""

    def __init__(self, kv: KV) -> None:
        super().__init__()
        self.kv = kv
        self.free = kv.blocks
        """Blocks not held."""
        self.used_tokens = 0
        """KV tokens held by the residents (after the current allocation)."""
        self.total_tokens = 0
        """Σ (vp + vd) over the residents."""
        self.started_prefilling = 0
        self.unstarted_decoders = 0
        self.iterations = 0
        self._clock_sum = 0
        self._next_start = 0
        self._front = PREEMPTED
        self.due: Optional[List[int]] = [0] * kv.block_size if kv.block_size > 1 else None
        """With blocks of ``B > 1`` tokens: ``due[j]`` started decoders take a new
        block in a full decode step at a clock ``c`` with ``c mod B = j``."""
        self.scarred = 0
        """Residents that were preempted at least once (only they recompute)."""
        self.redo: dict = {}
        self.draining = False
        """Whether no resident can join before the batch being chosen runs
        (set by the scheduler; :func:`~llmqueue.policies.view.is_draining`)."""

    @property
    def block_size(self) -> int:
        """Tokens per block (the cache's: not stored, so that the residents
        keep under 30 attributes with a user's policy's :attr:`shown`)."""
        return self.kv.block_size

    # -- joining ---------------------------------------------------------
    def admit(self, r: Request, now: int) -> None:
        super().admit(r, now)
        r.seq += FRESH
        self.total_tokens += r.vp + r.vd
        if r.memory is None:
            r.memory = Held()

    def settle(self) -> None:
        incoming = self._incoming
        if not incoming:
            return
        n, cs = self.iterations, self._clock_sum
        for r in incoming:  # unstarted: after every started resident, by admission
            rec = r.memory
            rec.n0 = n
            rec.cs0 = cs
            if r.prefill_left > 0:
                self.prefilling.append(r)
                self.prefill_tokens += r.prefill_left
            else:
                self.unstarted_decoders += 1
                self._start_decoding(r)
        self._incoming = []

    def _start_decoding(self, r: Request) -> None:
        self._join_decoders(r)
        if r.first_token is None:  # one that decoded before a preemption keeps its first token
            self._fresh.append(r)
        if r.seq < UNSTARTED:
            if self.due is not None:
                self._due_add(r)
            rec = r.memory
            if rec.high and r.vp + r.vd - r.prefill_left - r.decode_left < rec.high:
                rec.redo = True
                self.redo[id(r)] = r

    def _due_add(self, r: Request) -> None:
        if self.due is not None:
            self.due[(r.end_mark - r.vp - r.vd) % self.kv.block_size] += 1

    def _due_remove(self, r: Request) -> None:
        if self.due is not None:
            self.due[(r.end_mark - r.vp - r.vd) % self.kv.block_size] -= 1

    # -- what the gate reads --------------------------------------------
    def view(self, cap: Optional[int] = None, started_only: bool = False) -> Any:
        """The policy's view: every started resident, then the unstarted ones.
        With ``cap``, unstarted prefillers only until their prompts reach
        ``cap`` tokens (always at least one): an FCFS policy's later ones could
        not start anyway.  A user's policy reads it through :attr:`shown`."""
        prefilling, shown = self.prefilling, self.shown
        s = self.started_prefilling
        if started_only:
            decoding = self.decoding[:len(self.decoding) - self.unstarted_decoders]
            view = SimpleView(decoding, prefilling[:s], len(self), self.draining)
            return view if shown is None else shown(view)
        if cap is not None:
            j, tokens, end = s, 0, len(prefilling)
            while j < end and (j == s or tokens < cap):
                tokens += prefilling[j].prefill_left
                j += 1
            if j < end:
                view = SimpleView(self.decoding, prefilling[:j], len(self), self.draining)
                return view if shown is None else shown(view)
        return self if shown is None else shown(self)  # every resident, in order

    def started_order(self) -> List[Request]:
        """Started residents, oldest (re)start first."""
        decoders = self.decoding[:len(self.decoding) - self.unstarted_decoders]
        return sorted(itertools.chain(decoders, self.prefilling[:self.started_prefilling]),
                      key=_seq)

    def any_started(self) -> bool:
        """Whether any resident holds KV."""
        return self.started_prefilling > 0 or len(self.decoding) > self.unstarted_decoders

    def decode_need(self) -> int:
        """Blocks a decode token for every started decoder needs now."""
        if self.kv.admission == "peak":
            return 0
        if self.due is None:
            return len(self.decoding) - self.unstarted_decoders
        return self.due[self.clock[0] % self.kv.block_size]

    # -- what the gate decided ------------------------------------------
    def start(self, r: Request) -> None:
        """``r`` takes KV for the first time since admission or preemption."""
        r.seq = self._next_start
        self._next_start += 1
        if r.prefill_left > 0:
            i = self.started_prefilling
            if self.prefilling[i] is not r:
                self.prefilling.remove(r)
                self.prefilling.insert(i, r)
            self.started_prefilling = i + 1
        else:
            self.unstarted_decoders -= 1
            self.decoding.remove(r)
            bisect.insort(self.decoding, r, key=_seq)
            self._due_add(r)
            rec = r.memory
            if rec.redo:
                self.redo[id(r)] = r
            # its KV from now on: none, or a prompt that arrived prefilled (Engine.call)
            self.used_tokens += kv_tokens(r)
            rec.n0, rec.cs0 = self.iterations, self._clock_sum

    def preempt(self, victims: Sequence[Request], restart: str) -> int:
        """Preempt ``victims`` (one gate step); return the KV tokens they drop."""
        dropped = 0
        ordered = sorted(victims, key=_seq)  # one step's victims, oldest first
        self._front -= len(ordered)
        for i, r in enumerate(ordered):
            dropped += self._preempt(r, self._front + i, restart)
        self.used_tokens -= dropped
        return dropped

    def _preempt(self, r: Request, key: int, restart: str) -> int:
        rec = r.memory
        held = kv_tokens(r)
        if rec.preemptions == rec.swaps:  # its first preemption that drops KV
            self.scarred += 1
        rec.high = max(rec.high, held)
        rec.preemptions += 1
        if rec.first_prefill is None:  # None if its first prefill had not ended
            rec.first_prefill = r.prefill_done
        self._detach(r)
        left = r.decode_left
        if restart == "keep":
            prefill, decode = r.vp + r.vd - left, left
        else:
            prefill, decode = r.vp, r.vd
        r.clock = _NO_CLOCK
        r.end_mark = decode
        r.prefill_left = prefill
        r.seq = key
        if prefill > 0:
            bisect.insort(self.prefilling, r, lo=self.started_prefilling, key=_seq)
            self.prefill_tokens += prefill
        else:
            self.unstarted_decoders += 1
            self._start_decoding(r)
            if kv_tokens(r) < rec.high:
                rec.redo = True  # counted in redo once it starts
        return held

    def _detach(self, r: Request) -> None:
        """Take started ``r`` out of the decoders or the prefillers, its memory
        area booked so far (a preemption or a swap-out)."""
        rec = r.memory
        self._settle(r, self.iterations, self._clock_sum)
        if rec.redo:
            rec.redo = False
            self.redo.pop(id(r), None)
        if r.prefill_left == 0:
            self._leave_decoders(r)
            self.decoding.remove(r)
            self._due_remove(r)
            self._heap = [e for e in self._heap if e[2] is not r]
            heapify(self._heap)
            if r in self._fresh:
                self._fresh.remove(r)
        else:
            self.prefilling.remove(r)
            self.started_prefilling -= 1
            self.prefill_tokens -= r.prefill_left

    def release(self, finished: Sequence[Request]) -> int:
        """The ``finished`` residents (of the iterations just applied) give back
        their KV; return the sum of their memory areas, now booked in full."""
        kv, b = self.kv, self.block_size
        n, cs, due = self.iterations, self._clock_sum, self.due
        areas = 0
        for r in finished:
            self._settle(r, n, cs)
            rec = r.memory
            areas += rec.area
            if due is not None:
                self._due_remove(r)
            size = r.vp + r.vd  # what it holds at its end, in every admission mode ...
            held = size if kv.max_tokens is None else kv.max_tokens  # ... but a cap
            self.free += held if b == 1 else -(-held // b)
            self.used_tokens -= size
            self.total_tokens -= size
            if rec.preemptions > rec.swaps:
                self.scarred -= 1
        return areas

    # -- one iteration ---------------------------------------------------
    def recompute(self, plan: Plan) -> Tuple[int, List[Tuple[Held, int]]]:
        """Tokens of ``plan`` that re-process positions already processed
        once, and each request's share (to book on its record once the
        iteration has run: one a horizon cuts off processes nothing)."""
        total = 0
        shares: List[Tuple[Held, int]] = []
        if not self.scarred:
            return 0, shares
        for r, tokens in plan.prefill:
            high = r.memory.high
            if high:
                held = kv_tokens(r)
                over = min(held + tokens, high) - held
                if over > 0:
                    shares.append((r.memory, over))
                    total += over
        if self.redo:
            full = len(plan.decode) == len(self.decoding)
            for r in (self.redo.values() if full else plan.decode):
                if r.memory.redo:
                    shares.append((r.memory, 1))
                    total += 1
        return total, shares

    def apply(self, plan: Plan, k: int, start: int, t: int,
              times: Optional[Sequence[int]] = None) -> Tuple[List[Request], List[Request]]:
        """Apply ``k`` identical iterations, keeping the memory records (``k > 1``
        only for runs without recompute, as the scheduler makes them)."""
        n, cs = self.iterations, self._clock_sum
        decode, touched = plan
        partial = len(decode) != len(self.decoding) and decode
        if partial:
            touched = list(touched)
            touched.extend((r, 1) for r in decode)
            if self.due is not None:
                for r in decode:
                    self._due_remove(r)
            for r in decode:  # book their areas so far: they leave the clock's sums
                self._settle(r, n, cs)
        clock = self.clock
        c0 = clock[0]
        prefilled, finished = super().apply(plan, k, start, t, times)
        if prefilled:
            self.started_prefilling -= len(prefilled)  # served, so started
        self.iterations = n = n + k
        cs += k * c0  # the clock during the run: c0, or c0 + 1 .. c0 + k for a full decode batch
        if clock[0] != c0:
            cs += k * (k + 1) // 2
        self._clock_sum = cs
        if touched:
            grown = k * (k + 1) // 2
            for r, tokens in touched:  # KV x since n0, then x + i tokens in iteration i of k
                rec = r.memory
                x = r.vp + r.vd - r.prefill_left - r.end_mark + r.clock[0] - k * tokens
                rec.area += x * (n - rec.n0) + tokens * grown
                rec.n0 = n
                rec.cs0 = cs
        if partial and self.due is not None:
            for r in decode:  # finishers too: :meth:`release` takes them out
                self._due_add(r)
        if self.redo:
            for r in list(self.redo.values()):
                if r.finished is not None or kv_tokens(r) >= r.memory.high:
                    r.memory.redo = False
                    del self.redo[id(r)]
        if self.scarred:  # a re-prefill after a preemption: its first prefill end stays
            for r in prefilled:
                first = r.memory.first_prefill
                if first is not None:
                    r.prefill_done = first
        return prefilled, finished

    def book_areas(self) -> None:
        """Book every resident's memory area up to the last iteration (at the end of a run)."""
        for r in self:
            self._settle(r, self.iterations, self._clock_sum)

    def _settle(self, r: Request, n: int, cs: int) -> None:
        """Book ``r``'s memory area up to iteration ``n`` (clock sum ``cs``)."""
        rec = r.memory
        dn = n - rec.n0
        if dn:
            if r.clock is self.clock:
                rec.area += (r.vp + r.vd - r.end_mark) * dn + cs - rec.cs0
            else:
                rec.area += (r.vp + r.vd - r.prefill_left - r.end_mark) * dn  # clock 0
        rec.n0, rec.cs0 = n, cs
