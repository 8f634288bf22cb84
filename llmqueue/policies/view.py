"""What a scheduling policy sees and what it returns.

A policy reads a :class:`View`: the residents whose prefill is done
(``decoding``) and those with prefill left (``prefilling``), each in admission
order.  It returns a :class:`Plan`: the decoders that get one token and the
prefill chunks, as ``(resident, tokens)`` pairs.  Both engines hand policies
objects with these two attributes, and :func:`make_view` builds one by hand for
tests and notebooks.
"""

from __future__ import annotations

from numbers import Integral
from typing import Any, Hashable, List, NamedTuple, Optional, Protocol, Sequence, Tuple

_NO_CLOCK: List[int] = [0]


class Request:
    """One request: its sizes, its progress and its timestamps (integer ns).

    A request is *waiting* until it gets a slot and a *resident* from then
    until its last decode token; policies see residents only.
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
    """The residents of one engine at the start of an iteration."""

    @property
    def decoding(self) -> Sequence[Request]:
        """Residents whose prefill is done, in admission order."""
        ...

    @property
    def prefilling(self) -> Sequence[Request]:
        """Residents with prefill left, in admission order."""
        ...

    # A view may also carry ``population`` (see :func:`population`) and
    # ``draining`` (see :func:`is_draining`); policies read them with defaults.


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
#: arrival (compared by identity; SPEC 7.5's WAIT).  Only engines with a KV
#: cache accept it; elsewhere it is an empty batch.
IDLE = Plan((), ())


class SimpleView(NamedTuple):
    """A hand-made :class:`View`, or a part of one.  ``population`` is the
    number of residents of the whole engine when this view shows only some
    of them (a class under class priority); ``None`` means these are all.
    ``draining`` says that no resident can join before this batch runs
    (:func:`is_draining`)."""

    decoding: Sequence[Request]
    prefilling: Sequence[Request]
    population: Optional[int] = None
    draining: bool = False


def population(view: View) -> int:
    """How many residents the engine behind ``view`` holds."""
    whole = getattr(view, "population", None)
    return whole if whole is not None else len(view.decoding) + len(view.prefilling)


def is_draining(view: View) -> bool:
    """Whether no resident can join the engine behind ``view`` before the
    batch being chosen runs: its workload's arrivals are over (and nobody
    waits for a slot), or every kmax slot is taken.  A policy that waits for
    residents to accumulate (WAIT, SPEC 7.5) must not wait then.  Views that
    do not say are not draining."""
    return bool(getattr(view, "draining", False))


#: Order keys (``Request.seq``) under memory: started residents carry their
#: (re)start number, below :data:`UNSTARTED`; unstarted ones carry a key at or
#: above it, preempted ones (from :data:`PREEMPTED`, latest step first) ahead of
#: the others (from :data:`FRESH`, by admission).  Sorting by ``seq`` gives the
#: resident order of SPEC 7.2.  Without memory ``seq`` is the admission number.
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
    memory (SPEC 7.1), 0 until it starts and again after a preemption (a
    request whose prompt arrived prefilled, ``Engine.call(prefilled=True)``,
    counts that prompt from its arrival: it brings its KV along)."""
    return r.vp + r.vd - r.prefill_left - r.decode_left


def make_view(residents: Sequence[Tuple[Hashable, int, int]],
              classes: Optional[Sequence[Hashable]] = None) -> SimpleView:
    """Build a view from ``(rid, prefill_left, decode_left)`` triples in
    admission order, for testing policies without a simulation."""
    decoding: List[Request] = []
    prefilling: List[Request] = []
    for seq, (rid, prefill_left, decode_left) in enumerate(residents):
        klass = classes[seq] if classes is not None else None
        r = Request(rid, prefill_left, decode_left, klass=klass, seq=seq)
        (prefilling if prefill_left > 0 else decoding).append(r)
    return SimpleView(decoding, prefilling)


def check_plan(plan: Plan, view: View, budget: int, name: str) -> None:
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
