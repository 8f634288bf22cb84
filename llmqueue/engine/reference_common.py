"""What the reference steppers (:mod:`~llmqueue.engine.reference`,
:mod:`~llmqueue.engine.reference_kv` with a KV cache, and
:mod:`~llmqueue.engine.reference_prefix` with a prefix cache on top) share:
their settings, the line of requests still to arrive, and the points where
the KV stepper consults a prefix cache (:class:`NoCache`)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Deque, Iterable, Iterator, NamedTuple, Optional, Sequence, Tuple

from llmqueue.common.units import UNLIMITED, to_ticks
from llmqueue.engine.results import Batch
from llmqueue.models.context import BatchContext
from llmqueue.models.latency import LatencyModel, Staircase
from llmqueue.policies.builtin import Policy
from llmqueue.policies.view import Plan, Request


@dataclass
class Memory:
    """One request's memory state and record in the reference (``Request.memory``)."""

    key: Tuple[int, ...] = (2, 0)
    """Its order key (docs/model.md §6.2); ``key[0] == 0`` while it is started."""
    preemptions: int = 0
    """Times it was preempted."""
    recomputed: int = 0
    """Tokens it processed at positions it had processed before."""
    high: int = 0
    """The most KV tokens it held before a preemption."""
    area: int = 0
    """Σ over iterations of its KV after allocation."""
    ignored: bool = False
    """Rejected on arrival: it can never fit (docs/model.md §6.1)."""
    swaps: int = 0
    """Of its preemptions, those that moved its KV to the swap pool."""


def kv_of(r: Request) -> int:
    """Tokens ``r`` processed in its current incarnation (its KV, docs/model.md §6.1)."""
    return r.vp + r.vd - r.prefill_left - r.decode_left


class Settings(NamedTuple):
    """One reference run's engine, in the stepper's terms."""

    latency: LatencyModel
    policy: Policy
    budget: int
    slots: float
    until: Optional[int]
    """The horizon in ticks (``None``: run until every request finished)."""


def settings(policy: Policy, bmax: Optional[int], kmax: Optional[int],
             latency: Optional[LatencyModel], horizon: Optional[float]) -> Settings:
    """The run's settings (unlimited budget or slots where ``None``)."""
    latency = latency or Staircase()
    return Settings(latency, policy.for_engine(latency, kmax),
                    bmax if bmax is not None else UNLIMITED,
                    kmax if kmax is not None else float("inf"),
                    to_ticks(horizon) if horizon is not None else None)


def incoming(arrivals: Iterable[Sequence], until: Optional[int],
             first_token: str = "decode") -> Deque[Request]:
    """Every request that arrives before ``until``, numbered from 0, times in
    ticks; with ``first_token="prefill"`` a request with a prompt decodes one
    token fewer, its first coming with its prefill (:func:`serve`)."""
    line: Deque[Request] = deque()
    early = first_token == "prefill"
    for rid, a in enumerate(arrivals):
        at = to_ticks(a[0])
        if until is not None and at >= until:
            break
        r = Request(rid, a[1], a[2] - (early and a[1] > 0), a[3] if len(a) > 3 else None)
        r.early = early and a[1] > 0
        r.arrival = at
        line.append(r)
    return line


def arriving(line: Deque[Request], limit: int, inclusive: bool) -> Iterator[Request]:
    """Take from ``line`` the requests that arrive before ``limit`` (or at it)."""
    while line and (line[0].arrival < limit or (inclusive and line[0].arrival == limit)):
        yield line.popleft()


def price(latency: LatencyModel, plan: Plan, context: Callable[[Plan], BatchContext]
          ) -> Tuple[int, int, int, int]:
    """``(decode, prefill, requests, ticks)`` of one iteration of ``plan``; a
    context-aware model is given ``context(plan)`` (docs/model.md §7.2)."""
    decode = len(plan.decode)
    prefill = sum(n for _, n in plan.prefill)
    requests = decode + len(plan.prefill)
    if getattr(latency, "needs_context", False):
        seconds = latency.batch_time(decode, prefill, requests,  # type: ignore[call-arg]
                                     context=context(plan))
    else:
        seconds = latency.batch_time(decode, prefill, requests)
    return decode, prefill, requests, to_ticks(seconds)


