"""What a scheduling policy sees and what it returns.

A policy reads a :class:`View`: the residents whose prefill is done
(``decoding``) and those with prefill left (``prefilling``), each in admission
order, the current time, the requests waiting for a slot and, with a KV cache,
the free blocks and each resident's KV.  It returns a :class:`Plan`: the
decoders that get one token and the prefill chunks, as ``(resident, tokens)``
pairs.  The engine hands a user's policy a read-only view
(:class:`~llmqueue.engine.residents.EngineView`); :func:`make_view` builds one
by hand for tests and notebooks (a :class:`SimpleView`).

Units: tokens for sizes; seconds for :attr:`View.now`; integer nanoseconds of
simulated time for :attr:`View.now_ns` and every timestamp of a
:class:`Request` (``arrival``, ``admitted``, ``prefill_done``, ``first_token``,
``finished``; :attr:`Request.arrival_s` is the arrival in seconds).
"""

from __future__ import annotations

from numbers import Integral
from typing import Any, Hashable, List, NamedTuple, Optional, Protocol, Sequence, Tuple, Union

from llmqueue.common.units import to_seconds, to_ticks

_NO_CLOCK: List[int] = [0]


class Request:
    """One request: its sizes (tokens), its progress (tokens) and its
    timestamps (integer nanoseconds of simulated time).

    ``vp`` and ``vd`` are its prompt and decode tokens, ``prefill_left`` and
    ``decode_left`` what it has left of them; ``arrival``, ``admitted`` (it
    got a slot), ``prefill_done``, ``first_token`` and ``finished`` are in ns
    (``None`` until they happen; :attr:`arrival_s` is the arrival in seconds).
    A request is *waiting* until it gets a slot and a *resident* from then
    until its last decode token; policies plan for residents only (and may
    read the waiting line, :attr:`View.waiting`).  A policy reads requests:
    it never sets their fields (the engine owns them).
    ``decode_left`` is derived from ``end_mark`` and a clock shared by all
    residents of an engine: the fast engine advances every decoder at once by
    ticking the clock instead of touching each resident.
    """

    __slots__ = ("rid", "seq", "klass", "vp", "vd", "prefilled", "prefill_left", "end_mark",
                 "clock", "arrival", "admitted", "prefill_done", "first_token", "finished",
                 "on_prefilled", "on_finished", "memory", "early")

    def __init__(self, rid: Hashable, vp: int, vd: int, klass: Hashable = None,
                 arrival: int = 0, seq: int = 0, prefilled: bool = False) -> None:
        self.rid = rid
        self.seq = seq
        self.klass = klass
        self.vp = vp
        self.vd = vd
        self.prefilled = prefilled
        """Its prompt's KV was made elsewhere and arrives with it: it prefills nothing."""
        self.prefill_left = 0 if prefilled else vp
        self.clock = _NO_CLOCK
        self.end_mark = vd
        self.arrival = arrival
        self.admitted: Optional[int] = None
        self.prefill_done: Optional[int] = None
        self.first_token: Optional[int] = None
        self.finished: Optional[int] = None
        self.on_prefilled: Any = None  # the engine's events (SimPy), set on admission
        self.on_finished: Any = None
        self.memory: Any = None  # the engine's per-request KV record, when memory is on
        self.early = False
        """Its first output token comes with the iteration that completes its prefill
        (``first_token="prefill"``): ``vd`` then counts the decode tokens it
        processes, one fewer than its output tokens (:func:`output_tokens`)."""

    @property
    def arrival_s(self) -> float:
        """When it arrived, in seconds (``arrival`` is in ns)."""
        return to_seconds(self.arrival)

    @property
    def decode_left(self) -> int:
        """Decode tokens this request still has to produce."""
        return self.end_mark - self.clock[0]

    @decode_left.setter
    def decode_left(self, value: int) -> None:
        self.end_mark = value + self.clock[0]

    def __repr__(self) -> str:
        return (f"Request(rid={self.rid}, prefill_left={self.prefill_left}, "
                f"decode_left={self.decode_left})")


