"""The bare SimPy form of the design card, for the speed benchmark only: the
GPU a ``Resource``, the kmax pool a ``Container``, each request a process
that takes a slot, yields on its prefill and its decode phase and gives the
slot back, and a scheduler process that forms each iteration's Sarathi batch
from a list of residents and yields a timeout of ``t_b``; no skip-ahead, no
counters, no metrics.

It shows what the design card itself costs on a workload: llmqueue's engine
cannot be much faster than this without changing the card's event pattern.
Same model and numbers as :mod:`benchmarks.plain`.

:func:`events_only` is the card's floor: the events every request costs
under it (its arrival, its process, taking a slot, the ends of its two
phases, giving the slot back) with no scheduler and no iteration at all.
No engine of the card can run a workload in less time than that.
"""

from __future__ import annotations

from typing import Generator, List, Optional, Sequence, Tuple

import simpy

from benchmarks.plain import iteration_ns, sarathi_batch


def after_this_instant(env: simpy.Environment) -> simpy.Event:
    """An event processed after every other event of the current time (SimPy
    runs priority 0, then 1; this one has 2)."""
    event = simpy.Event(env)
    event._ok, event._value = True, None
    env.schedule(event, priority=2)  # type: ignore[arg-type]
    return event


def run(rows: Sequence[Tuple[float, int, int]], bmax: int = 512, kmax: int = 256
        ) -> Tuple[int, int, int]:
    """Simulate ``rows`` of ``(arrival s, prefill, decode)`` to the end; return
    ``(iterations, finished, end ns)``."""
    env = simpy.Environment()
    gpu = simpy.Resource(env, capacity=1)
    pool = simpy.Container(env, capacity=kmax, init=kmax)
    residents: List[list] = []  # [prefill left, decode left, prefilled event, finished event]
    counts = [0, 0]  # iterations, finished
    wake: List[Optional[simpy.Event]] = [None]
    ns: dict = {}

    def request(r: list) -> Generator[simpy.Event, object, None]:
        yield pool.get(1)
        residents.append(r)
        if wake[0] is not None and not wake[0].triggered:
            wake[0].succeed()
        if r[0]:
            yield r[2]
        yield r[3]
        yield pool.put(1)

    def arrivals() -> Generator[simpy.Event, object, None]:
        for a, p, d in rows:
            at = round(a * 1e9)
            if at > env.now:
                yield env.timeout(at - env.now)
            env.process(request([p, d, env.event(), env.event()]))

    def scheduler() -> Generator[simpy.Event, object, None]:
        while True:
            yield after_this_instant(env)  # releases and admissions of this instant first
            if not residents:
                wake[0] = env.event()
                yield wake[0]
                wake[0] = None
                continue
            with gpu.request() as hold:
                yield hold
                decoders, chunks, tokens = sarathi_batch(residents, bmax)
                t = ns.get(tokens)
                if t is None:
                    t = ns[tokens] = iteration_ns(tokens)
                yield env.timeout(t)
                counts[0] += 1
                for r in decoders:
                    r[1] -= 1
                    if r[1] == 0:
                        residents.remove(r)
                        counts[1] += 1
                        r[3].succeed()
                for r, take in chunks:
                    r[0] -= take
                    if r[0] == 0:
                        r[2].succeed()

    env.process(arrivals())
    env.process(scheduler())
    env.run()
    return counts[0], counts[1], int(env.now)


def events_only(rows: Sequence[Tuple[float, int, int]], kmax: int = 256) -> int:
    """The design card's per-request events for ``rows`` and nothing else:
    each request arrives, becomes a process, takes a slot, yields on a
    prefill and a decode phase (1 ns each: the pool never binds) and gives
    the slot back; no scheduler, no batch, no iteration.  Returns how many
    requests ended."""
    env = simpy.Environment()
    pool = simpy.Container(env, capacity=kmax, init=kmax)
    ended = [0]

    def request() -> Generator[simpy.Event, object, None]:
        yield pool.get(1)
        yield env.timeout(1)  # its prefill phase
        yield env.timeout(1)  # its decode phase
        yield pool.put(1)
        ended[0] += 1

    def arrivals() -> Generator[simpy.Event, object, None]:
        for a, _, _ in rows:
            at = round(a * 1e9)
            if at > env.now:
                yield env.timeout(at - env.now)
            env.process(request())

    env.process(arrivals())
    env.run()
    return ended[0]
