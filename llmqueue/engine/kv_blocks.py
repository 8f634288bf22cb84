"""The blocks a run of identical iterations takes (docs/model.md §6.1, skip-ahead of
:mod:`~llmqueue.engine.kv_scheduler`), with blocks of ``B > 1`` tokens.

A run of ``k`` iterations of one plan (every decoder served, or none) grows
the KV of each item by the same tokens every iteration, but its blocks
unevenly: a decoder takes a new block when its KV is a multiple of ``B``
(:attr:`MemoryResidents.due` counts the decoders by the clock value, mod
``B``, at which that happens, so the decoders' needs repeat every ``B``
iterations), and a ``lazy`` chunk of ``n`` tokens at KV ``x`` holds
``ceil((x + i n) / B)`` blocks after ``i`` more iterations.  Writing ``P_j``
for the blocks that iterations ``1 .. j`` after the first add in all:

* :func:`block_steps` lists ``P_1, P_2, ...`` as far as they fit the free
  blocks (the recorder's rows need each one, and a run that runs short of
  blocks stops where the list does);
* :func:`block_growth` gives ``P_m`` and ``P_1 + ... + P_(m-1)`` for
  ``m = k - 1`` in closed form, without a list, when all of them fit: the
  total the run takes and, for the time integral of blocks in use, the sum
  of the levels it holds for a whole iteration
  (:meth:`~llmqueue.engine.kv_recorder.MemoryRecorder.book`).

``tests/test_kv_blocks.py`` checks one against the other, and
:func:`floor_sum` against its definition.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import operator
from typing import TYPE_CHECKING, List, Optional, Tuple, Union

from llmqueue.policies.view import Plan

if TYPE_CHECKING:
    from llmqueue.engine.kv_residents import MemoryResidents

#: The blocks a run's iterations after the first add: the same number each,
#: the running totals ``[P_1, P_2, ...]`` (:func:`block_steps`), or
#: ``(P_1 + ... + P_(m-1), P_m)`` (:func:`block_growth`).
Growth = Union[int, List[int], Tuple[int, int]]


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """``sum(floor((a * i + b) / m) for i in range(n))`` for ``n, a, b >= 0``
    and ``m >= 1``, in O(log m) steps (the Euclid-like reduction of the
    AtCoder Library's ``floor_sum``).

    >>> floor_sum(5, 3, 2, 1), sum((2 * i + 1) // 3 for i in range(5))
    (6, 6)
    """
    total = 0
    while True:
        if a >= m:
            total += (n - 1) * n // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        top = a * n + b
        if top < m:
            return total
        n, b, m, a = top // m, top % m, a, m


def block_steps(residents: MemoryResidents, plan: Plan, k: int) -> List[int]:
    """``P_1, P_2, ...`` for a run of ``plan`` (every decoder served, or none)
    of at most ``k >= 2`` iterations, as long as they fit the free blocks."""
    b, m = residents.block_size, k - 1
    base, ends = 0, []
    if residents.kv.admission == "lazy":
        for r, n in plan.prefill:  # KV x after the first iteration
            x = r.vp + r.vd - r.prefill_left - r.end_mark + r.clock[0] + n
            base += x // -b  # -ceil(x / B)
            ends.append(range(x + n, x + m * n + 1, n))
    if plan.decode:
        due, a = residents.due, (residents.clock[0] + 1) % b  # iteration i: due[(c0 + i) % B]
        cycle = due[a:] + due[:a]  # type: ignore[index]
        needs = cycle[:m] if m <= b else (cycle * (m // b + 1))[:m]
        needs[0] += base
        steps = list(itertools.accumulate(needs))
    else:
        steps = [base] * m
    for chunk in ends:  # + ceil((x + i n) / B) in iteration i, in C loops
        steps = list(map(operator.sub, steps, map(operator.floordiv, chunk,
                                                  itertools.repeat(-b))))
    fit = bisect.bisect_right(steps, residents.free)
    return steps if fit == len(steps) else steps[:fit]


def block_growth(residents: MemoryResidents, plan: Plan, k: int) -> Optional[Tuple[int, int]]:
    """``(P_1 + ... + P_(m-1), P_m)`` for ``m = k - 1 >= 1`` further iterations of
    ``plan`` (every decoder served, or none), or ``None`` when ``P_m`` exceeds
    the free blocks (then :func:`block_steps` finds where the run stops)."""
    b, m = residents.block_size, k - 1
    total = held = 0
    if plan.decode:
        due, a = residents.due, (residents.clock[0] + 1) % b  # iteration i: due[(c0 + i) % B]
        if m <= b:  # at most one cycle: P_j one by one
            for need in (due[a:a + m] if a + m <= b  # type: ignore[index]
                         else due[a:] + due[:a + m - b]):  # type: ignore[index]
                total += need
                held += total
            held -= total
        else:  # P_j = (j // B) D + P_(j mod B), D = every decoder once a cycle
            prefix = [0]
            for j in range(a, a + b):
                total += due[j % b]  # type: ignore[index]
                prefix.append(total)
            q, rest = divmod(m - 1, b)
            held = (total * (b * q * (q - 1) // 2 + q * (rest + 1))
                    + q * sum(prefix[:b]) + sum(prefix[1:rest + 1]))
            total = (m // b) * total + prefix[m % b]
    if residents.kv.admission == "lazy":
        for r, n in plan.prefill:  # KV x after the first iteration; then x + j n
            x = r.vp + r.vd - r.prefill_left - r.end_mark + r.clock[0] + n
            grown, added = _chunk_growth(x % b, n, m, b)
            total += added
            held += grown
    return (held, total) if total <= residents.free else None


@functools.lru_cache(maxsize=1 << 16)
def _chunk_growth(r: int, n: int, m: int, b: int) -> Tuple[int, int]:
    """``(Σ_{j=1}^{m-1} g_j, g_m)`` for ``g_j = ceil((x + j n) / B) - ceil(x / B)``,
    the blocks a chunk of ``n`` tokens a step at KV ``x`` adds in ``j`` steps,
    which depend on ``x`` only through ``r = x mod B`` (so runs share them)."""
    first = -(r // -b)  # ceil(r / B)
    # Σ_{j=1}^{m-1} ceil((r + j n) / B), the floors of (n i + r + n + B - 1) / B
    return (floor_sum(m - 1, b, n, r + n + b - 1) - (m - 1) * first,
            -((r + m * n) // -b) - first)