def output_tokens(r: Request) -> int:
    """Output tokens ``r`` produces: its decode tokens, and one more when its
    first token comes with its prefill (:attr:`Request.early`)."""
    return r.vd + r.early


class View(Protocol):
    """One engine at a batch choice, as a policy reads it: read-only.

    Sizes are tokens; :attr:`now` is seconds, :attr:`now_ns` and the
    timestamps of a :class:`Request` are integer nanoseconds; KV memory is
    in tokens or in blocks of :attr:`block_size` tokens, as each name says.
    Sequences are tuples in the view the engine hands a user's policy (sort
    with ``sorted``), and no method of it changes anything.  Without a KV
    cache, :attr:`kv`, :attr:`free_blocks`, :attr:`block_size`,
    :attr:`free_tokens` and :meth:`kv_blocks` are ``None``.
    """

    @property
    def decoding(self) -> Sequence[Request]:
        """Residents whose prefill is done, in admission order (with a KV
        cache: those holding KV first, by (re)start, then the others)."""
        ...

    @property
    def prefilling(self) -> Sequence[Request]:
        """Residents with prefill left (``prefill_left`` tokens), in the same order."""
        ...

    @property
    def population(self) -> Optional[int]:
        """Residents of the whole engine, when this view shows only some of
        them (a class under class priority); ``None``: these are all.
        Read it with :func:`population`."""
        ...

    @property
    def draining(self) -> bool:
        """Whether no resident can join before this batch runs (:func:`is_draining`)."""
        ...

    @property
    def now(self) -> float:
        """The current simulated time, in seconds."""
        ...

    @property
    def now_ns(self) -> int:
        """The current simulated time, in integer nanoseconds (the unit of
        ``Request.arrival`` and the other timestamps)."""
        ...

    @property
    def waiting(self) -> Sequence[Request]:
        """Requests that arrived and wait for a slot (``kmax``): not residents
        yet, so no batch may hold them; first come first (``waiting[0]``
        is admitted next).  Their ``prefill_left`` is their whole prompt."""
        ...

    @property
    def kv(self) -> Any:
        """The KV cache's settings (a frozen :class:`~llmqueue.engine.kv.KV`:
        ``blocks``, ``block_size``, ``reserve``, ``admission``, ...), or
        ``None`` without a cache."""
        ...

    @property
    def free_blocks(self) -> Optional[int]:
        """KV blocks no resident holds now (with a prefix cache, the blocks
        of evictable entries count as free); a new start must leave
        ``kv.reserve`` of them free."""
        ...

    @property
    def block_size(self) -> Optional[int]:
        """Tokens per KV block."""
        ...

    @property
    def free_tokens(self) -> Optional[int]:
        """``free_blocks * block_size``: tokens of KV the free blocks hold."""
        ...

    def kv_tokens(self, r: Request) -> int:
        """Tokens of KV resident ``r`` holds now: the tokens it processed
        since its last start (0 while it holds none: not started yet, or
        preempted).  Without a cache, the tokens it processed."""
        ...

    def kv_blocks(self, r: Request) -> Optional[int]:
        """KV blocks resident ``r`` occupies now, its admission mode's
        reservation included (with a prefix cache, shared entries count in
        each resident that holds them)."""
        ...


class ResidentLists(Protocol):
    """What every view has, the residents (all the package's own policies read)."""

    @property
    def decoding(self) -> Sequence[Request]: ...  # noqa: D102

    @property
    def prefilling(self) -> Sequence[Request]: ...  # noqa: D102


def _kv_tokens(r: Request) -> int:
    """Tokens of KV resident ``r`` holds (:meth:`View.kv_tokens`): none
    before its (re)start, those it processed since."""
    return r.vp + r.vd - r.prefill_left - r.decode_left if r.seq < UNSTARTED else 0


def _kv_blocks(kv: Any, r: Request) -> Optional[int]:
    """Blocks resident ``r`` occupies in cache ``kv`` (:meth:`View.kv_blocks`):
    ``None`` without a cache, 0 before its (re)start."""
    if kv is None:
        return None
    return kv.held_blocks(r) if r.seq < UNSTARTED else 0


