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
#: Engines one network may hold, and the largest pool a capacity plan
#: searches, by default (routing costs grow with the pool: 1,024 engines at
#: half load take about 13 s of wall time per 20 simulated seconds).
MAX_ENGINES = 1024
#: Cells one heat map may draw, by default (each cell is written out: 20 x 20
#: take about 4 s and 0.3 GB, 50 x 50 about 14 s and 1.4 GB).
MAX_CELLS = 400


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
                   count: Optional[int] = None, initial: int = 0) -> None:
    """Refuse a run expected to bring more than ``MAX_REQUESTS`` requests:
    ``initial`` at time 0 plus ``rate * horizon`` of an endless stream, or
    ``count`` of a finite one (its initial ones included)."""
    cap = limit("max_requests", MAX_REQUESTS)
    expected = None
    if count is not None:
        expected = float(count)
    elif rate is not None and horizon is not None:
        expected = rate * horizon + initial
    elif initial:
        expected = float(initial)
    if expected is not None and expected > cap:
        raise ValueError(f"this run would bring about {expected:.3g} requests (initial + rate "
                         f"x horizon, or count); the limit is {cap:,} requests per run: lower "
                         "initial, the rate or the horizon, or raise the limit with "
                         "LLMQUEUE_MAX_REQUESTS=N")


def check_runs(runs: int) -> None:
    """Refuse a sweep of more than ``MAX_RUNS`` runs."""
    cap = limit("max_runs", MAX_RUNS)
    if runs > cap:
        raise ValueError(f"this sweep holds {runs:,} runs; the limit is {cap:,}: use fewer "
                         "values or seeds, or raise the limit with LLMQUEUE_MAX_RUNS=N")


def check_engines(engines: int, what: str = "this network") -> None:
    """Refuse ``engines`` engines in one network (or one plan's pool) beyond
    ``MAX_ENGINES``; ``what`` names what would hold them."""
    cap = limit("max_engines", MAX_ENGINES)
    if engines > cap:
        raise ValueError(f"{what} would hold {engines:,} engines; the limit is {cap:,}: use "
                         "fewer engines (a plan: a lower rate), or raise the limit with "
                         "LLMQUEUE_MAX_ENGINES=N")


def check_cells(columns: int, rows: int) -> None:
    """Refuse a heat map of more than ``MAX_CELLS`` cells."""
    cap = limit("max_cells", MAX_CELLS)
    if columns * rows > cap:
        raise ValueError(f"this heat map has {columns:,} x {rows:,} = {columns * rows:,} cells; "
                         f"the limit is {cap:,}: draw fewer values of its two keys (lines with "
                         "one --x key), or raise the limit with LLMQUEUE_MAX_CELLS=N")
