"""SimPy time helpers shared by the engine's processes and by networks: wait
until a time in seconds, and an event that fires after everything else of the
current instant."""

from __future__ import annotations

from typing import Generator, Optional

import simpy

from llmqueue.common.units import to_seconds, to_ticks


def now_ticks(env: simpy.Environment) -> int:
    """The current time in ticks.  SimPy types ``now`` as int or float; the
    engine's clock stays whole: it starts at 0 and every delay and ``until`` it
    passes SimPy is an int of ticks."""
    return env.now  # type: ignore[return-value]  # (no typing.cast: a call per read)


def wait_until(env: simpy.Environment, seconds: float, until: Optional[int], what: str
               ) -> Generator[simpy.Event, object, bool]:
    """In a SimPy process (``yield from``): wait until time ``seconds`` and
    return True, or return False at once when that time is at or past ``until``
    (ticks; ``None``: no end).  Times must not decrease: a time before now is a
    ValueError naming ``what``."""
    at = to_ticks(seconds)
    if until is not None and at >= until:
        return False
    if at < env.now:
        raise ValueError(f"{what} must not decrease: {seconds} s comes after "
                         f"{to_seconds(now_ticks(env))} s")
    if at > env.now:
        yield env.timeout(at - env.now)
    return True


def later_this_instant(env: simpy.Environment, priority: float) -> simpy.Event:
    """A triggered event processed at the current time after every event of a
    lower ``priority`` value (including those scheduled meanwhile)."""
    event = simpy.Event(env)
    event._ok = True  # a triggered event, as Environment.run builds its own
    event._value = None
    # SimPy annotates the priority as an int, but any number orders its heap
    env.schedule(event, priority)  # type: ignore[arg-type]
    return event
