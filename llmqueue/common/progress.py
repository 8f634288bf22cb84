"""Progress bars on a terminal (tqdm), never in pipes, logs or ``--json``.

:func:`bar` makes every bar the package shows: on stderr, and only when
stderr is a terminal (or the caller forces it).  Long single runs show theirs
only inside :func:`runs_shown`, which the command line opens around an
experiment when it prints a table to a terminal (and a scenario script around
its ``main``); the simulation then reports simulated time against the horizon
in whole seconds (or arrivals against the count).  Inside that block the
bars an experiment keeps quiet elsewhere (``shown=False``: its sweep of many
runs, its plan's replications) show too, and a run's own bar opened under
another bar appears only once the run has lasted :data:`NESTED_DELAY`
seconds, so many short runs under one bar do not flicker.  Only the process
that opened the block shows bars: workers of a process pool stay quiet.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator, Optional

#: The process whose runs are shown (0: none), set by :func:`runs_shown`.
_RUNS_SHOWN: ContextVar[int] = ContextVar("llmqueue_runs_shown", default=0)
#: Seconds a bar opened while another is on screen waits before it appears.
NESTED_DELAY = 2.0
#: A bar of simulated seconds: whole seconds against the horizon (``323/600 s``).
SECONDS_FORMAT = "{l_bar}{bar}| {n:.0f}/{total:.0f} s [{elapsed}<{remaining}]"


def bar(total: Optional[float], unit: str, shown: Optional[bool] = None,
        desc: Optional[str] = None, leave: bool = True) -> Any:
    """A tqdm bar on stderr; ``shown=None``: only when stderr is a terminal;
    ``shown=False``: only inside :func:`runs_shown` (the command line or a
    scenario script printing to a terminal).  ``unit="s"`` with a ``total``
    counts simulated seconds, shown whole."""
    from tqdm import tqdm
    if shown is None:
        visible = sys.stderr.isatty()
    else:
        visible = shown or runs_are_shown()
    nested = visible and any(not getattr(other, "disable", True)
                             for other in list(getattr(tqdm, "_instances", ())))
    seconds = unit == "s" and total is not None
    return tqdm(total=total, unit=unit, disable=not visible, file=sys.stderr, desc=desc,
                leave=leave, dynamic_ncols=True, delay=NESTED_DELAY if nested else 0.0,
                bar_format=SECONDS_FORMAT if seconds else None)


@contextmanager
def runs_shown(on: bool = True) -> Iterator[None]:
    """Within this block, each simulation run shows a bar (when ``on``), in
    this process only."""
    token = _RUNS_SHOWN.set(os.getpid() if on else 0)
    try:
        yield
    finally:
        _RUNS_SHOWN.reset(token)


def runs_are_shown() -> bool:
    """Whether simulation runs should show a bar now (see :func:`runs_shown`)."""
    return _RUNS_SHOWN.get() == os.getpid()
