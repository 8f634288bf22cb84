"""Playing multi-turn sessions (docs/model.md §8.5) into an engine: closed loops.

:func:`feed_sessions` starts a SimPy process that starts each session of a
:class:`~llmqueue.models.sessions.Sessions` at its time; a session sends its
first turn at once and each later turn ``think`` seconds after the previous
one finished.  A turn that can never fit the engine's KV cache (its event
fails with :class:`~llmqueue.engine.errors.RequestIgnored`) ends its session,
counted as cut.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Callable, Dict, Generator, Iterable, Optional

import simpy

from llmqueue.common.units import to_ticks
from llmqueue.engine.clock import PAST_END, delay_until, now_ticks
from llmqueue.engine.errors import RequestIgnored
from llmqueue.engine.prefix_cache import prefix_request
from llmqueue.models.sessions import Session
from llmqueue.policies.view import Request

Send = Callable[[Request], simpy.Event]


@dataclass
class SessionLog:
    """What the sessions did so far (it fills as the run goes):
    ``sessions_started`` (their first turn was sent), ``sessions_completed``
    (every turn finished), ``sessions_cut`` (ended by a turn that could never
    fit the KV cache, docs/model.md §8.5) and ``turns_sent`` (requests sent)."""

    sessions_started: int = 0
    sessions_completed: int = 0
    sessions_cut: int = 0
    turns_sent: int = 0

    def figures(self) -> Dict[str, int]:
        """The four counts, by name."""
        return asdict(self)


def feed_sessions(env: simpy.Environment, send: Send, sessions: Iterable[Session],
                  until: Optional[int] = None, hash_block: Optional[int] = None,
                  on_end: Optional[Callable[[], None]] = None) -> SessionLog:
    """Play ``sessions`` (scripts, such as a
    :class:`~llmqueue.models.sessions.Sessions`) into ``send`` (such as
    :meth:`Engine.send <llmqueue.engine.processes.Engine.send>`, which returns
    an event that fires when the request finishes, or fails with
    :class:`RequestIgnored`) and return the :class:`SessionLog` that counts
    what they do as the run goes.

    Each turn becomes :func:`~llmqueue.engine.prefix_cache.prefix_request`
    with the turn's sizes and ids, ``session`` = the session's ``sid``, and
    ``hash_block`` (default: ``sessions.hash_block``); requests are numbered
    from 0 in the order they are sent.  Nothing is sent at or after ``until``
    (ticks; ``None``: no end): a session whose next turn would come then ends
    there.  ``on_end`` is called once, when every session has started and
    none may send another turn (no further request will come: for
    :meth:`Engine.end_arrivals <llmqueue.engine.processes.Engine.end_arrivals>`).
    """
    h = getattr(sessions, "hash_block", None) if hash_block is None else hash_block
    log = SessionLog()
    rids = itertools.count()
    live = 0  # sessions started that may still send a turn
    started_all = False  # the scripts ran out before any horizon

    def ended() -> None:
        nonlocal live
        live -= 1
        if started_all and not live and on_end is not None:
            on_end()

    def play(session: Session) -> Generator[simpy.Event, object, None]:
        last = len(session.turns) - 1
        if last < 0:  # a script of no turn: nothing to send
            ended()
        for k, turn in enumerate(session.turns):
            if k:
                at = now_ticks(env) + to_ticks(turn.think)
                if until is not None and at >= until:
                    ended()
                    return
                if at > now_ticks(env):
                    yield env.timeout(at - now_ticks(env))
            done = send(prefix_request(next(rids), turn.prefill, turn.decode, None, turn.blocks,
                                       turn.out_blocks, h, session=session.sid))
            log.turns_sent += 1
            if k == last:
                ended()  # it sends nothing more
            try:
                yield done
            except RequestIgnored:
                log.sessions_cut += 1
                if k < last:
                    ended()
                return
        log.sessions_completed += 1

    def source() -> Generator[simpy.Event, object, None]:
        nonlocal live, started_all
        for session in sessions:
            wait = delay_until(env, session.start, until, "session starts")
            if wait is PAST_END:
                return
            if wait is not None:
                yield wait
            log.sessions_started += 1
            live += 1
            env.process(play(session))
        started_all = True
        if not live and on_end is not None:
            on_end()

    env.process(source())
    return log
