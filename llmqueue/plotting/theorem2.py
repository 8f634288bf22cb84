"""The figure of Theorem 2 (docs/model.md §9.2): backlogs below and above capacity, and
the measured backlog slope against the load beside the fluid rate."""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from llmqueue.engine.results import Result
from llmqueue.plotting.style import (DATA_ZORDER, decorate, label, panels_for, reference_vline,
                                     suptitle)


COLOURS = ("tab:blue", "tab:red", "tab:green", "tab:purple")


def runs_over_time(ax: Axes, rows: Mapping[str, Result], shown: Sequence[str], series: str,
                   slope_text: str, mid_run: bool = False) -> None:
    """Draw ``series`` (``"backlog"`` or ``"pending"``) over time of the runs
    ``rows[label]`` for each label of ``shown`` (their first seed, recorded
    with ``timeseries=True``), each beside a dashed line of its summary's
    ``fluid_slope`` (legend ``slope_text.format(slope)``): from the origin,
    or with ``mid_run`` from its value at mid-run (none when the slope is
    ``None``).  The count axis starts at 0."""
    for name, colour in zip(shown, COLOURS):
        result = rows[name]
        t, pending, backlog = result.timeseries()
        y = backlog if series == "backlog" else pending
        ax.step(t, y, where="post", color=colour, linewidth=1,
                label=f"{name} ({result.summary['rate']:.2f} req/s), first seed")
        slope = result.summary["fluid_slope"]
        if slope is not None and len(t):
            start = t[-1] / 2 if mid_run else 0.0
            level = float(np.interp(start, t, y)) if mid_run else 0.0
            ax.plot([start, t[-1]], [level, level + slope * (t[-1] - start)], color=colour,
                    linestyle="--", label=slope_text.format(slope))
    ax.set_ylim(bottom=0)


def plot_theorem2(rows: Dict[str, Result], shown: Sequence[str], capacity: float,
                  star: float, title: str, axes: Optional[Sequence[Axes]] = None) -> Figure:
    """Left: the backlog over time of the runs ``rows[label]`` for each label of
    ``shown`` (recorded with ``timeseries=True``) beside their fluid lines.
    Right: every row's measured slope (+- 2 SE over its seeds) against its load
    beside the fluid curve ``max(0, (load - 1) * capacity)`` (tokens/s), with
    the boundary at lambda* = ``star`` requests/s.  Summaries need ``rate``,
    ``fluid_slope``, ``load``, ``slope``, ``slope_se`` and ``seeds``.  Draws
    into the two ``axes`` when given; returns the figure."""
    fig, (left, right) = panels_for(axes, 2, panel=(6.5, 5.0))
    runs_over_time(left, rows, shown, "backlog", "fluid: {:.0f} tokens/s")
    decorate(left, "Backlog over time, below and above capacity", label("time", "s"),
             label("backlog", "unprocessed tokens"))

    loads = np.array([r.summary["load"] for r in rows.values()])
    slopes = np.array([r.summary["slope"] for r in rows.values()])
    errors = np.array([2 * r.summary["slope_se"] for r in rows.values()])
    grid = np.linspace(min(loads.min(), 0.5), max(loads.max(), 1.5), 200)
    right.plot(grid, np.maximum(0.0, (grid - 1) * capacity), color="black",
               label=r"fluid: max(0, $\lambda(m_p+m_d) - b_{max}/t_{b_{max}}$)")
    seeds = next(iter(rows.values())).summary["seeds"]
    right.errorbar(loads, slopes, yerr=errors, fmt="o", color="tab:red", capsize=3,
                   zorder=DATA_ZORDER, label=f"measured (mean of {seeds} seeds, +- 2 SE)")
    reference_vline(right, 1.0, f"Theorem 2 boundary: lambda* = {star:.2f} req/s")
    decorate(right, "Backlog slope over the second half of each run",
             label("load", "arrival rate / lambda*"), label("backlog slope", "tokens/s"))
    suptitle(fig, title)
    return fig