class Plan(NamedTuple):
    """One iteration's batch: a decode token for each of ``decode`` and the
    prefill chunks ``(resident, tokens)`` of ``prefill``."""

    decode: Sequence[Request]
    prefill: Sequence[Tuple[Request, int]]

    @property
    def prefill_tokens(self) -> int:
        """Prefill tokens in the batch."""
        return sum(tokens for _, tokens in self.prefill)

    @property
    def tokens(self) -> int:
        """All tokens in the batch."""
        return len(self.decode) + self.prefill_tokens

    def __bool__(self) -> bool:
        return bool(self.decode) or bool(self.prefill)


#: What a policy returns to leave the GPU idle on purpose until the next
#: arrival (compared by identity; docs/model.md §6.5's WAIT).  Only engines with a KV
#: cache accept it; elsewhere it is an empty batch.
IDLE = Plan((), ())


class SimpleView(NamedTuple):
    """A hand-made :class:`View` (:func:`make_view`), or a part of one.
    ``population`` is the number of residents of the whole engine when this
    view shows only some of them (a class under class priority); ``None``
    means these are all.  ``draining`` says that no resident can join before
    this batch runs (:func:`is_draining`).  ``now_ns`` is the time (ns),
    ``waiting`` the requests waiting for a slot, ``kv`` the cache (a
    ``KV``, or ``None``) and ``free_blocks`` its free blocks."""

    decoding: Sequence[Request]
    prefilling: Sequence[Request]
    population: Optional[int] = None
    draining: bool = False
    now_ns: int = 0
    waiting: Sequence[Request] = ()
    kv: Any = None
    free_blocks: Optional[int] = None

    @property
    def now(self) -> float:
        """The time, in seconds."""
        return to_seconds(self.now_ns)

    @property
    def block_size(self) -> Optional[int]:
        """Tokens per KV block (``None`` without a cache)."""
        return None if self.kv is None else self.kv.block_size

    @property
    def free_tokens(self) -> Optional[int]:
        """Tokens of KV the free blocks hold (``None`` without a cache)."""
        size = self.block_size
        return None if size is None or self.free_blocks is None else self.free_blocks * size

    def kv_tokens(self, r: Request) -> int:
        """Tokens of KV ``r`` holds (:meth:`View.kv_tokens`)."""
        return _kv_tokens(r)

    def kv_blocks(self, r: Request) -> Optional[int]:
        """Blocks ``r`` occupies (:meth:`View.kv_blocks`)."""
        return _kv_blocks(self.kv, r)


def population(view: ResidentLists) -> int:
    """How many residents the engine behind ``view`` holds."""
    whole = getattr(view, "population", None)
    return whole if whole is not None else len(view.decoding) + len(view.prefilling)


def is_draining(view: ResidentLists) -> bool:
    """Whether no resident can join the engine behind ``view`` before the
    batch being chosen runs: its workload's arrivals are over (and nobody
    waits for a slot), or every kmax slot is taken.  A policy that waits for
    residents to accumulate (WAIT, docs/model.md §6.5) must not wait then.  Views that
    do not say are not draining."""
    return bool(getattr(view, "draining", False))


#: Order keys (``Request.seq``) under memory: started residents carry their
#: (re)start number, below :data:`UNSTARTED`; unstarted ones carry a key at or
#: above it, preempted ones (from :data:`PREEMPTED`, latest step first) ahead of
#: the others (from :data:`FRESH`, by admission).  Sorting by ``seq`` gives the
#: resident order of docs/model.md §6.2.  Without memory ``seq`` is the admission number.
UNSTARTED = 2**61
PREEMPTED = UNSTARTED + 2**59
FRESH = 2**62


def holds_kv(r: Request) -> bool:
    """Whether resident ``r`` holds KV: it has started since its admission or
    its last preemption (its order key is a start number) and processed
    tokens.  A request whose prompt arrived prefilled holds nothing until it
    starts, though :func:`processed` counts that prompt."""
    return r.seq < UNSTARTED and processed(r) > 0


