"""An independent plain-Python stepper of Sarathi on the staircase, for the
speed benchmark only: what a reader would write in an afternoon to check the
model (no SimPy, no llmqueue, one list of residents scanned every iteration).

It models SPEC section 2 with the ``sarathi`` policy (decodes first, then
prefill chunks in admission order up to ``bmax``), a ``kmax`` slot pool with a
FIFO waiting line, and the staircase ``c + a * ceil(tokens / b0)`` in integer
nanoseconds, so it gives the same iterations and end time as llmqueue.
"""

from __future__ import annotations

from collections import deque
from typing import Deque, List, Sequence, Tuple

STAIRCASE = (0.01128, 0.03547, 128)  # c (s), a (s), b0 (tokens): the paper's fit


def iteration_ns(tokens: int, c: float = STAIRCASE[0], a: float = STAIRCASE[1],
                 b0: int = STAIRCASE[2]) -> int:
    """One iteration of ``tokens`` tokens on the staircase, in nanoseconds."""
    return round((c + a * -(-tokens // b0)) * 1e9)


def sarathi_batch(residents: Sequence[List], bmax: int
                  ) -> Tuple[List[List], List[Tuple[List, int]], int]:
    """Sarathi's batch over ``residents`` (lists starting ``[prefill left,
    decode left]``, in admission order): every decoder, then prefill chunks in
    order up to ``bmax`` tokens; returns the decoders, the chunks and the tokens."""
    decoders = [r for r in residents if r[0] == 0]
    budget = bmax - len(decoders)
    chunks = []
    for r in residents:
        if budget <= 0:
            break
        if r[0] > 0:
            take = min(r[0], budget)
            chunks.append((r, take))
            budget -= take
    return decoders, chunks, bmax - budget


def run(rows: Sequence[Tuple[float, int, int]], bmax: int = 512, kmax: int = 256
        ) -> Tuple[int, int, int]:
    """Step ``rows`` of ``(arrival s, prefill, decode)`` to the end; return
    ``(iterations, finished, end ns)``."""
    arrivals = [(round(a * 1e9), p, d) for a, p, d in rows]
    ns: dict = {}
    i, n, now, iterations, finished = 0, len(arrivals), 0, 0, 0
    waiting: Deque[List[int]] = deque()
    residents: List[List[int]] = []  # [prefill left, decode left]
    while True:
        while i < n and arrivals[i][0] <= now:
            waiting.append([arrivals[i][1], arrivals[i][2]])
            i += 1
        while waiting and len(residents) < kmax:
            residents.append(waiting.popleft())
        if not residents:
            if i == n:
                return iterations, finished, now
            now = arrivals[i][0]
            continue
        decoders, chunks, tokens = sarathi_batch(residents, bmax)
        t = ns.get(tokens)
        if t is None:
            t = ns[tokens] = iteration_ns(tokens)
        now += t
        iterations += 1
        for r in decoders:
            r[1] -= 1
        for r, take in chunks:
            r[0] -= take
        before = len(residents)
        residents = [r for r in residents if r[1] > 0]
        finished += before - len(residents)
