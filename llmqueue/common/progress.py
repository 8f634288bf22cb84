"""Progress bars on a terminal (tqdm), never in pipes, logs or ``--json``.

:func:`bar` makes every bar the package shows: on stderr, and only when
stderr is a terminal (or the caller forces it).  Long single runs show theirs
only inside :func:`runs_shown`, which the command line opens around an
experiment when it prints a table to a terminal; the simulation then reports
simulated time against the horizon (or arrivals against the count).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator, Optional

_RUNS_SHOWN: ContextVar[bool] = ContextVar("llmqueue_runs_shown", default=False)


def bar(total: Optional[float], unit: str, shown: Optional[bool] = None,
        desc: Optional[str] = None, leave: bool = True) -> Any:
    """A tqdm bar on stderr; ``shown=None``: only when stderr is a terminal."""
    from tqdm import tqdm
    visible = sys.stderr.isatty() if shown is None else shown
    return tqdm(total=total, unit=unit, disable=not visible, file=sys.stderr, desc=desc,
                leave=leave, dynamic_ncols=True)


@contextmanager
def runs_shown(on: bool = True) -> Iterator[None]:
    """Within this block, each simulation run shows a bar (when ``on``)."""
    token = _RUNS_SHOWN.set(on)
    try:
        yield
    finally:
        _RUNS_SHOWN.reset(token)


def runs_are_shown() -> bool:
    """Whether simulation runs should show a bar now (see :func:`runs_shown`)."""
    return _RUNS_SHOWN.get()
