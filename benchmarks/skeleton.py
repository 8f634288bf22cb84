"""The bare SimPy form of the design card, for the speed benchmark only: the
GPU a ``Resource``, the kmax pool a ``Container``, each request a process
that takes a slot, yields on its prefill and its decode phase and gives the
slot back, and a scheduler process that forms each iteration's Sarathi batch
from a list of residents and yields a timeout of ``t_b``; no skip-ahead, no
counters, no metrics.

It shows what the design card itself costs on a workload: llmqueue's engine
cannot be much faster than this without changing the card's event pattern.
Same model and numbers as :mod:`benchmarks.plain`.
"""

from __future__ import annotations

from typing import Generator, List, Optional, Sequence, Tuple

import simpy

from benchmarks.plain import iteration_ns


class _Request:
    __slots__ = ("prefill", "decode", "prefilled", "finished")

    def __init__(self, env: simpy.Environment, prefill: int, decode: int) -> None:
        self.prefill, self.decode = prefill, decode
        self.prefilled = env.event()
        self.finished = env.event()


def run(rows: Sequence[Tuple[float, int, int]], bmax: int = 512, kmax: int = 256
        ) -> Tuple[int, int, int]:
    """Simulate ``rows`` of ``(arrival s, prefill, decode)`` to the end; return
    ``(iterations, finished, end ns)``."""
    env = simpy.Environment()
    gpu = simpy.Resource(env, capacity=1)
    pool = simpy.Container(env, capacity=kmax, init=kmax)
    residents: List[_Request] = []
    counts = [0, 0]  # iterations, finished
    wake: List[Optional[simpy.Event]] = [None]
    ns: dict = {}

    def request(r: _Request) -> Generator[simpy.Event, object, None]:
        yield pool.get(1)
        residents.append(r)
        if wake[0] is not None and not wake[0].triggered:
            wake[0].succeed()
        if r.prefill:
            yield r.prefilled
        yield r.finished
        yield pool.put(1)

    def arrivals() -> Generator[simpy.Event, object, None]:
        for a, p, d in rows:
            at = round(a * 1e9)
            if at > env.now:
                yield env.timeout(at - env.now)
            env.process(request(_Request(env, p, d)))

    def scheduler() -> Generator[simpy.Event, object, None]:
        while True:
            yield env.timeout(0)  # let the releases and admissions of this instant happen
            if not residents:
                wake[0] = env.event()
                yield wake[0]
                wake[0] = None
                continue
            with gpu.request() as hold:
                yield hold
                decoders = [r for r in residents if r.prefill == 0]
                budget = bmax - len(decoders)
                chunks = []
                for r in residents:
                    if budget <= 0:
                        break
                    if r.prefill > 0:
                        take = min(r.prefill, budget)
                        chunks.append((r, take))
                        budget -= take
                tokens = bmax - budget
                t = ns.get(tokens)
                if t is None:
                    t = ns[tokens] = iteration_ns(tokens)
                yield env.timeout(t)
                counts[0] += 1
                for r in decoders:
                    r.decode -= 1
                    if r.decode == 0:
                        residents.remove(r)
                        counts[1] += 1
                        r.finished.succeed()
                for r, take in chunks:
                    r.prefill -= take
                    if r.prefill == 0:
                        r.prefilled.succeed()

    env.process(arrivals())
    env.process(scheduler())
    env.run()
    return counts[0], counts[1], int(env.now)
