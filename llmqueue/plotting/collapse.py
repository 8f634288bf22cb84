"""Figure of a prefix cache started empty and with a backlog: the hit ratio
and pending requests over time, per configuration."""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from llmqueue.plotting.style import decorate, label, panels_for, reference_hline, suptitle

TIME = label("time", "s")


class Start(NamedTuple):
    """One start's series: the hit ratio per window and pending at each change."""

    name: str
    """Its legend text."""
    hit_t: np.ndarray
    """Window centres (s)."""
    hit: np.ndarray
    """Hit ratio per window (NaN: no start in it)."""
    pending_t: np.ndarray
    """Times (s) pending changed."""
    pending: np.ndarray
    """Pending requests from each time on."""


class Panel(NamedTuple):
    """One configuration's two panels."""

    title: str
    """Its heading."""
    starts: Sequence[Start]
    """Its starts, drawn in this order."""
    ideal: Optional[float] = None
    """The hit ratio with every prefix cached (a reference line), if any."""


def plot_collapse(columns: Sequence[Panel], title: str, width: float,
                  axes: Optional[Sequence[Axes]] = None) -> Figure:
    """Per configuration, the hit ratio of the requests whose first
    start falls in each window of ``width`` s and, under it, pending requests
    over time, one line per start, with the ideal hit ratio as a reference;
    the configurations stacked.  Draws into the ``2 len(columns)`` ``axes``
    when given (a configuration's hit panel, then its pending panel); returns
    the figure."""
    fig, grid = panels_for(axes, 2 * len(columns), column=True, panel=(10.0, 2.7))
    for j, column in enumerate(columns):
        hit, pending = grid[2 * j], grid[2 * j + 1]
        for start in column.starts:
            line = hit.plot(start.hit_t, start.hit, linewidth=1.5, label=start.name)[0]
            pending.step(start.pending_t, start.pending, where="post", linewidth=1.3,
                         color=line.get_color(), label=start.name)
        if column.ideal is not None:
            reference_hline(hit, column.ideal, f"every prefix cached: {column.ideal:.3f}")
        hit.set_ylim(0, 1.0)
        pending.set_ylim(bottom=0)
        end = max((float(x.pending_t[-1]) for x in column.starts if x.pending_t.size),
                  default=1.0)
        for ax in (hit, pending):
            ax.set_xlim(0, end)
        decorate(hit, f"Hit ratio in {width:g} s windows, {column.title}", TIME,
                 label("hit ratio", "by first start"), outside=False)
        decorate(pending, f"Pending requests, {column.title}", TIME,
                 label("pending", "requests"), outside=False)
    suptitle(fig, title)
    return fig


__all__ = ["Panel", "Start", "plot_collapse"]
