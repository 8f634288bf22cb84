"""The rows a run's logs become: an iteration (:class:`Batch`), a request's
times (:class:`RequestTimes`) and its KV record (:class:`RequestMemory`).
:mod:`~llmqueue.engine.results` holds them in a
:class:`~llmqueue.engine.results.Result`."""

from __future__ import annotations

from typing import Hashable, NamedTuple, Optional, Sequence, Tuple

from llmqueue.common.units import to_seconds
from llmqueue.policies.view import Request


class Batch(NamedTuple):
    """One iteration: when it ran, its tokens and its members."""

    start: int
    """Start time (ns in :attr:`Result.batch_log`)."""
    duration: int
    """Length of the iteration, t_b (ns)."""
    prefill_tokens: int
    """Prefill tokens in the batch."""
    decode_tokens: int
    """Decode tokens in the batch (one per decoding member)."""
    requests: int
    """Requests served: decoders plus prefill chunks."""
    decode: Tuple[Hashable, ...]
    """Ids of the requests that got a decode token."""
    prefill: Tuple[Tuple[Hashable, int], ...]
    """``(id, tokens)`` of every prefill chunk."""


class RequestTimes(NamedTuple):
    """One request's life in seconds (``None`` for what had not happened when
    the run ended) and its sizes."""

    id: Hashable
    """Request id: arrivals numbered from 0 in arrival order (per engine)."""
    arrival: float
    admitted: Optional[float]
    """When it got a slot."""
    prefill_done: Optional[float]
    first_token: Optional[float]
    """End of its first decode iteration (TTFT = first_token - arrival), or of its
    prefill's last iteration when its first token comes with it
    (``first_token="prefill"``)."""
    finished: Optional[float]
    vp: int
    """Prefill (prompt) tokens."""
    vd: int
    """Decode (output) tokens."""

    @classmethod
    def of(cls, r: Request) -> "RequestTimes":
        """The record of request ``r`` (whose times are in ns)."""
        s = seconds
        return cls(r.rid, to_seconds(r.arrival), s(r.admitted), s(r.prefill_done),
                   s(r.first_token), s(r.finished), r.vp, r.vd + r.early)


class RequestMemory(NamedTuple):
    """One request's KV record (runs with a KV cache)."""

    id: Hashable
    """Request id."""
    ignored: bool
    """Rejected on arrival: it could never fit the cache."""
    preemptions: int
    """Times it was preempted."""
    recomputed_tokens: int
    """Tokens it processed again after preemptions."""
    memory_area: int
    """Σ over the iterations while resident of its KV after allocation (token-iterations)."""
    cached_tokens: Optional[int] = None
    """Under a prefix cache (docs/model.md §8.3): the prompt tokens its first start found
    cached (``None`` if it never started, or without a prefix cache)."""

    @classmethod
    def of(cls, r: Request) -> "RequestMemory":
        """The record of request ``r`` (which ran on an engine with a KV cache)."""
        m = r.memory
        return cls(r.rid, m.ignored, m.preemptions, m.recomputed, m.area,
                   getattr(m, "cached", None))


def memory_columns(log: Sequence[Request]) -> int:
    """How many of :class:`RequestMemory`'s fields a request log shows: all
    under a prefix cache, else all but ``cached_tokens``."""
    prefix = bool(log) and hasattr(log[0].memory, "entries")
    return len(RequestMemory._fields) - (0 if prefix else 1)


def seconds(t: Optional[int]) -> Optional[float]:
    """``t`` ns in seconds (``None`` stays ``None``)."""
    return None if t is None else to_seconds(t)
