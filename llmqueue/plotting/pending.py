"""Figures of single-engine runs: pending requests over time (still, zoomed
and animated) and the latency distributions of the finished requests."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np
from matplotlib.animation import FuncAnimation
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from llmqueue.engine.results import Result
from llmqueue.plotting.style import (LEGEND_SIZE, decorate, figure_for, label, panels_for,
                                     place_legend, reference_hline, room_for_legend, suptitle)

TIME = label("time", "s")
PENDING = label("pending requests", "resident + waiting")


def plot_pending(rows: Sequence[Tuple[str, Result]], title: str, kmax: Optional[int] = None,
                 log: bool = False, until: Optional[float] = None,
                 top: Optional[float] = None, ax: Optional[Axes] = None) -> Figure:
    """Pending requests over time, one step line per ``(label, result)`` run
    (recorded with ``timeseries=True``); ``kmax`` drawn as a light dashed line
    under the data (above it, requests wait for a slot).  ``log`` puts the
    count on a symlog scale, ``until`` cuts the time axis (s) and ``top`` the
    count axis.  Draws into ``ax`` when given; returns the figure."""
    fig, ax = figure_for(ax)
    peak = 0.0
    for name, result in rows:
        t, pending, _ = result.timeseries()
        ax.step(t, pending, where="post", label=name, linewidth=1.4)
        peak = max(peak, float(pending.max(initial=0)))
    if kmax is not None:
        reference_hline(ax, kmax, f"kmax = {kmax} (above: waiting for a slot)")
        peak = max(peak, kmax)
    if log:
        ax.set_yscale("symlog", linthresh=10)
    ax.set_ylim(0, top)
    if top is None and not log:
        room_for_legend(ax, peak, len(rows) + (kmax is not None))
    if until is not None:
        ax.set_xlim(0, until)
    decorate(ax, title, TIME, PENDING, outside=True if log else None)  # log: data everywhere
    return fig


def plot_pending_zoom(rows: Sequence[Tuple[str, Result]], title: str, top: Optional[float],
                      titles: Tuple[str, str] = ("All runs", "Zoom"),
                      axes: Optional[Sequence[Axes]] = None) -> Figure:
    """Two panels of :func:`plot_pending`: every run at full scale (left) and
    the same runs with the count axis cut at ``top`` (right), titled
    ``titles`` under the figure's ``title``; the legend is the left panel's.
    Draws into the two ``axes`` when given; returns the figure."""
    fig, (left, right) = panels_for(axes, 2, panel=(6.5, 5.0))
    plot_pending(rows, titles[0], ax=left)
    plot_pending(rows, titles[1], top=top, ax=right)
    legend = right.get_legend()
    if legend is not None:  # the zoom is full of data: one legend, left
        legend.remove()
    suptitle(fig, title)
    return fig


def plot_latency_cdfs(rows: Sequence[Tuple[str, Result]], title: str,
                      axes: Optional[Sequence[Axes]] = None) -> Figure:
    """Empirical CDFs of TTFT (left) and TPOT (right) of the finished requests,
    one line per run, on logarithmic time axes; line styles keep coinciding
    curves apart.  Draws into the two ``axes`` when given; returns the figure."""
    fig, panels = panels_for(axes, 2)
    for ax, key, name in ((panels[0], "ttft", "time to first token"),
                          (panels[1], "tpot", "time per output token")):
        for i, (run, result) in enumerate(rows):
            values = np.sort(getattr(result, key))
            if values.size:
                ax.step(values, np.arange(1, values.size + 1) / values.size, where="post",
                        linestyle=("-", "--", "-.", ":")[i % 4], linewidth=2.2 - 0.3 * (i % 4),
                        label=f"{run} (p99 {np.percentile(values, 99):.3g} s)")
        ax.set_xscale("log")
        ax.set_ylim(0, 1.0)
        room_for_legend(ax, 1.0, len(rows))
        decorate(ax, name.capitalize(), label(name, "s, log scale"),
                 label("finished requests at or below", "fraction"), grid="both")
    suptitle(fig, title)
    return fig


def animate_pending(rows: Sequence[Tuple[str, Result]], title: str, note: str = "",
                    seconds: float = 10.0, fps: int = 8,
                    ax: Optional[Axes] = None) -> FuncAnimation:
    """Pending requests over time as an animation: the step lines of
    :func:`plot_pending` drawn progressively over ``seconds`` of playback at
    ``fps`` frames per second, each with its current value at its tip, the
    simulated time shown and ``note`` in a box.  Draws into ``ax`` when given;
    returns the animation (write it with :func:`~llmqueue.plotting.style.save`
    to a ``.gif``), the one figure function that returns no figure."""
    series = [(name, *result.timeseries()[:2]) for name, result in rows]
    end = max(t[-1] for _, t, _ in series)
    top = max(p.max() for _, _, p in series)
    own = ax is None
    fig, ax = figure_for(ax, figsize=(8, 4.5))
    lines = [ax.step([], [], where="post", label=name, linewidth=1.6)[0]
             for name, _, _ in series]
    tips = [ax.text(0, 0, "", color=line.get_color(), fontsize=LEGEND_SIZE, va="bottom")
            for line in lines]
    ax.set_xlim(0, end * 1.08)
    ax.set_ylim(0, top * 1.35)  # room for the clock and the note above the lines
    decorate(ax, title, TIME, PENDING, legend=False)
    place_legend(ax, outside=False, loc="upper left")
    clock = ax.text(0.99, 0.97, "", transform=ax.transAxes, ha="right", va="top")
    if note:
        ax.text(0.99, 0.88, note, transform=ax.transAxes, ha="right", va="top",
                fontsize=LEGEND_SIZE,
                bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "grey"})
    if own:  # lay out once, so the moving labels do not shift the axes between frames
        engine = fig.get_layout_engine()
        assert engine is not None  # figure_for made the figure with layout="constrained"
        engine.execute(fig)
        fig.set_layout_engine("none")
    frames = max(2, int(seconds * fps))

    def draw(i: int) -> List:
        now = end * (i + 1) / frames
        for line, tip, (_, t, p) in zip(lines, tips, series):
            k = int(np.searchsorted(t, now, side="right"))
            level = p[max(k - 1, 0)]
            line.set_data(np.append(t[:k], now), np.append(p[:k], level))
            tip.set_position((now, level))
            tip.set_text(f" {level:.0f}")
        clock.set_text(f"t = {now:.0f} s")
        return lines + tips + [clock]

    return FuncAnimation(fig, draw, frames=frames, interval=1000 / fps, blit=False)
