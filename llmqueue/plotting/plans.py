"""Several capacity plans side by side (``llmqueue plan --grid``): one bar per
configuration, in the order of :func:`~llmqueue.planning.compare.rank` (the
cheapest that meets the SLO first), coloured by GPU type."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from llmqueue.planning.compare import RANKINGS, Configuration
from llmqueue.plotting.style import (DATA_ZORDER, GRID_ALPHA, decorate, figure_for, label,
                                     room_for_legend)

#: Bars' colours, one per GPU type in order of appearance.
COLOURS = [f"C{i}" for i in range(10)]


def _cost(c: Configuration, by: str) -> Optional[str]:
    """The cost a bar is annotated with (the one ranked by, else $/h)."""
    if by == "per_million_output" and c.per_million_output is not None:
        return f"${c.per_million_output:.3g}/M"
    return None if c.per_hour is None else f"${c.per_hour:.3g}/h"


def plot_plans(configs: Sequence[Configuration], rate: Optional[float] = None,
               by: str = "per_gpu", title: Optional[str] = None,
               ax: Optional[Axes] = None) -> Figure:
    """One bar per planned configuration of ``configs`` (skipped ones left
    out), in their order: the GPUs ``K_min * tp`` that ``rate`` requests/s
    need when a rate is given, else the goodput per GPU (req/s); coloured by
    GPU type (the legend), annotated with the cost when priced, and a cross at
    0 for a configuration that does not meet the SLO.  ``by`` (a key of
    :data:`~llmqueue.planning.compare.RANKINGS`) names the order in the x
    label.  Draws into ``ax`` when given; returns the figure."""
    planned = [c for c in configs if c.skipped is None]
    fig, ax = figure_for(ax, (max(6.0, 1.1 * len(planned) + 3.0), 5.0))
    kinds: Dict[str, str] = {}
    for c in planned:
        kinds.setdefault(c.gpu or "no GPU named", COLOURS[len(kinds) % len(COLOURS)])
    x = np.arange(len(planned))
    values: List[float] = []
    for i, c in enumerate(planned):
        value = (c.gpus if rate is not None else c.per_gpu) if c.meets else None
        kind = c.gpu or "no GPU named"
        if value is None:
            ax.plot([i], [0], "x", color="black", markersize=9, zorder=DATA_ZORDER,
                    clip_on=False, label="does not meet the SLO")
            values.append(0.0)
            continue
        ax.bar(i, value, 0.6, color=kinds[kind], zorder=DATA_ZORDER - 1, label=kind)
        values.append(float(value))
        cost = _cost(c, by)
        if cost is not None:
            ax.annotate(cost, (i, value), textcoords="offset points", xytext=(0, 3),
                        ha="center", fontsize=8)
    ax.set_xticks(x, [f"{i + 1}. {c.label}" if c.meets else f"- {c.label}"
                      for i, c in enumerate(planned)], rotation=25, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(planned) - 0.4)
    if rate is not None:
        what = f"GPUs for {rate:g} req/s"
        ylabel = label(f"GPUs for {rate:g} req/s", "K_min x tp")
    else:
        what = "Goodput per GPU"
        ylabel = label("goodput per GPU", "req/s")
    room_for_legend(ax, max(values, default=0.0), len(kinds) + 1)
    decorate(ax, f"{what} by configuration" if title is None else title,
             label("configuration", f"ranked by {RANKINGS.get(by, by)}"), ylabel, grid=None)
    ax.grid(alpha=GRID_ALPHA, axis="y")
    if rate is not None:  # whole GPUs
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    return fig
