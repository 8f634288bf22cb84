"""The invariants of docs/model.md §6.3 step 7, checked on every iteration when asked
(``simulate(..., check_invariants=True)`` or the environment variable
``LLMQUEUE_CHECK_INVARIANTS=1``).  Each check walks every resident: a
debugging aid, never on by default.

At allocation (``plan`` given, the iteration about to run):

* blocks in use <= N, and blocks in use = Σ over started residents of the
  blocks they occupy after this allocation (``ceil(kv / B)`` plus the
  reservations of ``prompt`` and ``peak``);
* KV tokens in use = Σ of the residents' KV after this allocation;
* no resident is served without KV for its tokens: every served resident is
  started and its blocks cover its KV after the iteration; unstarted
  residents hold nothing (but the KV of a prompt that arrived prefilled);
* the order of docs/model.md §6.2: ``decoding`` and ``prefilling`` sorted by their order
  keys, the started prefillers first;
* with a swap pool (:mod:`~llmqueue.engine.kv_swap`): a swapped request holds
  no block of the cache, is not served and is in no list the policy reads;
  the pool's blocks in use = Σ over swapped requests of ``ceil(kv / B)``, at
  most the pool's size.

After an iteration (``plan=None``) the same, with nothing planned.
"""

from __future__ import annotations

import itertools
import os
from typing import Dict, Optional, Tuple

from llmqueue.common.units import ceil_div
from llmqueue.engine.errors import InvariantError
from llmqueue.engine.kv import KV, is_started, kv_tokens
from llmqueue.policies.view import Plan


def asked() -> bool:
    """Whether the environment asks every engine to check the invariants
    (``LLMQUEUE_CHECK_INVARIANTS`` set to anything but ``0``)."""
    return os.environ.get("LLMQUEUE_CHECK_INVARIANTS", "") not in ("", "0")


def check_state(residents, kv: KV, plan: Optional[Plan]) -> None:  # noqa: ANN001
    """Raise :class:`InvariantError` (an ``AssertionError``) with details when
    ``residents`` (a MemoryResidents) break an invariant of their KV cache."""
    served: Dict[int, Tuple[int, bool]] = {}
    if plan is not None:
        for r in plan.decode:
            served[id(r)] = (1, True)
        for r, n in plan.prefill:
            served[id(r)] = (n, False)
    b = kv.block_size
    blocks = tokens = pool = swapped = 0
    cache = getattr(residents, "cache", None)  # a prefix cache (docs/model.md §8.2)
    m = cache.m if cache is not None else 0
    for r in residents:
        held = kv_tokens(r)
        n, is_decode = served.get(id(r), (0, False))
        if r.memory.swapped:
            if n:
                raise InvariantError(f"request {r.rid} is swapped out but served {n} tokens")
            pool += ceil_div(held, b)
            swapped += 1
            continue
        if not is_started(r):
            # it holds nothing, but the KV of a prompt that arrived prefilled, which it
            # brings along when it starts (Engine.call)
            brought = r.vp if r.prefilled and not r.memory.preemptions else 0
            if cache is not None:  # the hit it would get now, shown as processed
                brought += r.memory.hit
            if n or held != brought:
                raise InvariantError(f"request {r.rid} is unstarted (no KV) but holds {held} "
                                     f"KV tokens or is served {n} tokens")
            continue
        after = held + n
        if kv.admission == "lazy":
            reserved = after
        elif kv.admission == "prompt":
            reserved = r.vp + r.vd - r.decode_left + (1 if is_decode else 0)
        else:
            reserved = kv.held_tokens(r)  # peak: vp + vd, or max_tokens
        if ceil_div(reserved, b) * b < after:
            raise InvariantError(f"request {r.rid} is served without KV: it will hold {after} "
                                 f"tokens in {ceil_div(reserved, b)} blocks of {b}")
        blocks += ceil_div(reserved, b) - (m * len(r.memory.entries) if cache else 0)
        tokens += after
    if cache is not None:  # entries held count once, however many hold them
        blocks += m * sum(1 for e in cache.entries.values() if e.count)
        cache.check(residents, residents.free)
    used = kv.blocks - residents.free
    if not 0 <= used <= kv.blocks:
        raise InvariantError(f"{used} blocks in use of {kv.blocks}")
    if used != blocks:
        raise InvariantError(f"{used} blocks in use, but the residents occupy {blocks}")
    if residents.used_tokens != tokens:
        raise InvariantError(f"{residents.used_tokens} KV tokens counted in use, but the "
                             f"residents hold {tokens}")
    _check_pool(residents, kv, pool, swapped)
    if sum(not is_started(r) for r in residents.decoding) != residents.unstarted_decoders:
        raise InvariantError("the count of unstarted decoders is wrong")
    keys = [r.seq for r in residents.decoding]
    if keys != sorted(keys):
        raise InvariantError("decoding residents are out of (re)start order")
    keys = [r.seq for r in residents.prefilling]
    s = residents.started_prefilling
    if keys != sorted(keys) or not all(map(is_started, residents.prefilling[:s])) \
            or any(map(is_started, residents.prefilling[s:])):
        raise InvariantError("prefilling residents are out of order (started ones first, "
                             "then preempted ones, then the rest by admission)")


def _check_pool(residents, kv: KV, pool: int, swapped: int) -> None:  # noqa: ANN001
    """The swap pool's invariants, given the blocks and the count of the
    swapped requests found among the residents."""
    queue = getattr(residents, "swapped", ())
    if len(queue) != swapped or not all(r.memory.swapped for r in queue):
        raise InvariantError(f"{swapped} residents are swapped out, but the swap queue "
                             f"holds {len(queue)}")
    if any(r.memory.swapped for r in itertools.chain(residents.decoding, residents.prefilling)):
        raise InvariantError("a swapped request is among the residents the policy reads")
    used = kv.swap_blocks - getattr(residents, "swap_free", kv.swap_blocks)
    if used != pool or not 0 <= used <= kv.swap_blocks:
        raise InvariantError(f"{used} swap-pool blocks in use of {kv.swap_blocks}, but the "
                             f"swapped requests hold {pool}")
