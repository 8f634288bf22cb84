"""Figures of single-engine runs: pending requests over time (still, zoomed
and animated) and the latency distributions of the finished requests."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
from matplotlib.animation import FuncAnimation
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from llmqueue.engine.results import Result
from llmqueue.plotting.style import (GRID_ALPHA, LEGEND_SIZE, decorate, figure_for, label,
                                     log_axis, panels_for, place_legend, plain, reference_hline,
                                     room_for_legend, suptitle)

TIME = label("time", "s")
PENDING = label("pending requests", "resident + waiting")
#: A run whose pending count stays under this share of the tallest run's peak
#: is flattened at the bottom of a linear axis: when two or more are, an
#: inset draws them at their own scale.
HELD = 0.2
#: Where the inset sits, in axes fractions (left, bottom, width, height): top
#: left, above a queue that grows from the origin.
INSET = (0.07, 0.5, 0.4, 0.38)
#: A latency whose values span more than this ratio is drawn on a log axis.
WIDE = 10.0


def plot_pending(rows: Sequence[Tuple[str, Result]], title: str, kmax: Optional[int] = None,
                 log: bool = False, until: Optional[float] = None,
                 top: Optional[float] = None, ax: Optional[Axes] = None,
                 zoom: bool = True) -> Figure:
    """Pending requests over time, one step line per ``(label, result)`` run
    (recorded with ``timeseries=True``); ``kmax`` drawn as a light dashed line
    under the data (above it, requests wait for a slot).  ``log`` puts the
    count on a symlog scale, ``until`` cuts the time axis (s) and ``top`` the
    count axis.  On a linear axis (no ``top``), when two or more runs stay
    under :data:`HELD` of the tallest one's peak (queues that hold beside one
    that blows up), an inset (``zoom``) draws them at their own scale.  Draws
    into ``ax`` when given; returns the figure."""
    fig, ax = figure_for(ax)
    peak = 0.0
    lines: List[Tuple[np.ndarray, np.ndarray, Any]] = []
    for name, result in rows:
        t, pending, _ = result.timeseries()
        line = ax.step(t, pending, where="post", label=name, linewidth=1.4)[0]
        lines.append((t, pending, line.get_color()))
        peak = max(peak, float(pending.max(initial=0)))
    if kmax is not None:
        reference_hline(ax, kmax, f"kmax = {kmax} (above: waiting for a slot)")
        peak = max(peak, kmax)
    if log:
        ax.set_yscale("symlog", linthresh=10)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "0" if v == 0 else plain(v)))
    ax.set_ylim(0, top)
    if top is None and not log:
        room_for_legend(ax, peak, len(rows) + (kmax is not None))
    if until is not None:
        ax.set_xlim(0, until)
    held = [x for x in lines if x[1].size and x[1].max() <= HELD * peak]
    inset = zoom and not log and top is None and len(held) >= 2
    decorate(ax, title, TIME, label("pending requests", "resident + waiting, log scale above 10")
             if log else PENDING, legend=False)
    # log: data everywhere; an inset takes the top left
    place_legend(ax, outside=True if log else None, loc="upper right" if inset else "best")
    if inset:
        _inset(ax, held, kmax)
    return fig


def _inset(ax: Axes, held: Sequence[Tuple[np.ndarray, np.ndarray, Any]],
           kmax: Optional[int]) -> None:
    """The runs ``held`` (times, counts, colour) in an inset of ``ax`` at their
    own scale, over the whole time axis, with ``kmax``."""
    inset = ax.inset_axes(INSET)
    level = 0.0
    for t, pending, colour in held:
        inset.step(t, pending, where="post", color=colour, linewidth=1.2)
        level = max(level, float(pending.max()))
    if kmax is not None:
        reference_hline(inset, kmax, "_kmax")  # "_": not in the legend
        level = max(level, kmax)
    inset.set_xlim(ax.get_xlim())
    inset.set_ylim(0, 1.3 * level)
    inset.set_title("zoom: the runs that hold", fontsize=LEGEND_SIZE)
    inset.tick_params(labelsize=8)
    inset.grid(alpha=GRID_ALPHA)


def plot_pending_zoom(rows: Sequence[Tuple[str, Result]], title: str, top: Optional[float],
                      titles: Tuple[str, str] = ("All runs", "Zoom"),
                      axes: Optional[Sequence[Axes]] = None) -> Figure:
    """Two panels of :func:`plot_pending`: every run at full scale (left) and
    the same runs with the count axis cut at ``top`` (right), titled
    ``titles`` under the figure's ``title``; the legend is the left panel's.
    Draws into the two ``axes`` when given; returns the figure."""
    fig, (left, right) = panels_for(axes, 2, panel=(6.5, 5.0))
    plot_pending(rows, titles[0], ax=left, zoom=False)  # the right panel is the zoom
    plot_pending(rows, titles[1], top=top, ax=right)
    legend = right.get_legend()
    if legend is not None:  # the zoom is full of data: one legend, left
        legend.remove()
    suptitle(fig, title)
    return fig


def plot_latency_cdfs(rows: Sequence[Tuple[str, Result]], title: str,
                      axes: Optional[Sequence[Axes]] = None) -> Figure:
    """Empirical CDFs of TTFT (left) and TPOT (right) of the finished requests,
    one line per run; line styles keep coinciding curves apart.  A panel whose
    values all stay under a second is in milliseconds; one whose values span
    more than :data:`WIDE` times is on a log axis labelled in plain numbers,
    else on a linear one (a log axis over less than a decade has no tick to
    label but its crowded minor ones).  Draws into the two ``axes`` when
    given; returns the figure."""
    fig, panels = panels_for(axes, 2)
    for ax, key, name in ((panels[0], "ttft", "time to first token"),
                          (panels[1], "tpot", "time per output token")):
        series = [(run, np.sort(np.asarray(getattr(result, key), dtype=float)))
                  for run, result in rows]
        every = np.concatenate([v for _, v in series] + [np.zeros(0)])
        scale, unit = (1e3, "ms") if every.size and every.max() < 1.0 else (1.0, "s")
        positive = every[every > 0]
        wide = positive.size > 0 and positive.max() > WIDE * positive.min()
        for i, (run, values) in enumerate(series):
            if values.size:
                ax.step(values * scale, np.arange(1, values.size + 1) / values.size,
                        where="post", linestyle=("-", "--", "-.", ":")[i % 4],
                        linewidth=2.2 - 0.3 * (i % 4),
                        label=f"{run} (p99 {np.percentile(values, 99) * scale:.3g} {unit})")
        if wide:
            log_axis(ax, "x")
        ax.set_ylim(0, 1.0)
        room_for_legend(ax, 1.0, len(rows))
        decorate(ax, name.capitalize(), label(name, f"{unit}, log scale" if wide else unit),
                 label("finished requests at or below", "fraction"),
                 grid="both" if wide else "major")
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