def logged(now: int, t: int, plan: Plan, prefill: int) -> Batch:
    """The batch log's row for an iteration of ``plan`` from ``now``, ``t`` long."""
    return Batch(now, t, prefill, len(plan.decode), len(plan.decode) + len(plan.prefill),
                 tuple(r.rid for r in plan.decode), tuple((r.rid, n) for r, n in plan.prefill))


def serve(plan: Plan, end: int) -> None:
    """Apply one iteration of ``plan`` ending at ``end``: a decode token each,
    the prefill chunks; stamp first tokens, finishes and prefill ends (a
    recomputed prefill keeps its first incarnation's end).  A request whose
    first token comes with its prefill (``early``) gets it when its prefill
    completes, and finishes then if it has no decode token to process."""
    for r in plan.decode:
        r.decode_left -= 1
        if r.first_token is None:
            r.first_token = end
        if r.decode_left == 0:
            r.finished = end
    for r, n in plan.prefill:
        r.prefill_left -= n
        if r.prefill_left == 0:
            if r.prefill_done is None:
                r.prefill_done = end
            if r.early:
                if r.first_token is None:
                    r.first_token = end
                if r.decode_left == 0:
                    r.finished = end


#: ``arrive_until(limit, inclusive)``: a stepper's intake of the requests due by ``limit``.
Intake = Callable[[int, bool], None]


class NoCache:
    """The prefix-cache hooks of the KV reference stepper, doing nothing: docs/model.md §6
    alone.  :class:`~llmqueue.engine.reference_prefix.PrefixCache` fills them
    in with docs/model.md §8.2 (times in ticks, blocks in KV blocks)."""

    def begin(self, line: Deque[Request]) -> None:
        """Take note of the requests due (``line``, numbered by position)."""

    def arrive(self, r: Request) -> None:
        """``r`` arrives (before its admission or rejection)."""

    def more(self) -> bool:
        """Whether requests the line does not list yet may still arrive."""
        return False

    def peek(self, unstarted: Sequence[Request]) -> None:
        """Before a proposal: show each unstarted resident's prompt less its hit."""

    def shared(self, holders: Sequence[Request]) -> int:
        """Blocks that ``holders`` count more than once (their common entries):
        the blocks in use are the sum of theirs less this."""
        return 0

    def start(self, r: Request, now: int) -> None:
        """The gate started ``r`` at ``now``."""

    def settle(self, free: int, now: int) -> None:
        """A batch was chosen at ``now``, leaving ``free`` blocks (empty or evictable)."""

    def serve(self, plan: Plan, end: int) -> None:
        """Apply one iteration of ``plan`` ending at ``end``."""
        serve(plan, end)

    def release(self, r: Request, now: int) -> None:
        """``r`` was preempted at ``now`` (its new prompt in ``prefill_left``)."""

    def finish(self, r: Request, end: int) -> None:
        """``r`` finished at ``end`` (its progress applied)."""


def next_choice(now: int, residents: Sequence[Request], line: Deque[Request],
                arrive_until: Intake) -> Optional[int]:
    """When the next batch is chosen: ``now`` if anyone is resident once the
    arrivals at ``now`` are in, else at the next arrival; ``None`` when no
    request is left to serve."""
    while True:
        arrive_until(now, True)
        if residents:
            return now
        if not line:
            return None
        now = line[0].arrival


def iteration_end(now: int, t: int, until: Optional[int], arrive_until: Intake
                  ) -> Optional[int]:
    """The end of an iteration of ``t`` ticks from ``now`` after taking in the
    arrivals before it; ``None`` when the horizon ``until`` cuts it (the
    arrivals before the horizon come in all the same)."""
    end = now + t
    if until is not None and end >= until:
        arrive_until(until, False)
        return None
    arrive_until(end, False)
    return end
