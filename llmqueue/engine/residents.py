"""The residents of one engine, kept so that an iteration costs O(changes).

Decoders served together never get touched one by one: a shared clock counts
the iterations that served every decoder, each decoder stores the clock value
at which it finishes (``end_mark``), and a heap of those marks yields the
finishers.  Only a partial decode batch, a prefill chunk or a phase change
touches individual residents.

The same holds for what a context-aware latency model reads (SPEC 8.2):
``decode_sum`` is the sum over the decoders of ``vp + vd - end_mark``, so the
tokens all decoders hold before an iteration are ``decode_sum + n * clock``
(:meth:`Residents.context`), and the token timing of
:mod:`llmqueue.engine.tokens` is told of each change.
"""

from __future__ import annotations

import bisect
import itertools
from heapq import heapify, heappop, heappush
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple

from llmqueue.common.units import UNLIMITED
from llmqueue.engine.first_token import emit
from llmqueue.engine.tokens import TokenTimes
from llmqueue.models.context import BatchContext
from llmqueue.policies.view import Plan, Request


def _seq(r: Request) -> int:
    return r.seq


def _unfinished(r: Request) -> bool:
    return r.finished is None


def _prefilling(r: Request) -> bool:
    return r.prefill_left > 0


def _without(items: List[Request], gone: Sequence[Request],
             kept: Callable[[Request], bool]) -> List[Request]:
    """``items`` (in admission order ``seq``) without ``gone``, the members
    for which ``kept`` is false: a few of many found by binary search and
    deleted in place (O(log n) and a move each, where a rebuild is O(n): an
    overloaded vLLM holds thousands of residents and serves a few), else the
    kept ones in a new list (also if ``items`` is not in order)."""
    if 8 * len(gone) <= len(items):
        for r in gone:
            i = bisect.bisect_left(items, r.seq, key=_seq)
            if i == len(items) or items[i] is not r:
                break
            del items[i]
        else:
            return items
    return list(filter(kept, items))


