"""The residents of one engine, kept so that an iteration costs O(changes).

Decoders served together never get touched one by one: a shared clock counts
the iterations that served every decoder, each decoder stores the clock value
at which it finishes (``end_mark``), and a heap of those marks yields the
finishers.  Only a partial decode batch, a prefill chunk or a phase change
touches individual residents.
"""

from __future__ import annotations

import bisect
import itertools
import sys
from heapq import heapify, heappop, heappush
from typing import Iterator, List, Sequence, Tuple

from llmqueue.policies.view import Plan, Resident

NEVER = sys.maxsize


def _seq(r: Resident) -> int:
    return r.seq


class Residents:
    """Residents in admission order, split into ``decoding`` and ``prefilling``.

    This object is the :class:`~llmqueue.policies.view.View` a policy reads.
    """

    def __init__(self) -> None:
        self.decoding: List[Resident] = []
        self.prefilling: List[Resident] = []
        self.prefill_tokens = 0
        self.clock = [0]
        self._heap: List[Tuple[int, int, Resident]] = []
        self._fresh: List[Resident] = []
        self._incoming: List[Resident] = []
        self._next_seq = 0

    def __len__(self) -> int:
        return len(self.decoding) + len(self.prefilling) + len(self._incoming)

    def __iter__(self) -> Iterator[Resident]:
        """Every resident, admitted or still joining."""
        return itertools.chain(self.decoding, self.prefilling, self._incoming)

    @property
    def demand(self) -> int:
        """Tokens a work-conserving batch would serve without a budget (SPEC 3)."""
        return self.prefill_tokens + len(self.decoding)

    @property
    def tokens_left(self) -> int:
        """Unprocessed tokens of all residents."""
        clock = self.clock[0]
        return (self.prefill_tokens + sum(r.end_mark - clock for r in self.decoding)
                + sum(r.vd for r in self.prefilling))

    def admit(self, r: Resident, now: int) -> None:
        """Give ``r`` a slot at time ``now``; it joins the view at the next
        :meth:`settle`, so a batch already running never sees it."""
        r.seq = self._next_seq
        self._next_seq += 1
        r.clock = self.clock
        r.admitted = now
        if r.prefill_left == 0:
            r.prefill_done = now
        self._incoming.append(r)

    def settle(self) -> None:
        """Let the residents admitted since the last batch began join the view."""
        for r in self._incoming:
            if r.prefill_left > 0:
                self.prefilling.append(r)
                self.prefill_tokens += r.prefill_left
            else:
                self._start_decoding(r)
        self._incoming = []

    def _start_decoding(self, r: Resident) -> None:
        r.end_mark = self.clock[0] + r.vd
        decoding = self.decoding
        if not decoding or decoding[-1].seq < r.seq:
            decoding.append(r)
        else:
            bisect.insort(decoding, r, key=_seq)
        heappush(self._heap, (r.end_mark, r.seq, r))
        self._fresh.append(r)

    def _next_finish(self) -> int:
        """Smallest valid end mark, dropping stale heap entries on the way."""
        heap = self._heap
        while heap:
            mark, _, r = heap[0]
            if r.end_mark == mark and r.finished is None:
                return mark
            heappop(heap)
        return NEVER

    def repeats(self, plan: Plan) -> int:
        """How many times in a row ``plan`` can run with no resident changing
        phase before its last run (for a stationary policy)."""
        k = NEVER
        if plan.decode:
            if len(plan.decode) == len(self.decoding):
                k = self._next_finish() - self.clock[0]
            else:
                k = min(r.end_mark for r in plan.decode) - self.clock[0]
        for r, tokens in plan.prefill:
            k = min(k, r.prefill_left // tokens)
        return k

    def apply(self, plan: Plan, k: int, start: int, t: int
              ) -> Tuple[List[Resident], List[Resident]]:
        """Apply ``k`` back-to-back iterations of ``plan``, each ``t`` long, from
        ``start``.  Return the residents whose prefill completed and those that
        finished, with their times stamped."""
        end = start + k * t
        finished: List[Resident] = []
        decode = plan.decode
        if decode:
            first_end = start + t
            if len(decode) == len(self.decoding):
                self.clock[0] += k
                for r in self._fresh:
                    r.first_token = first_end
                self._fresh = []
            else:
                for r in decode:
                    r.end_mark -= k
                    heappush(self._heap, (r.end_mark, r.seq, r))
                    if r.first_token is None:
                        r.first_token = first_end
                self._fresh = [r for r in self._fresh if r.first_token is None]
            heap, clock = self._heap, self.clock[0]
            while heap and heap[0][0] <= clock:
                mark, _, r = heappop(heap)
                if r.end_mark == mark and r.finished is None:
                    r.finished = end
                    finished.append(r)
            if finished:
                self.decoding = [r for r in self.decoding if r.finished is None]
            if len(heap) > 2 * len(self.decoding) + 64:
                self._heap = [e for e in heap if e[2].end_mark == e[0] and e[2].finished is None]
                heapify(self._heap)
        prefilled: List[Resident] = []
        for r, tokens in plan.prefill:
            served = tokens * k
            r.prefill_left -= served
            self.prefill_tokens -= served
            if r.prefill_left == 0:
                r.prefill_done = end
                prefilled.append(r)
        if prefilled:
            self.prefilling = [r for r in self.prefilling if r.prefill_left > 0]
            for r in prefilled:
                self._start_decoding(r)
        return prefilled, finished


def check_plan(plan: Plan, view: "Residents", budget: int, name: str) -> None:
    """Raise ``ValueError`` unless ``plan`` obeys rules 6a-6d for ``view``."""
    decoding = {id(r) for r in view.decoding}
    prefilling = {id(r): r.prefill_left for r in view.prefilling}
    seen = set()
    for r in plan.decode:
        if id(r) not in decoding or id(r) in seen:
            raise ValueError(f"policy {name!r} gave a decode token to request {r.rid}, "
                             "which is not a decoding resident or appears twice")
        seen.add(id(r))
    for r, tokens in plan.prefill:
        left = prefilling.get(id(r))
        if left is None or id(r) in seen or not 1 <= tokens <= left:
            raise ValueError(f"policy {name!r} gave {tokens} prefill tokens to request "
                             f"{r.rid}; allowed: 1..its remaining prefill, once per batch")
        seen.add(id(r))
    if plan.tokens > budget:
        raise ValueError(f"policy {name!r} formed a batch of {plan.tokens} tokens; "
                         f"bmax is {budget}")


def members(plan: Plan) -> Tuple[Tuple[int, ...], Tuple[Tuple[int, int], ...]]:
    """The batch's members as request ids: decoders and (id, prefill tokens)."""
    return tuple(r.rid for r in plan.decode), tuple((r.rid, n) for r, n in plan.prefill)


def decode_left_of(residents: Sequence[Resident]) -> List[int]:
    """Remaining decode tokens of each resident (for reports and tests)."""
    return [r.decode_left for r in residents]
