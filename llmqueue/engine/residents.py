"""The residents of one engine, kept so that an iteration costs O(changes).

Decoders served together never get touched one by one: a shared clock counts
the iterations that served every decoder, each decoder stores the clock value
at which it finishes (``end_mark``), and a heap of those marks yields the
finishers.  Only a partial decode batch, a prefill chunk or a phase change
touches individual residents.

The same holds for what a context-aware latency model reads (docs/model.md §7.2):
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

from llmqueue.common.units import UNLIMITED, to_seconds
from llmqueue.engine.first_token import emit
from llmqueue.engine.tokens import TokenTimes
from llmqueue.models.context import BatchContext
from llmqueue.policies.builtin import BUILTIN, ClassPriority, Policy, WholePrefill
from llmqueue.policies.view import (Plan, Request, SimpleView, _kv_blocks, _kv_tokens,
                                    population)
from llmqueue.policies.wait import Wait

#: The package's own policy classes (exact types: a subclass is a user's).
_OWN = (*BUILTIN.values(), WholePrefill, Wait)


def own_policy(policy: object) -> bool:
    """Whether ``policy`` is one of the package's own (class priority over
    one included): those read only the residents, so the engine hands them
    its own objects; any other policy reads an :class:`EngineView`."""
    if type(policy) is ClassPriority:
        return own_policy(policy.inner)
    return type(policy) in _OWN


class EngineView:
    """The :class:`~llmqueue.policies.view.View` the engine hands a policy
    other than the package's own at a batch choice: read-only.

    It copies nothing until asked (the residents and the waiting line become
    tuples, once, when first read) and reads the engine live: the time, the
    free blocks.  It has no method that changes anything: the residents'
    ``admit``, ``apply``, ``preempt`` and the like are not reachable from it.
    """

    __slots__ = ("_source", "_engine", "_population", "_decoding", "_prefilling", "_waiting")

    def __init__(self, source: Any, engine: Any, whole: Optional[int] = None) -> None:
        self._source, self._engine, self._population = source, engine, whole
        self._decoding: Optional[Tuple[Request, ...]] = None
        self._prefilling: Optional[Tuple[Request, ...]] = None
        self._waiting: Optional[Tuple[Request, ...]] = None

    @property
    def decoding(self) -> Tuple[Request, ...]:
        """Residents whose prefill is done, in admission order."""
        if self._decoding is None:
            self._decoding = tuple(self._source.decoding)
        return self._decoding

    @property
    def prefilling(self) -> Tuple[Request, ...]:
        """Residents with prefill left, in admission order."""
        if self._prefilling is None:
            self._prefilling = tuple(self._source.prefilling)
        return self._prefilling

    @property
    def population(self) -> int:
        """Residents of the whole engine (more than shown, under class priority)."""
        return population(self._source) if self._population is None else self._population

    @property
    def draining(self) -> bool:
        """Whether no resident can join before this batch runs."""
        return bool(self._engine.draining)

    @property
    def now(self) -> float:
        """The current simulated time, in seconds."""
        return to_seconds(self._engine.env.now)

    @property
    def now_ns(self) -> int:
        """The current simulated time, in integer nanoseconds."""
        return int(self._engine.env.now)

    @property
    def waiting(self) -> Tuple[Request, ...]:
        """Requests waiting for a slot, first come first."""
        if self._waiting is None:
            self._waiting = tuple(self._engine.waiting)
        return self._waiting

    @property
    def kv(self) -> Any:
        """The KV cache's settings (a frozen ``KV``), or ``None``."""
        return self._engine.kv

    @property
    def free_blocks(self) -> Optional[int]:
        """KV blocks no resident holds (``None`` without a cache)."""
        return None if self._engine.kv is None else int(self._engine.residents.free)

    @property
    def block_size(self) -> Optional[int]:
        """Tokens per KV block (``None`` without a cache)."""
        kv = self._engine.kv
        return None if kv is None else int(kv.block_size)

    @property
    def free_tokens(self) -> Optional[int]:
        """Tokens of KV the free blocks hold (``None`` without a cache)."""
        kv = self._engine.kv
        return None if kv is None else int(self._engine.residents.free * kv.block_size)

    def kv_tokens(self, r: Request) -> int:
        """Tokens of KV resident ``r`` holds now (0 before its (re)start)."""
        return _kv_tokens(r)

    def kv_blocks(self, r: Request) -> Optional[int]:
        """KV blocks resident ``r`` occupies now (``None`` without a cache)."""
        return _kv_blocks(self._engine.kv, r)

    def part(self, decoding: Sequence[Request], prefilling: Sequence[Request],
             whole: int) -> "EngineView":
        """This view showing only these residents of the ``whole`` (a class's share)."""
        return EngineView(SimpleView(decoding, prefilling), self._engine, whole)

    def __repr__(self) -> str:
        return (f"EngineView(now={self.now:.6f} s, decoding={len(self.decoding)}, "
                f"prefilling={len(self.prefilling)}, waiting={len(self.waiting)}, "
                f"free_blocks={self.free_blocks})")


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

    The package's own policies read this object itself; any other one reads
    it through a read-only :class:`EngineView` (:attr:`shown`).
    """

    shown: Any = None
    """For a policy other than the package's own: the view it reads of what
    the engine would hand it (set on the instance only then, by :meth:`serve`)."""

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

    def serve(self, engine: Any) -> None:
        """Work for ``engine``: its token timing hears of every token, and a
        policy other than the package's own reads an :class:`EngineView`."""
        self.tokens = engine.recorder.tokens
        if not own_policy(engine.policy):
            self.shown = lambda view: EngineView(view, engine)

    def chooser(self, policy: Any) -> Callable[[Any, int], Plan]:
        """What a batch choice calls: ``policy``'s plan, of :attr:`shown`."""
        plan = policy.plan if isinstance(policy, Policy) else policy  # one call, not two
        shown = self.shown
        return plan if shown is None else lambda view, budget: plan(shown(view), budget)

    def serves_all(self, plan: Plan, view: Any) -> bool:
        """Whether ``plan`` serves every decoder as the policy read them from
        ``view``: this very list, or its tuple in a read-only view of all of us."""
        decode = plan.decode
        return decode is self.decoding or (type(view) is EngineView and view._source is self
                                           and decode is view._decoding)

    @property
    def demand(self) -> int:
        """Tokens a work-conserving batch would serve without a budget (docs/model.md §3)."""
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
        """What ``plan`` holds in KV caches before it runs (docs/model.md §7.2): O(1) for
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
