"""The SimPy processes of one inference engine.

* The GPU is a :class:`simpy.Resource` of capacity one, held by the scheduler
  for each busy period.
* The kmax pool is a :class:`simpy.Container` of slots.  An arrival that finds
  a free slot and nobody waiting takes it at once; otherwise it joins the FIFO
  waiting line, whose head a gatekeeper process admits as slots come back.
  Admission starts the request's process.
* Each request is a process that waits for its prefill phase, then its decode
  phase: it is woken at those two boundaries only; the engine gives its slot
  back when it finishes.
* The scheduler process forms each iteration's batch with the policy under the
  token budget and yields a timeout of ``t_b``.  When the policy is stationary
  and the next ``k`` iterations are provably identical (nothing is admitted,
  finishes or changes phase before the last of them starts), it yields one
  timeout of ``k * t_b`` instead (exact skip-ahead).
* A latency model that ``needs_context`` (the roofline) is given each
  iteration's :class:`~llmqueue.models.context.BatchContext` (docs/model.md
  §7.2), from the residents' running sums; a skipped run of such iterations (they differ:
  every decoder holds one more token each time) sums each one's own time, in
  order, and ends where stepping would.  With a KV cache they step.

With a KV cache (``kv=KV(...)``) the residents are a
:class:`~llmqueue.engine.kv_residents.MemoryResidents`, the scheduler process
is :func:`~llmqueue.engine.kv_scheduler.memory_scheduler` (the KV gate,
docs/model.md §6.3; skip-ahead only where memory cannot change the iterations) and arrivals
that can never fit are rejected as ``ignored`` with a warning (docs/model.md §6.1).

Order of events at one instant (docs/model.md §2): before choosing a batch the
scheduler waits for an *end-of-instant* event, scheduled behind every ordinary
event at the current time, so progress, releases, admissions and arrivals of
that instant are all settled first; it need not when the instant holds only
its own wake-ups that change nothing (:meth:`Engine.wake`).
"""

from __future__ import annotations

import warnings
from collections import deque
from typing import Deque, Dict, Generator, Hashable, List, Optional, Sequence, Tuple

import simpy

from llmqueue.common import validation
from llmqueue.common.units import UNLIMITED, ceil_div, to_ticks
from llmqueue.engine.clock import fail_quietly, later_this_instant, now_ticks
from llmqueue.engine.context_runs import context_run
from llmqueue.engine.errors import Diverged, RequestIgnored, Stalled
from llmqueue.engine.kv import KV, never_fit
from llmqueue.engine.kv_recorder import MemoryRecorder
from llmqueue.engine.kv_residents import Held
from llmqueue.engine.kv_scheduler import memory_scheduler
from llmqueue.engine.kv_swap import memory_residents
from llmqueue.engine.prefix_cache import check_request
from llmqueue.engine.recorder import Recorder
from llmqueue.engine.residents import Residents
from llmqueue.models.latency import LatencyModel, Staircase
from llmqueue.policies.builtin import BUILTIN, Policy, WholePrefill
from llmqueue.policies.view import Plan, Request, check_plan
from llmqueue.policies.wait import Wait
from llmqueue.theory.shapes import needs_context

#: SimPy runs URGENT (0) before NORMAL (1) events at one instant.  Routing
#: decisions come after both (every iteration end, release and admission of the
#: instant is settled), and batch choices come last.
ROUTING = 1.5
END_OF_INSTANT = 2