def processed(r: Request) -> int:
    """Tokens ``r`` has processed in its current incarnation: its KV under
    memory (docs/model.md §6.1), 0 until it starts and again after a preemption (a
    request whose prompt arrived prefilled, ``Engine.call(prefilled=True)``,
    counts that prompt from its arrival: it brings its KV along)."""
    return r.vp + r.vd - r.prefill_left - r.decode_left


Entry = Union[Tuple[Hashable, int, int], Request]


def make_request(rid: Hashable, vp: int, vd: int, *, done: int = 0, klass: Hashable = None,
                 arrival: float = 0.0) -> Request:
    """A request of ``vp`` prompt and ``vd`` decode tokens that has processed
    ``done`` of them (its prompt first), arrived at ``arrival`` seconds: a
    resident for :func:`make_view` (with a cache it holds ``done`` tokens of KV)."""
    if not 0 <= done < vp + vd:
        raise ValueError(f"done must be from 0 to vp + vd - 1 = {vp + vd - 1}; got {done}")
    r = Request(rid, vp, vd, klass, arrival=to_ticks(arrival))
    r.prefill_left = vp - min(done, vp)
    r.decode_left = vd - max(done - vp, 0)
    return r


def _request(entry: Entry) -> Request:
    if isinstance(entry, Request):
        return entry
    rid, prefill_left, decode_left = entry
    return Request(rid, prefill_left, decode_left)


def make_view(residents: Sequence[Entry], classes: Optional[Sequence[Hashable]] = None, *,
              now: float = 0.0, waiting: Sequence[Entry] = (), kv: Any = None,
              free_blocks: Optional[int] = None) -> SimpleView:
    """Build a view for testing policies without a simulation: the residents
    in admission order, each a ``(rid, prefill_left, decode_left)`` triple
    (nothing processed yet) or a :class:`Request` (:func:`make_request`);
    ``classes`` their classes; ``now`` the time in seconds; ``waiting`` the
    requests waiting for a slot (triples ``(rid, vp, vd)`` or requests);
    ``kv`` a cache (``llmqueue.KV``): residents that processed nothing hold no
    KV yet, and ``free_blocks`` defaults to the blocks the others leave."""
    decoding: List[Request] = []
    prefilling: List[Request] = []
    for seq, entry in enumerate(residents):
        r = _request(entry)
        r.seq = FRESH + seq if kv is not None and processed(r) == 0 else seq
        if classes is not None:
            r.klass = classes[seq]
        (prefilling if r.prefill_left > 0 else decoding).append(r)
    if kv is not None and free_blocks is None:
        free_blocks = kv.blocks - sum(_kv_blocks(kv, r) or 0 for r in decoding + prefilling)
    return SimpleView(decoding, prefilling, now_ns=to_ticks(now),
                      waiting=tuple(_request(e) for e in waiting), kv=kv, free_blocks=free_blocks)


def check_plan(plan: Plan, view: ResidentLists, budget: int, name: str) -> None:
    """Raise ``ValueError`` unless ``plan`` obeys rules 6a-6d for ``view``:
    a :class:`Plan`, each decoder once, whole-number chunks within each
    resident's prefill left, and no more than ``budget`` tokens."""
    if not isinstance(plan, Plan):
        raise ValueError(f"policy {name!r} returned {plan!r}; expected a Plan(decode, "
                         "prefill) or IDLE")
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
        if (left is None or id(r) in seen or not isinstance(tokens, Integral)
                or isinstance(tokens, bool) or not 1 <= tokens <= left):
            raise ValueError(f"policy {name!r} gave {tokens} prefill tokens to request "
                             f"{r.rid}; allowed: 1..its remaining prefill, once per batch")
        seen.add(id(r))
    if plan.tokens > budget:
        raise ValueError(f"policy {name!r} formed a batch of {plan.tokens} tokens; "
                         f"bmax is {budget}")