class Residents:
    """Residents in admission order, split into ``decoding`` and ``prefilling``.

    This object is the :class:`~llmqueue.policies.view.View` a policy reads.
    """

    first_tokens: Any = None
    """With ``first_token="prefill"``: the recorder counting the first tokens
    emitted with prefills (:mod:`~llmqueue.engine.first_token`; set on the
    instance only then, so the residents' attributes stay under 30)."""

    def __init__(self) -> None:
        self.decoding: List[Request] = []
        self.prefilling: List[Request] = []
        self.prefill_tokens = 0
        self.clock = [0]
        self._heap: List[Tuple[int, int, Request]] = []
        self._fresh: List[Request] = []
        self._incoming: List[Request] = []
        self._next_seq = 0
        self.decode_sum = 0
        """Sum over the decoders of ``vp + vd - end_mark`` (their cached tokens
        are this plus the clock each)."""
        self.tokens: Optional[TokenTimes] = None
        """Token timing told of every token (the engine sets it)."""

    def __len__(self) -> int:
        return len(self.decoding) + len(self.prefilling) + len(self._incoming)

    def __iter__(self) -> Iterator[Request]:
        """Every resident, admitted or still joining."""
        return itertools.chain(self.decoding, self.prefilling, self._incoming)

    @property
    def demand(self) -> int:
        """Tokens a work-conserving batch would serve without a budget (SPEC 3)."""
        return self.prefill_tokens + len(self.decoding)

    def admit(self, r: Request, now: int) -> None:
        """Give ``r`` a slot at time ``now``; it joins the view at the next
        :meth:`settle`, so a batch already running never sees it."""
        r.seq = self._next_seq
        self._next_seq += 1
        r.admitted = now
        if r.prefill_left == 0:
            r.prefill_done = now
        self._incoming.append(r)

    def settle(self) -> None:
        """Let the residents admitted since the last batch began join the view."""
        if not self._incoming:
            return
        for r in self._incoming:
            if r.prefill_left > 0:
                self.prefilling.append(r)
                self.prefill_tokens += r.prefill_left
            else:
                self._start_decoding(r)
        self._incoming = []

    def _start_decoding(self, r: Request) -> None:
        self._join_decoders(r)
        self._fresh.append(r)

    def _join_decoders(self, r: Request) -> None:
        """Put ``r`` among the decoders, on the shared clock, in admission order."""
        # only decoders follow the shared clock: until now decode_left read the
        # decode tokens left (vd, or fewer after a preemption under memory)
        left = r.end_mark - r.clock[0]
        r.clock = self.clock
        r.end_mark = self.clock[0] + left
        decoding = self.decoding
        if not decoding or decoding[-1].seq < r.seq:
            decoding.append(r)
        else:
            bisect.insort(decoding, r, key=_seq)
        heappush(self._heap, (r.end_mark, r.seq, r))
        self.decode_sum += r.vp + r.vd - r.end_mark
        if self.tokens is not None:
            self.tokens.join(r)

    def _leave_decoders(self, r: Request) -> None:
        """``r`` is about to leave the decoders without finishing (a preemption
        under memory; the caller takes it out of :attr:`decoding`)."""
        self.decode_sum -= r.vp + r.vd - r.end_mark
        if self.tokens is not None:
            self.tokens.leave(r)

    def context(self, plan: Plan) -> BatchContext:
        """What ``plan`` holds in KV caches before it runs (SPEC 8.2): O(1) for
        the decoders when all of them are served, else O(batch)."""
        decode = plan.decode
        if len(decode) == len(self.decoding):
            decode_ctx = self.decode_sum + len(decode) * self.clock[0]
        else:
            decode_ctx = 0
            for r in decode:
                decode_ctx += r.vp + r.vd - r.end_mark + r.clock[0]
        cached = sq = cross = 0
        for r, n in plan.prefill:  # off the clock: decode left is end_mark
            s = r.vp + r.vd - r.end_mark - r.prefill_left
            cached += s
            sq += n * n
            cross += n * s
        return BatchContext(decode_ctx, len(plan.prefill), cached, sq, cross,
                            len(self.decoding) - len(decode))

    def _next_finish(self) -> int:
        """Smallest valid end mark, dropping stale heap entries on the way."""
        heap = self._heap
        while heap:
            mark, _, r = heap[0]
            if r.end_mark == mark and r.finished is None:
                return mark
            heappop(heap)
        return UNLIMITED

    def repeats(self, plan: Plan) -> int:
        """How many times in a row ``plan`` can run with no resident changing
        phase before its last run (for a stationary policy)."""
        k = UNLIMITED
        if plan.decode:
            if len(plan.decode) == len(self.decoding):
                k = self._next_finish() - self.clock[0]
            else:
                k = min(r.end_mark for r in plan.decode) - self.clock[0]
        for r, tokens in plan.prefill:
            k = min(k, r.prefill_left // tokens)
        return k

    def apply(self, plan: Plan, k: int, start: int, t: int,
              times: Optional[Sequence[int]] = None) -> Tuple[List[Request], List[Request]]:
        """Apply ``k`` back-to-back iterations of ``plan``, each ``t`` long (or,
        with ``times``, ``times[j]`` long: ``t`` is ``times[0]``), from ``start``.
        Return the residents whose prefill completed and those that finished,
        with their times stamped."""
        end = start + (k * t if times is None else sum(times))
        finished: List[Request] = []
        decode = plan.decode
        tokens = self.tokens
        if decode:
            first_end = start + t
            full = len(decode) == len(self.decoding)
            if full:
                self.clock[0] += k
                for r in self._fresh:
                    if r.first_token is None:  # served ones stay until the list is rebuilt
                        r.first_token = first_end
                        if tokens is not None:
                            tokens.schedule(r, start)
                self._fresh = []
            else:
                for r in decode:
                    r.end_mark -= k
                    heappush(self._heap, (r.end_mark, r.seq, r))
                    if r.first_token is None:
                        r.first_token = first_end
                        if tokens is not None:
                            tokens.schedule(r, start)
                self.decode_sum += k * len(decode)
                # the served leave _fresh lazily: rebuilding it every iteration would
                # cost O(decoders) when a few of many are served (vLLM overloaded)
                if len(self._fresh) > 2 * len(self.decoding) + 64:
                    self._fresh = [r for r in self._fresh if r.first_token is None]
            if tokens is not None:
                tokens.decode(decode, self.decoding, k, first_end, end, t, times)
            heap, clock = self._heap, self.clock[0]
            while heap and heap[0][0] <= clock:
                mark, _, r = heappop(heap)
                if r.end_mark == mark and r.finished is None:
                    r.finished = end
                    finished.append(r)
                    self.decode_sum -= r.vp + r.vd - mark
            if finished:  # a full batch's plan may hold this very list: a copy (a memcpy)
                self.decoding = _without(self.decoding[:] if full else self.decoding,
                                         finished, _unfinished)
            if len(heap) > 2 * len(self.decoding) + 64:
                self._heap = [e for e in heap if e[2].end_mark == e[0] and e[2].finished is None]
                heapify(self._heap)
        prefilled: List[Request] = []
        for r, chunk in plan.prefill:
            served = chunk * k
            r.prefill_left -= served
            self.prefill_tokens -= served
            if r.prefill_left == 0:
                r.prefill_done = end
                prefilled.append(r)
        if prefilled:
            self.prefilling = _without(self.prefilling, prefilled, _prefilling)
            if self.first_tokens is None:
                for r in prefilled:
                    self._start_decoding(r)
            else:  # their first tokens come with the prefill (first_token="prefill")
                emit(self, prefilled, finished, end)
        return prefilled, finished