class Engine:
    """One inference server in a SimPy environment."""

    # Under 30 instance attributes: CPython 3.11 specializes only such instances' reads.

    def __init__(self, env: simpy.Environment, policy: Policy, *, bmax: Optional[int] = 128,
                 kmax: Optional[int] = 100, latency: Optional[LatencyModel] = None,
                 recorder: Optional[Recorder] = None, until: Optional[int] = None,
                 skip_ahead: bool = True, max_pending: Optional[int] = None,
                 name: str = "engine", kv: Optional[KV] = None,
                 check_invariants: bool = False) -> None:
        self.env = env
        self.name = name
        self.bmax = validation.optional_positive_int("bmax", bmax)
        self.kmax = validation.optional_positive_int("kmax", kmax)
        # a policy that ignores bmax (WAIT, docs/model.md §6.5) is gated with no budget
        self.budget = UNLIMITED if bmax is None or not policy.budgeted else bmax
        self.latency = latency if latency is not None else Staircase()
        if not callable(getattr(self.latency, "batch_time", None)):
            raise ValueError(f"latency must have a batch_time(decode, prefill, requests) "
                             f"method; got {self.latency!r}")
        policy.check_kv(kv)
        self.policy = policy.for_engine(self.latency, self.kmax)
        self.recorder = recorder if recorder is not None else Recorder(self.budget)
        self.until = until
        self.max_pending = validation.optional_positive_int("max_pending", max_pending)
        if kv is not None and not isinstance(kv, KV):
            raise ValueError(f"kv must be a KV(...) or None; got {kv!r}")
        self.kv = kv
        # with a KV cache, checking the invariants steps every iteration
        self.skip_ahead = (skip_ahead and self.policy.stationary
                           and not (kv is not None and check_invariants))
        slots = float("inf") if kmax is None else kmax
        self.gpu = simpy.Resource(env, capacity=1)
        self.pool = simpy.Container(env, capacity=slots, init=slots)
        self.waiting: Deque[Request] = deque()
        self.residents: Residents = Residents() if kv is None else memory_residents(kv)
        self.residents.serve(self)  # token timing; a read-only view for a user's policy
        #: the latency model reads each iteration's batch context (docs/model.md §7.2)
        self.contexts = needs_context(self.latency)
        # every plan is checked but the package's own policies' (a subclass is checked
        # too); WAIT's batches hold every decoder, so checking them would double a run
        self.check_plans = type(self.policy) not in tuple(BUILTIN.values()) + (Wait,)
        #: the policy walks residents in order (the KV view may then be cut short)
        self.fcfs = type(self.policy) in tuple(BUILTIN.values()) + (WholePrefill,)
        self.check_invariants = check_invariants
        self.last_starts: list = []  # the new starts of the last batch choice (KV cache)
        # the order the KV gate charges a plan's phases in (a one-phase policy's
        # plans hold one phase: the order is moot, and decodes-first is the fast one)
        self.prefill_first = (bool(getattr(self.policy, "prefill_first", False))
                              and bool(getattr(self.policy, "mixed", True)))
        self._ignored_warned = False
        self._ticks: Dict[Tuple[int, int, int], int] = {}
        self._arrival: Optional[simpy.Event] = None
        self._wake: Optional[simpy.Event] = None
        self.arrivals_over = False
        """Whether the workload can bring no further request (:meth:`end_arrivals`)."""
        self.settled: Optional[float] = None
        """After a settled instant (:meth:`wake`), when the next event after it happens."""
        self.horizon: Optional[float] = None
        """The same for the batch being chosen (:meth:`settle` moves it here)."""
        env.process(self._gatekeeper())
        if kv is None:
            env.process(self._scheduler())
        else:
            if self.recorder.memory is None:
                self.recorder.memory = MemoryRecorder(kv)
            env.process(memory_scheduler(self))

    # -- what the outside sees -------------------------------------------
    def submit(self, r: Request) -> None:
        """``r`` arrives now and joins the waiting line."""
        validation.token_count("prefill", r.vp)
        validation.token_count("decode", r.vd + r.early, minimum=1)  # output tokens
        if not self.policy.chunked and r.prefill_left > self.budget:
            raise ValueError(f"request {r.rid} has a prompt of {r.vp} tokens, which can never "
                             f"fit bmax={self.budget} with chunked=false; allowed: prompts "
                             f"<= bmax, or chunked=true")
        if type(r) is not Request:  # ids for prefix caching (docs/model.md §8.1)
            check_request(r, self.kv)
        r.arrival = now_ticks(self.env)
        if self.kv is not None:
            r.memory = Held()
            if not self.kv.fits_ever(r.vp, r.vd):
                self._ignore(r)
                return
            if self._wake is not None and not self._wake.triggered:
                self._wake.succeed()  # a policy idling on purpose waits for arrivals
        self.recorder.arrive(r.arrival, r.prefill_left + r.vd, r.vp, r.vd)  # the work it brings
        if not self.waiting and self.pool.level >= 1:
            self.pool.get(1)  # nobody is ahead: the slot is taken now
            self._admit(r)
        else:
            self.waiting.append(r)
            if self._arrival is not None and not self._arrival.triggered:
                self._arrival.succeed()
        if self.max_pending is not None and self.recorder.pending > self.max_pending:
            raise Diverged(now_ticks(self.env), self.recorder.pending)

    def end_arrivals(self) -> None:
        """No further request will arrive (a finite workload has arrived
        whole): a policy idling on purpose is woken to drain (docs/model.md §6.5)."""
        self.arrivals_over = True
        if self.kv is not None and len(self.residents) and self._wake is not None \
                and not self._wake.triggered:
            self._wake.succeed()

    @property
    def draining(self) -> bool:
        """Whether no resident can join before the next batch runs: arrivals
        are over (nobody then waits with a slot free), or every slot is taken."""
        return self.arrivals_over or self.pool.level < 1

    def _ignore(self, r: Request) -> None:
        """Reject ``r``, which can never fit the KV cache (docs/model.md §6.1)."""
        r.memory.ignored = True
        self.recorder.ignore(r)
        self.recorder.memory.ignore()
        if not self._ignored_warned and self.kv is not None:
            self._ignored_warned = True
            warnings.warn(never_fit(self.kv, r), stacklevel=3)

    def call(self, vp: int, vd: int, klass: Hashable = None, *,
             prefilled: bool = False) -> simpy.Event:
        """Submit a request of ``vp`` prefill and ``vd`` decode tokens now; the
        event returned fires with the :class:`Request` when its last token is
        done, or fails at once with :class:`RequestIgnored` if it can never fit
        the KV cache.  Ids number this engine's arrivals from 0.  ``prefilled``:
        its prompt's KV, made elsewhere, arrives with it: it holds it from its
        start (docs/model.md §6.1), reads it as context (§7.2), prefills nothing."""
        return self.send(Request(self.recorder.arrivals, vp, vd, klass, prefilled=prefilled))

    def send(self, r: Request) -> simpy.Event:
        """:meth:`call` for a request made by the caller (with prefix ids, docs/model.md §8.1)."""
        r.on_finished = self.env.event()
        self.submit(r)
        if r.memory is not None and r.memory.ignored:  # (submit warned of the first)
            return fail_quietly(self.env.event(), RequestIgnored(self.name, r.rid))

        def wait() -> Generator[simpy.Event, object, Request]:
            yield r.on_finished
            return r

        return self.env.process(wait())

    def cached_prefix(self, r: Request) -> int:
        """Hit tokens ``r`` would get here now, for routers (docs/model.md §8.6); 0 if no cache."""
        return getattr(self.residents, "cached_prefix", lambda _: 0)(r)

    @property
    def pending(self) -> int:
        """Requests in the system: residents plus waiting."""
        return self.recorder.pending

    @property
    def backlog(self) -> int:
        """Unprocessed tokens of all requests in the system, now."""
        self.recorder.commit(now_ticks(self.env))
        return self.recorder.backlog

    # -- processes -------------------------------------------------------
    def _gatekeeper(self) -> Generator[simpy.Event, object, None]:
        waiting = self.waiting
        while True:
            if not waiting:
                self._arrival = self.env.event()
                yield self._arrival
            yield self.pool.get(1)
            self._admit(waiting.popleft())

    def _admit(self, r: Request) -> None:
        env = self.env
        self.residents.admit(r, now_ticks(env))
        if r.prefill_left > 0:
            r.on_prefilled = env.event()
        if r.on_finished is None:
            r.on_finished = env.event()
        env.process(self._request(r))
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _request(self, r: Request) -> Generator[simpy.Event, object, None]:
        """One request's life after admission: its prefill phase, then its
        decode phase (its slot goes back when it finishes: :meth:`wake`)."""
        if r.on_prefilled is not None:
            yield r.on_prefilled
        yield r.on_finished

    def wake(self, now: int, prefilled: Sequence[Request], finished: Sequence[Request]) -> None:
        """At the end of a run at ``now``: wake the requests whose prefill
        ended and those that finished, giving the finished ones' slots back to
        the pool (of a finite pool: a put into a full pool of ``inf`` slots
        would wait forever).  When nothing else happens at ``now``, nobody
        waits for a slot and nobody but its own process waits for a finished
        request, processing these wake-ups and returns changes nothing the
        next batch reads: the instant is then :attr:`settled` and the next
        batch is chosen at once."""
        following = self.env.peek()
        quiet = following != now and not (finished and self.waiting)
        for r in prefilled:
            event = r.on_prefilled
            if event is not None and not event.triggered:  # a re-prefill after a preemption
                event.succeed()
        for r in finished:
            event = r.on_finished
            quiet = quiet and len(event.callbacks) == 1
            event.succeed()
        if self.kmax is not None:
            for _ in finished:
                self.pool.put(1)
        self.settled = following if quiet else None

    def next_event(self) -> float:
        """When the next thing that can change the batch being chosen happens:
        the next event of the environment, or, in a settled instant, the next
        one after it."""
        return self.env.peek() if self.horizon is None else self.horizon

    def settle(self) -> Optional[simpy.Event]:
        """In a scheduler process before a batch choice: the event to yield to
        wait until everything else of this instant is done, or ``None`` when
        nothing else happens now or the instant is settled (:meth:`wake`)."""
        self.horizon, self.settled = self.settled, None
        if self.horizon is None and self.env.peek() == self.env.now:
            return later_this_instant(self.env, END_OF_INSTANT)
        return None

    def sleep(self) -> Generator[simpy.Event, object, None]:
        """In the scheduler process (``yield from``): wait for the next admission
        (or, with a KV cache, the next arrival)."""
        self._wake = self.env.event()
        yield self._wake
        self._wake = None

    def _batch_ticks(self, decode: int, prefill: int, requests: int) -> int:
        key = (decode, prefill, requests)
        t = self._ticks.get(key)
        if t is None:
            t = self._positive(to_ticks(self.latency.batch_time(decode, prefill, requests)),
                               decode, prefill)
            if len(self._ticks) > 100_000:
                self._ticks.clear()
            self._ticks[key] = t
        return t

    def _plan_ticks(self, decode: int, prefill: int, requests: int,
                    plan: Optional[Plan] = None) -> int:
        """Length of one iteration of ``plan`` (``decode``, ``prefill`` tokens of
        ``requests`` requests), in ticks: with its context for a context model."""
        if not self.contexts or plan is None:
            return self._batch_ticks(decode, prefill, requests)
        seconds = self.latency.batch_time(  # type: ignore[call-arg]
            decode, prefill, requests, context=self.residents.context(plan))
        return self._positive(to_ticks(seconds), decode, prefill)

    def _positive(self, t: int, decode: int, prefill: int) -> int:
        if t <= 0:
            raise ValueError(f"latency model {self.latency!r} gave a batch time <= 0 "
                             f"for {decode} decode + {prefill} prefill tokens; "
                             "allowed: > 0 seconds")
        return t

    def repeats(self, plan: Plan, t: int) -> int:
        """How many identical iterations of ``plan`` (``t`` ticks each) the
        scheduler may run as one: the residents' own bound (nobody changes
        phase), cut where a free slot could admit an arrival and at the horizon."""
        env = self.env
        k = self.residents.repeats(plan)
        if k > 1 and self.pool.level >= 1:
            # a free slot: an arrival could be admitted and change the next batch
            nxt = self.next_event()
            if nxt != float("inf"):
                k = min(k, ceil_div(int(nxt) - now_ticks(env), t))
        if k > 1 and self.until is not None:
            k = min(k, (self.until - now_ticks(env) - 1) // t)
        return max(k, 1)

    #: Length of one iteration of a batch (with its plan: a context model sees it), in ticks.
    batch_ticks = _plan_ticks

    def _scheduler(self) -> Generator[simpy.Event, object, None]:
        env, residents, recorder = self.env, self.residents, self.recorder
        policy, budget = self.policy, self.budget
        choose = residents.chooser(policy)  # its plan (a user's reads a read-only view)
        gpu_request = None
        while True:
            wait = self.settle()
            if wait is not None:
                yield wait
            if not len(residents):
                if gpu_request is not None:
                    self.gpu.release(gpu_request)
                    gpu_request = None
                yield from self.sleep()
                continue
            if gpu_request is None:
                gpu_request = self.gpu.request()
                yield gpu_request
                continue
            residents.settle()
            plan = choose(residents, budget)
            if self.check_plans:
                check_plan(plan, residents, budget, policy.name)
            if not plan:
                raise Stalled(f"policy {policy.name!r} formed an empty batch at "
                              f"t={env.now / 1e9:.6f} s while {len(residents)} residents "
                              "have work; the run can never make progress")
            decode = len(plan.decode)
            prefill = 0
            for _, tokens in plan.prefill:
                prefill += tokens
            requests = decode + len(plan.prefill)
            start: int = env.now  # type: ignore[assignment]  # ticks: a whole number
            if self.contexts:
                times: Optional[List[int]] = context_run(self, plan, decode, prefill, requests)
                t, k = times[0], len(times)  # type: ignore[index, arg-type]
                if k == 1:
                    times = None
            else:
                t = self._batch_ticks(decode, prefill, requests)
                k = self.repeats(plan, t) if self.skip_ahead else 1
                times = None
            recorder.start_run(start, t, k, plan, decode, prefill, requests, residents.demand,
                               times)
            yield env.timeout(k * t if times is None else sum(times))
            prefilled, finished = residents.apply(plan, k, start, t, times)
            now: int = env.now  # type: ignore[assignment]
            recorder.commit(now)
            for r in finished:
                recorder.finish(now, r)
            self.wake(now, prefilled, finished)
