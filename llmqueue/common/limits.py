"""What one run may ask of the machine, and how to raise it.

A rate of ``1e308`` requests per second, or a gap of ``1e-300`` s, is a valid
number but asks for more requests than memory holds: the run would work
until the machine gives out.  These limits turn such settings into an error
before anything runs, naming the limit and the environment variable that
raises it (for the rare run that really needs more).
"""

from __future__ import annotations

import os
from typing import Optional

#: Requests one run (an engine or a network) may bring, by default.
MAX_REQUESTS = 10**7
#: Runs one sweep may hold, by default.
MAX_RUNS = 10**5


def limit(name: str, default: int) -> int:
    """The limit ``name``: the environment variable ``LLMQUEUE_<NAME>`` when set
    (an integer >= 1), else ``default``."""
    variable = f"LLMQUEUE_{name.upper()}"
    text = os.environ.get(variable)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{variable} must be an integer >= 1; got {text!r}")
    return value


def check_requests(rate: Optional[float], horizon: Optional[float],
                   count: Optional[int] = None) -> None:
    """Refuse a run expected to bring more than ``MAX_REQUESTS`` requests:
    ``rate * horizon`` of an endless stream, or ``count`` of a finite one."""
    cap = limit("max_requests", MAX_REQUESTS)
    expected = None
    if count is not None:
        expected = float(count)
    elif rate is not None and horizon is not None:
        expected = rate * horizon
    if expected is not None and expected > cap:
        raise ValueError(f"this run would bring about {expected:.3g} requests (rate x horizon "
                         f"or count); the limit is {cap:,} requests per run: lower the rate "
                         "or the horizon, or raise the limit with LLMQUEUE_MAX_REQUESTS=N")


def check_runs(runs: int) -> None:
    """Refuse a sweep of more than ``MAX_RUNS`` runs."""
    cap = limit("max_runs", MAX_RUNS)
    if runs > cap:
        raise ValueError(f"this sweep holds {runs:,} runs; the limit is {cap:,}: use fewer "
                         "values or seeds, or raise the limit with LLMQUEUE_MAX_RUNS=N")
