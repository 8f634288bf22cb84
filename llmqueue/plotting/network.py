"""Figures of multi-engine runs: backlogs per engine, load against capacity,
job latencies, and latency against load."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, LogLocator, NullFormatter, ScalarFormatter

from llmqueue.engine.results import Result
from llmqueue.plotting.style import (DATA_ZORDER, decorate, label, panels_for, reference_hline,
                                     reference_vline, suptitle)


def plot_backlogs(panels: Sequence[Tuple[str, Dict[str, Result]]], title: str,
                  unit: str = "s", axes: Optional[Sequence[Axes]] = None) -> Figure:
    """One panel per ``(name, {engine: result})`` run, stacked on a shared time
    axis (in ``unit``): each engine's backlog (unprocessed tokens) over time,
    and their sum drawn black when an engine is called ``total``; counts
    written 500k, 1.5M (no ``1e6`` offset to miss above the axis).  Draws into
    ``axes`` (one per panel) when given; returns the figure."""
    fig, axs = panels_for(axes, len(panels), column=True, sharex=True, panel=(10.0, 3.6))
    for ax, (name, results) in zip(axs, panels):
        for engine, result in results.items():
            t, _, backlog = result.timeseries()
            style = {"color": "black", "linewidth": 1.6} if engine == "total" else \
                {"linewidth": 1.0, "alpha": 0.8}
            ax.step(t, backlog, where="post", label=engine, **style)
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(EngFormatter(sep=""))
        decorate(ax, name, None, label("backlog", "tokens"))
    axs[-1].set_xlabel(label("time", unit))
    suptitle(fig, title)
    return fig


def plot_agents(loads: Dict[str, Tuple[float, float, float]], e2e: Sequence[float],
                title: str, axes: Optional[Sequence[Axes]] = None) -> Figure:
    """Left: each engine's measured token load and GPU busy fraction beside the
    expected load (``loads[engine] = (measured, expected, busy)``), all as
    fractions of capacity.  Right: the distribution of the job end-to-end
    times ``e2e`` (s).  Draws into the two ``axes`` when given; returns the
    figure."""
    fig, (left, right) = panels_for(axes, 2)
    names = list(loads)
    x = np.arange(len(names))
    measured, expected, busy = (np.array([loads[n][i] for n in names]) for i in range(3))
    left.bar(x - 0.2, measured, 0.4, label="token load, measured")
    left.bar(x + 0.2, busy, 0.4, label="GPU busy fraction", color="tab:orange", alpha=0.7)
    left.scatter(x - 0.2, expected, color="black", marker="_", s=600, zorder=DATA_ZORDER,
                 label="token load, expected (rate x tokens / capacity)")
    reference_hline(left, 1.0, "capacity")
    left.set_xticks(x, names)
    left.set_ylim(0, 1.6)
    decorate(left, "Per-engine load against capacity", None,
             label("load", "fraction of capacity bmax / t_bmax"))
    values = np.sort(np.asarray(e2e, dtype=float))
    right.step(values, np.arange(1, len(values) + 1) / len(values), where="post",
               label="finished jobs")
    for q, dash in ((50, ":"), (99, "--")):
        v = float(np.percentile(values, q))
        reference_vline(right, v, f"p{q} = {v:.1f} s", linestyle=dash)
    right.set_ylim(0, 1.02)
    decorate(right, "Job latency (distribution)", label("job end-to-end time", "s"),
             label("finished jobs at or below", "fraction"))
    suptitle(fig, title)
    return fig


def plot_against_load(loads: Sequence[float], curves: Dict[str, Dict[str, List[float]]],
                      limits: Dict[str, float], title: str,
                      axes: Optional[Sequence[Axes]] = None) -> Figure:
    """One panel per figure of ``curves[mode]`` (e.g. TTFT p99, TPOT p99, in
    seconds) against the load, a line per mode, and each mode's load limit
    ``limits[mode]`` as a dotted vertical line; a panel whose values span more
    than 5x is drawn on a log scale.  Draws into ``axes`` (one per figure)
    when given; returns the figure."""
    figures = list(next(iter(curves.values())))
    fig, axs = panels_for(axes, len(figures))
    for ax, figure in zip(axs, figures):
        for mode, series in curves.items():
            line, = ax.plot(loads, series[figure], marker="o", label=mode)
            if mode in limits:
                reference_vline(ax, limits[mode], f"{mode} limit (theory) = {limits[mode]:.2f}",
                                color=line.get_color())
        values = [v for c in curves.values() for v in c[figure] if v]
        if values and max(values) > 5 * min(values):  # log scale only for a wide range
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(ScalarFormatter())
            ax.yaxis.set_minor_formatter(NullFormatter())
        elif values:
            ax.set_ylim(0, 1.5 * max(values))
        decorate(ax, figure, label("load", "fraction of the colocated lambda*"),
                 label(figure, "s"), grid="both")
    suptitle(fig, title)
    return fig
