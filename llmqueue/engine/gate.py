"""The KV gate (SPEC 7.3): which items of a policy's proposal run under memory,
and whom memory preempts.

A policy proposes as in section 3, with no token budget; the gate charges
``bmax`` only for the items it accepts:

* **pass 1**, the items of started residents (those holding KV), in proposal
  order.  An item needs the blocks it adds (:meth:`KV.need`).  While fewer
  blocks are free, the started resident with the latest (re)start that the
  pass has not yet allocated is preempted (its blocks come free); if that
  victim is the item's own resident, the item is dropped and pass 1 ends;
* **pass 2**, new starts, in proposal order, only when pass 1 preempted
  nobody: each starts if ``free - need >= reserve`` (the watermark); the
  first that does not stops all further new starts (head of line).

The budget: an item bigger than what is left of ``bmax`` is cut to it when
prompts may be chunked; a whole prompt that does not fit is skipped in pass 1
and stops pass 2.  "Proposal order" reads a plan as its decodes, then its
prefill chunks (the other way round for a prefill-first policy, ``orca``).

:func:`gate` is a pure function of the proposal, the residents' states and
the free blocks: it changes nothing and returns what to do (:class:`Gated`).
The engine preempts the victims, starts the new starts and allocates.
"""

from __future__ import annotations

from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from llmqueue.engine.kv import KV, is_started
from llmqueue.policies.view import Plan, Request

#: The started residents, oldest (re)start first, or a function giving them.
StartedOrder = Union[Sequence[Request], Callable[[], Sequence[Request]]]


class KVOverflow(RuntimeError):
    """Memory ran out with ``preemption="none"``."""


class Gated(NamedTuple):
    """What the gate decided for one proposal."""

    plan: Plan
    """The accepted items, in proposal order (chunks possibly cut to the budget)."""
    victims: List[Request]
    """Residents to preempt, in the order they were chosen (latest start first)."""
    starts: List[Request]
    """Residents that start (take KV for the first time), in proposal order."""
    blocks: int
    """Blocks the accepted items add."""
    free: int
    """Blocks free after the victims' release and this allocation."""


def gate(proposal: Plan, kv: KV, free: int, budget: int, started: StartedOrder, *,
         chunked: bool = True, prefill_first: bool = False,
         decode_need: Optional[int] = None) -> Gated:
    """Pass ``proposal`` through the KV gate.

    ``free`` blocks are free, ``budget`` is ``bmax``; ``started`` lists the
    started residents, oldest (re)start first (victims come from its end).
    ``decode_need``, when given, promises that every decode item is a started
    resident and that together they need that many blocks (the engine knows
    it without walking them); it only makes the gate faster.
    """
    decode, prefill = proposal.decode, proposal.prefill
    left = budget
    blocks = 0
    victims: List[Request] = []
    accepted: Dict[int, int] = {}
    first: List[Tuple[Request, int]] = [(r, n) for r, n in prefill if is_started(r)]
    fast = False
    if decode_need is not None:
        tokens = len(decode) + sum(n for _, n in first)
        need = decode_need + sum(kv.need(r, n, False, True) for r, n in first)
        if tokens <= left and need <= free:
            fast = True
            free -= need
            blocks += need
            left -= tokens
            for r, n in first:
                accepted[id(r)] = n
    if not fast:
        left, free, blocks = _pass_one(decode, first, kv, free, left, blocks, started, chunked,
                                       prefill_first, victims, accepted)
    starts: List[Request] = []
    if not victims:
        fresh = () if decode_need is not None else decode
        left, free, blocks = _pass_two(fresh, prefill, kv, free, left, blocks, chunked,
                                       prefill_first, starts, accepted)
    if fast:  # every decode item is started and was accepted
        out_decode: Sequence[Request] = decode
    else:
        out_decode = [r for r in decode if id(r) in accepted]
    out_prefill = [(r, accepted[id(r)]) for r, _ in prefill if id(r) in accepted]
    return Gated(Plan(out_decode, out_prefill), victims, starts, blocks, free)


def _items(decode: Sequence[Request], prefill: Sequence[Tuple[Request, int]],
           prefill_first: bool) -> List[Tuple[Request, int, bool]]:
    dec = [(r, 1, True) for r in decode]
    pre = [(r, n, False) for r, n in prefill]
    return pre + dec if prefill_first else dec + pre


def _pass_one(decode: Sequence[Request], first: List[Tuple[Request, int]], kv: KV, free: int,
              left: int, blocks: int, started: StartedOrder, chunked: bool,
              prefill_first: bool, victims: List[Request], accepted: Dict[int, int]
              ) -> Tuple[int, int, int]:
    """Pass 1 item by item, preempting as needed; returns ``(left, free, blocks)``."""
    items = _items([r for r in decode if is_started(r)], first, prefill_first)
    gone: set = set()
    order: Optional[Sequence[Request]] = None
    tail = -1
    for r, n, is_decode in items:
        if id(r) in gone:
            continue
        if left <= 0:
            break
        if n > left:
            if not chunked:
                continue  # a whole prompt is never cut
            n = left
        need = kv.need(r, n, is_decode, True)
        ended = False
        while free < need:
            if kv.preemption == "none":
                raise KVOverflow(f"KV cache full: request {r.rid} needs {need} more blocks and "
                                 f"{free} of {kv.blocks} are free, with preemption='none' "
                                 "(allowed only where memory cannot overflow: admission="
                                 "'peak'); use preemption='recompute'")
            if order is None:
                order = started() if callable(started) else started
                tail = len(order) - 1
            while tail >= 0 and (id(order[tail]) in accepted or id(order[tail]) in gone):
                tail -= 1
            if tail < 0:
                raise ValueError(f"request {r.rid} holds KV but is not among the started "
                                 "residents the gate was given")
            victim = order[tail]
            tail -= 1
            victims.append(victim)
            gone.add(id(victim))
            free += kv.held_blocks(victim)
            if victim is r:
                ended = True
                break
        if ended:
            break
        free -= need
        blocks += need
        left -= n
        accepted[id(r)] = n
    return left, free, blocks


def _pass_two(decode: Sequence[Request], prefill: Sequence[Tuple[Request, int]], kv: KV,
              free: int, left: int, blocks: int, chunked: bool, prefill_first: bool,
              starts: List[Request], accepted: Dict[int, int]) -> Tuple[int, int, int]:
    """Pass 2: new starts until the first that does not fit; returns ``(left, free, blocks)``."""
    fresh_decode = [r for r in decode if not is_started(r)]
    fresh_prefill = [(r, n) for r, n in prefill if not is_started(r)]
    if not fresh_decode and not fresh_prefill:
        return left, free, blocks
    reserve = kv.reserve
    for r, n, is_decode in _items(fresh_decode, fresh_prefill, prefill_first):
        if left <= 0:
            break
        if n > left:
            if is_decode or not chunked:
                break  # a whole prompt that does not fit blocks the line
            n = left
        need = kv.need(r, n, is_decode, False)
        if free - need < reserve:
            break
        free -= need
        blocks += need
        left -= n
        accepted[id(r)] = n
        starts.append(r)
    return left, free, blocks
