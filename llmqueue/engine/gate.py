"""The KV gate (docs/model.md §6.3): which items of a policy's proposal run under memory,
and whom memory preempts.

A policy proposes as in docs/model.md §3, with no token budget; the gate charges
``bmax`` only for the items it accepts:

* **pass 1**, the items of started residents (those holding KV), in proposal
  order.  An item needs the blocks it adds (:meth:`KV.need`).  While fewer
  blocks are free, the started resident with the latest (re)start that the
  pass has not yet allocated is preempted (its blocks come free); if that
  victim is the item's own resident, the item is dropped and pass 1 ends;
* **pass 2**, new starts, only when pass 1 preempted nobody: the preempted
  residents' items first, by their order keys (docs/model.md §6.3 step 4: a victim
  stands at the head of the unstarted residents, never behind requests
  admitted after it started; a plan lists its decodes apart from its chunks,
  so its order alone would put every unstarted decoder, a request with no
  prompt to prefill (``vp = 0``) or one that arrived prefilled, ahead of a
  victim waiting to recompute its prompt), then the others in proposal order
  (step 3); each starts if ``free - need >= reserve`` (the watermark); the
  first that does not stops all further new starts (head of line).  A policy
  that starts groups first come, first served (``fcfs``: WAIT, docs/model.md §6.5)
  has its whole line walked by order key, so a request with no prompt never
  starts ahead of an earlier prompt that failed its check.

The budget: an item bigger than what is left of ``bmax`` is cut to it when
prompts may be chunked; a whole prompt that does not fit is skipped in pass 1,
and in pass 2 it stops the later prompts but not the decodes, as a policy's
own walk of whole prompts does (:func:`~llmqueue.policies.builtin.take_prefill`:
``orca`` with whole prompts still starts a request with no prompt behind a
prompt the budget cannot take).  Both passes read "proposal order" as a
plan's decodes, then its prefill chunks (the other way round for a
prefill-first policy, ``orca``).

:func:`gate` is a pure function of the proposal, the residents' states and
the free blocks: it changes nothing and returns what to do (:class:`Gated`).
The engine preempts the victims, starts the new starts and allocates.
"""

from __future__ import annotations

from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from llmqueue.engine.kv import KV, is_started
from llmqueue.policies.view import FRESH, UNSTARTED, Plan, Request

#: The started residents, oldest (re)start first, or a function giving them.
StartedOrder = Union[Sequence[Request], Callable[[], Sequence[Request]]]


def _seq_of_item(item: Tuple[Request, int, bool]) -> int:
    return item[0].seq


class KVOverflow(ValueError):
    """Memory ran out with ``preemption="none"`` (a setting that cannot hold
    this workload, hence a ``ValueError`` as the CLI reports them)."""


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


def gate(proposal: Plan, kv: KV, free: int, budget: int, started: StartedOrder,
         chunked: bool = True, prefill_first: bool = False,
         decode_need: Optional[int] = None, fcfs: bool = False) -> Gated:
    """Pass ``proposal`` through the KV gate.

    ``free`` blocks are free, ``budget`` is ``bmax``; ``started`` lists the
    started residents, oldest (re)start first (victims come from its end).
    ``decode_need``, when given, promises that every decode item is a started
    resident and that together they need that many blocks (the engine knows
    it without walking them); the gate then takes them all at once when they
    fit, so a choice costs O(prefill items), not O(decoders).  ``fcfs``:
    pass 2 walks the new starts by order key alone (WAIT's groups).
    """
    if decode_need is not None and not prefill_first:
        quick = quick_gate(proposal, kv, free, budget, chunked, decode_need)
        if quick is not None:
            return quick
    decode, prefill = proposal.decode, proposal.prefill
    walk = _PassOne(kv, free, budget, started, chunked)
    first = [(r, n, False) for r, n in prefill if is_started(r)]
    for segment in ((first, "decode") if prefill_first else ("decode", first)):
        if walk.ended:
            break
        if segment != "decode":
            walk.items(segment)  # type: ignore[arg-type]
        elif decode_need is None or not walk.block(len(decode), decode_need):
            walk.items([(r, 1, True) for r in decode if is_started(r)])
    left, free, blocks, accepted = walk.left, walk.free, walk.blocks, walk.accepted
    starts: List[Request] = []
    if not walk.victims:
        fresh = () if decode_need is not None else decode
        left, free, blocks = _pass_two(fresh, prefill, kv, free, left, blocks, chunked,
                                       prefill_first, starts, accepted, fcfs)
    if walk.all_decoders:  # every decode item is started and was accepted
        out_decode: Sequence[Request] = decode
    else:
        out_decode = [r for r in decode if id(r) in accepted]
    out_prefill = [(r, accepted[id(r)]) for r, _ in prefill if id(r) in accepted]
    return Gated(Plan(out_decode, out_prefill), walk.victims, starts, blocks, free)


