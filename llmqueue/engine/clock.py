"""SimPy time helpers shared by the engine's processes and by networks: wait
until a time in seconds, an event that fires after everything else of the
current instant, and failing an event quietly."""

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
    ValueError naming ``what``.  (:func:`delay_until` is the same without a
    generator, for loops that run once per request.)"""
    wait = delay_until(env, seconds, until, what)
    if wait is PAST_END:
        return False
    if wait is not None:
        yield wait
    return True


#: What :func:`delay_until` returns for a time at or past the run's end.
PAST_END = simpy.Event.__new__(simpy.Event)


def delay_until(env: simpy.Environment, seconds: float, until: Optional[int], what: str
                ) -> Optional[simpy.Event]:
    """The timeout to yield to wait until time ``seconds`` (``None``: it is now),
    or :data:`PAST_END` when that time is at or past ``until`` (ticks; ``None``:
    no end).  A time before now is a ValueError naming ``what``."""
    at = to_ticks(seconds)
    if until is not None and at >= until:
        return PAST_END
    now = env.now
    if at > now:
        return env.timeout(at - now)
    if at < now:
        raise ValueError(f"{what} must not decrease: {seconds} s comes after "
                         f"{to_seconds(now_ticks(env))} s")
    return None


def later_this_instant(env: simpy.Environment, priority: float) -> simpy.Event:
    """A triggered event processed at the current time after every event of a
    lower ``priority`` value (including those scheduled meanwhile)."""
    event = simpy.Event(env)
    event._ok = True  # a triggered event, as Environment.run builds its own
    event._value = None
    # SimPy annotates the priority as an int, but any number orders its heap
    env.schedule(event, priority)  # type: ignore[arg-type]
    return event


def fail_quietly(event: simpy.Event, error: Exception) -> simpy.Event:
    """Fail ``event`` now with ``error`` and return it: a process that yields
    it has ``error`` raised in it; if nobody yields it, it is dropped quietly
    (defused: the failure is the caller's to read, not the run's end)."""
    event.fail(error)
    event.defused = True
    return event
