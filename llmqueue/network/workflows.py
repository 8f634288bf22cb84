"""Agent workflows: jobs that call engines, as SimPy processes (docs/model.md §9.4).

A workflow is a generator function of a :class:`JobContext`.  It yields the
events of its LLM calls: one call to wait for it, ``ctx.all(...)`` to fan out
and wait for every call (fork-join), ``ctx.delay(s)`` for a pause, and it
branches with ``ctx.rng``::

    def job(ctx):
        yield ctx.call("planner", 300, 50)
        yield ctx.all(ctx.call("worker", 500, 200) for _ in range(3))
        if ctx.rng.random() < 0.5:
            yield ctx.call("critic", 200, 20)
        yield ctx.call("aggregator", 800, 100)

:func:`start_jobs` launches jobs at Poisson times (or given times);
each job's start, end and calls are kept in a :class:`JobRecord`, and
:func:`job_summary` turns them into end-to-end percentiles.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generator, Hashable, Iterable, Iterator, List, Optional

import numpy as np
import simpy

from llmqueue.common import validation
from llmqueue.common.percentiles import named_percentiles
from llmqueue.common.units import to_seconds, to_ticks
from llmqueue.engine.clock import now_ticks, wait_until
from llmqueue.engine.errors import RequestIgnored
from llmqueue.network.network import Network
from llmqueue.policies.view import Request


@dataclass
class CallRecord:
    """One LLM call of a job: where it was sent, which engine took it, and
    its event (whose value is the :class:`Request` once it finished)."""

    target: str
    engine: Optional[str]  # set when a pool has routed the call
    event: simpy.Event

    @property
    def resident(self) -> Optional[Request]:
        """The finished request, or ``None`` while it runs (and for a call that
        failed: one that could never fit its engine's KV cache)."""
        event = self.event
        return event.value if event.processed and event.ok else None


@dataclass
class JobRecord:
    """One job: its class, start and end (ticks; ``end`` is None while it runs)
    and its calls in the order they were made."""

    jid: int
    klass: Hashable
    start: int
    end: Optional[int] = None
    calls: List[CallRecord] = field(default_factory=list)
    failed: Optional[str] = None
    """Why the job stopped unfinished: a call it did not catch could never fit
    its engine's KV cache (:class:`~llmqueue.engine.errors.RequestIgnored`)."""

    @property
    def e2e(self) -> Optional[float]:
        """Seconds from the job's start to its end."""
        return None if self.end is None else to_seconds(self.end - self.start)


class JobContext:
    """What a workflow sees: the clock, a seeded generator, and ways to call."""

    def __init__(self, net: Network, record: JobRecord, rng: np.random.Generator) -> None:
        self.net = net
        self.env = net.env
        self.record = record
        self.rng = rng

    @property
    def now(self) -> float:
        """Simulated time in seconds."""
        return to_seconds(now_ticks(self.env))

    @property
    def klass(self) -> Hashable:
        """The job's class; its calls carry it unless they say otherwise."""
        return self.record.klass

    def call(self, target: str, vp: int, vd: int, klass: Hashable = None, *,
             prefilled: bool = False) -> simpy.Event:
        """Send a request to ``target`` (an engine or a pool) now; yield the
        event to wait until it finishes (its value is the :class:`Request`).
        ``prefilled``: its prompt's KV arrives with it (:meth:`Engine.call`)."""
        # the event is set just below: routing may name the engine before call returns
        record = CallRecord(target, None, None)  # type: ignore[arg-type]
        record.event = self.net.call(target, vp, vd, self.record.klass if klass is None else klass,
                                     routed=lambda engine: setattr(record, "engine", engine.name),
                                     prefilled=prefilled)
        self.record.calls.append(record)
        return record.event

    def all(self, events: Iterable[simpy.Event]) -> simpy.Event:
        """An event that fires when every one of ``events`` has (fork-join)."""
        return simpy.AllOf(self.env, list(events))

    def delay(self, seconds: float) -> simpy.Event:
        """An event ``seconds`` from now (a tool call, a network transfer)."""
        validation.time_point("delay", seconds)
        return self.env.timeout(to_ticks(seconds))


Workflow = Callable[[JobContext], Generator[simpy.Event, object, object]]


def start_jobs(net: Network, workflow: Workflow, rate: Optional[float] = None, *,
               times: Optional[Iterable[float]] = None, klass: Hashable = None,
               seed: int = 0, count: Optional[int] = None) -> List[JobRecord]:
    """Start a job of ``workflow`` at Poisson times of ``rate`` per second (or
    at the given ``times``, in seconds) and return the list its records join.

    The arrival times and every job's ``ctx.rng`` come from one numpy
    generator seeded with ``seed``, so a run repeats exactly.
    """
    if (rate is None) == (times is None):
        raise ValueError("give exactly one of rate (jobs per second) and times")
    validation.seed("seed", seed)
    if count is not None:
        validation.positive_int("count", count)
    rng = np.random.default_rng(seed)
    if rate is not None:
        validation.arrival_rate("rate", rate)
        clock: Iterator[float] = _poisson_times(rate, rng)
        net.source(rate, count)  # jobs, each at least one request
    else:
        assert times is not None  # exactly one of rate and times, checked above
        listed = list(times)
        net.source(None, len(listed) if count is None else min(count, len(listed)))
        clock = iter(listed)
    if count is not None:
        clock = (t for t, _ in zip(clock, range(count)))
    records: List[JobRecord] = []
    net.env.process(_source(net, workflow, clock, klass, rng, records))
    return records


def _poisson_times(rate: float, rng: np.random.Generator) -> Iterator[float]:
    t = 0.0
    while True:
        t += float(rng.exponential(1.0 / rate))
        yield t


def _source(net: Network, workflow: Workflow, clock: Iterator[float], klass: Hashable,
            rng: np.random.Generator, records: List[JobRecord]
            ) -> Generator[simpy.Event, object, None]:
    env = net.env
    for jid, time in enumerate(clock):
        if not (yield from wait_until(env, time, net.until, "job times")):
            return
        record = JobRecord(jid, klass, now_ticks(env))
        records.append(record)
        env.process(_job(JobContext(net, record, rng), workflow))


def _job(ctx: JobContext, workflow: Workflow) -> Generator[simpy.Event, object, None]:
    try:
        yield from workflow(ctx)
    except RequestIgnored as error:  # the job cannot go on: it ends unfinished
        ctx.record.failed = str(error)
        return
    ctx.record.end = now_ticks(ctx.env)


def job_summary(records: List[JobRecord]) -> Dict[str, Any]:
    """Jobs started, finished and failed (a call that could never fit its
    engine's KV cache), end-to-end percentiles and mean (seconds), and calls
    per finished job."""
    done = [r for r in records if r.end is not None]
    e2e = [t for t in (r.e2e for r in done) if t is not None]  # every one: done jobs ended
    out: Dict[str, Any] = {"jobs": len(records), "jobs_completed": len(done),
                           "jobs_failed": sum(r.failed is not None for r in records)}
    out.update(named_percentiles("job_e2e", e2e))
    out["job_e2e_mean"] = float(np.mean(e2e)) if e2e else None
    out["calls_per_job"] = float(np.mean([len(r.calls) for r in done])) if done else None
    return out