def quick_gate(proposal: Plan, kv: KV, free: int, budget: int, chunked: bool,
               decode_need: int) -> Optional[Gated]:
    """:func:`gate` for a decodes-first proposal whose decoders are all started
    and need ``decode_need`` blocks, when nobody needs preempting (the common
    case): the same decisions, or ``None`` when pass 1 would preempt."""
    decode, prefill = proposal.decode, proposal.prefill
    left = budget - len(decode)
    if left < 0 or decode_need > free:
        return None
    free -= decode_need
    blocks = decode_need
    lazy_one = (kv.block_size == 1 and kv.admission == "lazy"  # a block per token
                and not kv.prefix)  # (a prefix cache's starts may revive entries)
    ours: List[Tuple[Request, int]] = []
    fresh: List[Tuple[Request, int]] = []
    for item in prefill:
        r, n = item
        if r.seq >= UNSTARTED:
            fresh.append(item)
            continue
        if left <= 0:
            break
        if n > left:
            if not chunked:
                continue
            n = left
            item = (r, n)
        need = n if lazy_one else kv.need(r, n, False, True)
        if need > free:
            return None
        free -= need
        blocks += need
        left -= n
        ours.append(item)
    starts: List[Request] = []
    if fresh:
        reserve = kv.reserve
        for r, n, _ in wait_line((), fresh):  # the preempted first, as pass 2 walks them
            item = (r, n)
            if left <= 0:
                break
            if n > left:
                if not chunked:
                    break
                n = left
                item = (r, n)
            need = n if lazy_one else kv.need(r, n, False, False)
            if free - need < reserve:
                break
            free -= need
            blocks += need
            left -= n
            ours.append(item)
            starts.append(r)
        if starts and any(r.seq < FRESH for r, _ in prefill[prefill.index(fresh[0]):]):
            accepted = {id(r): n for r, n in ours}  # back to proposal order
            ours = [(r, accepted[id(r)]) for r, _ in prefill if id(r) in accepted]
    return Gated(Plan(decode, ours), [], starts, blocks, free)


class _PassOne:
    """Pass 1's running state: budget and blocks left, what was accepted and
    whom it preempted."""

    def __init__(self, kv: KV, free: int, budget: int, started: StartedOrder,
                 chunked: bool) -> None:
        self.kv, self.free, self.left, self.started, self.chunked = (kv, free, budget, started,
                                                                      chunked)
        self.blocks = 0
        self.accepted: Dict[int, int] = {}
        self.victims: List[Request] = []
        self.gone: set = set()
        self.ended = False
        self.all_decoders = False
        self._order: Optional[Sequence[Request]] = None
        self._tail = -1

    def block(self, count: int, need: int) -> bool:
        """Accept all ``count`` started decoders at once if they fit (``need`` blocks)."""
        if count > self.left or need > self.free:
            return False
        self.left -= count
        self.free -= need
        self.blocks += need
        self.all_decoders = True
        return True

    def items(self, items: Sequence[Tuple[Request, int, bool]]) -> None:
        """Walk ``items`` one by one, preempting as needed."""
        kv = self.kv
        for r, n, is_decode in items:
            if id(r) in self.gone:
                continue
            if self.left <= 0:
                self.ended = True
                return
            if n > self.left:
                if not self.chunked:
                    continue  # a whole prompt is never cut
                n = self.left
            need = kv.need(r, n, is_decode, True)
            while self.free < need:
                if self._preempt_for(r, need):
                    self.ended = True
                    return
            self.free -= need
            self.blocks += need
            self.left -= n
            self.accepted[id(r)] = n

    def _preempt_for(self, r: Request, need: int) -> bool:
        """Preempt the latest-started resident not yet allocated; True if it is ``r``."""
        kv = self.kv
        if kv.preemption == "none":
            raise KVOverflow(f"KV cache full: request {r.rid} needs {need} more blocks and "
                             f"{self.free} of {kv.blocks} are free, with preemption='none' "
                             "(allowed only where memory cannot overflow: admission="
                             "'peak'); use preemption='recompute'")
        if self._order is None:
            self._order = self.started() if callable(self.started) else self.started
            self._tail = len(self._order) - 1
        order, tail = self._order, self._tail
        accepted, gone, all_decoders = self.accepted, self.gone, self.all_decoders
        while tail >= 0 and (id(order[tail]) in accepted or id(order[tail]) in gone
                             or (all_decoders and order[tail].prefill_left == 0)):
            tail -= 1
        if tail < 0:
            raise ValueError(f"request {r.rid} holds KV but is not among the started "
                             "residents the gate was given")
        victim = order[tail]
        self._tail = tail - 1
        self.victims.append(victim)
        gone.add(id(victim))
        self.free += kv.held_blocks(victim)
        return victim is r


def wait_line(decode: Sequence[Request], prefill: Sequence[Tuple[Request, int]],
              prefill_first: bool = False, fcfs: bool = False
              ) -> List[Tuple[Request, int, bool]]:
    """The unstarted items of a proposal as pass 2 walks them, ``(resident,
    tokens, is a decode)``: the items of preempted residents first, by order
    key (the latest preemption step first, whatever order the policy listed
    them in), then the others in proposal order (its decodes, then its
    chunks; chunks first for a prefill-first policy), or, ``fcfs``, by order
    key too (first come, first served)."""
    decodes = [(r, 1, True) for r in decode]
    chunks = [(r, n, False) for r, n in prefill]
    line = chunks + decodes if prefill_first else decodes + chunks
    if fcfs:
        return sorted(line, key=_seq_of_item)
    if all(item[0].seq >= FRESH for item in line):  # nobody preempted: proposal order
        return line
    victims = sorted((i for i in line if i[0].seq < FRESH), key=_seq_of_item)
    return victims + [i for i in line if i[0].seq >= FRESH]


def _pass_two(decode: Sequence[Request], prefill: Sequence[Tuple[Request, int]], kv: KV,
              free: int, left: int, blocks: int, chunked: bool, prefill_first: bool,
              starts: List[Request], accepted: Dict[int, int], fcfs: bool = False
              ) -> Tuple[int, int, int]:
    """Pass 2: new starts until the first that does not fit; returns ``(left, free, blocks)``."""
    fresh_decode = [r for r in decode if not is_started(r)]
    fresh_prefill = [(r, n) for r, n in prefill if not is_started(r)]
    if not fresh_decode and not fresh_prefill:
        return left, free, blocks
    reserve = kv.reserve
    closed = False  # a whole prompt did not fit the budget: no later prompt starts
    for r, n, is_decode in wait_line(fresh_decode, fresh_prefill, prefill_first, fcfs):
        if left <= 0:
            break
        if closed and not is_decode:
            continue
        if n > left:
            if is_decode:
                break
            if not chunked:
                closed = True  # head of line for prompts; decodes behind it may start
                continue
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
