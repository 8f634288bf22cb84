"""Figures of greedy admission under KV memory (docs/model.md §6.8.3 and §6.8.4):
preemption storms and metastability over time (still and animated), and the
worst-case limit cycle's completions per iteration."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np
from matplotlib.animation import FuncAnimation
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from llmqueue.common.units import TICKS_PER_SECOND
from llmqueue.engine.results import Result
from llmqueue.plotting.style import (LEGEND_SIZE, REFERENCE_COLOUR, decorate, label,
                                     panels_for, place_legend, reference_hline, suptitle)

TIME = label("time", "s")
PENDING = label("pending", "requests")
KV = label("KV in use", "tokens")
#: A reference line and its legend text.
Reference = Tuple[float, str]
#: Line styles of the reference lines of one panel, in order.
STYLES = ("--", ":", "-.")


def _references(ax: Axes, lines: Sequence[Reference]) -> None:
    for (value, text), style in zip(lines, STYLES * len(lines)):
        reference_hline(ax, value, text, linestyle=style)


def finished_rate(result: Result, width: float) -> Tuple[np.ndarray, np.ndarray]:
    """Completions per second of a run recorded with ``requests=True``, in bins
    of ``width`` s: ``(bin centres s, requests/s)``."""
    if result.request_log is None:
        raise ValueError("finished_rate needs a run recorded with requests=True")
    done = np.array([r.finished for r in result.request_log if r.finished is not None],
                    dtype=float) / TICKS_PER_SECOND
    edges = np.arange(0.0, done.max(initial=0.0) + width, width)
    counts, _ = np.histogram(done, edges)
    return (edges[:-1] + edges[1:]) / 2, counts / width


def preemption_rate(result: Result, width: float) -> Tuple[np.ndarray, np.ndarray]:
    """Preemptions per iteration of a run recorded with ``batches=True`` and a
    KV cache, over the iterations starting in each bin of ``width`` s:
    ``(bin centres s, preemptions per iteration)`` (NaN, a gap, where none ran)."""
    if result.batch_log is None or result.kv_log is None:
        raise ValueError("preemption_rate needs a run with a KV cache recorded with batches=True")
    starts = np.array([b.start for b in result.batch_log], dtype=float) / TICKS_PER_SECOND
    hits = np.array([k.preemptions for k in result.kv_log], dtype=float)
    edges = np.arange(0.0, starts.max(initial=0.0) + 2 * width, width)
    iterations, _ = np.histogram(starts, edges)
    preemptions, _ = np.histogram(starts, edges, weights=hits)
    rate = np.full(iterations.size, np.nan)
    np.divide(preemptions, iterations, out=rate, where=iterations > 0)
    return (edges[:-1] + edges[1:]) / 2, rate


def plot_storm(rows: Sequence[Tuple[str, Result]], title: str, *,
               rate_lines: Sequence[Reference] = (), kv_lines: Sequence[Reference] = (),
               width: float = 5.0, axes: Optional[Sequence[Axes]] = None) -> Figure:
    """Four stacked panels over time, one line per ``(label, result)`` run
    (recorded with ``timeseries``, ``batches`` and ``requests`` and a KV
    cache): pending requests; completions per second in bins of ``width`` s
    beside the reference rates ``rate_lines`` (capacities, the arrival rate);
    KV tokens in use beside ``kv_lines`` (the cache, a fixed point); and
    preemptions per iteration in the same bins.  The runs' legend is the top
    panel's, each reference's that of its panel.  Draws into the four
    ``axes`` when given; returns the figure."""
    fig, (pending, served, kv, storms) = panels_for(axes, 4, column=True, sharex=True,
                                                    panel=(10.0, 2.6))
    for name, result in rows:
        t, count, _ = result.timeseries()
        colour = pending.step(t, count, where="post", linewidth=1.4, label=name)[0].get_color()
        centres, rate = finished_rate(result, width)
        served.plot(centres, rate, color=colour, linewidth=1.4)
        t, tokens, _ = result.kv_timeseries()
        kv.step(t, tokens, where="post", color=colour, linewidth=1.0)
        centres, hits = preemption_rate(result, width)
        storms.plot(centres, hits, color=colour, linewidth=1.4)
    _references(served, rate_lines)
    _references(kv, kv_lines)
    for ax in (pending, served, kv, storms):
        ax.set_ylim(bottom=0)
    # every legend outside, right: the four panels keep one width
    decorate(pending, "Pending requests", None, PENDING, outside=True)
    decorate(served, f"Completions ({width:g} s bins)", None, label("throughput", "requests/s"),
             outside=True)
    decorate(kv, "KV cache in use", None, KV, outside=True)
    decorate(storms, f"Preemptions ({width:g} s bins)", TIME,
             label("preemptions", "per iteration"), outside=True)
    suptitle(fig, title)
    return fig


def _thin(t: np.ndarray, y: np.ndarray, points: int = 3000) -> Tuple[np.ndarray, np.ndarray]:
    """At most ``points`` of a step series: the largest value in each of
    ``points`` equal stretches of time (so spikes stay visible)."""
    if t.size <= points or t[-1] <= t[0]:
        return t, y
    span = t[-1] - t[0]
    at = np.minimum(((t - t[0]) / span * points).astype(int), points - 1)
    top = np.full(points, -np.inf)
    np.maximum.at(top, at, y)
    kept = np.isfinite(top)
    return (t[0] + np.arange(points) * span / points)[kept], top[kept]


def animate_storm(rows: Sequence[Tuple[str, Result]], title: str, capacity: float,
                  note: str = "", seconds: float = 10.0, fps: int = 8) -> FuncAnimation:
    """A storm forming, as an animation: pending requests (top) and KV tokens in
    use (bottom, the cache ``capacity`` as a reference) drawn progressively
    over ``seconds`` of playback at ``fps`` frames per second, with the
    simulated time, each run's preemptions so far (bottom right) and ``note``
    in a box (bottom left).  Runs as for :func:`plot_storm`, without
    ``requests``.  Returns the animation (write it with
    :func:`~llmqueue.plotting.style.save` to a ``.gif``)."""
    fig, (top, bottom) = panels_for(None, 2, column=True, sharex=True, panel=(8.0, 2.9))
    series = []
    for name, result in rows:
        t, count, _ = result.timeseries()
        kt, tokens, _ = result.kv_timeseries()
        starts = np.array([b.start for b in result.batch_log or []], dtype=float)
        hits = np.cumsum([k.preemptions for k in result.kv_log or []])
        series.append((name, *_thin(t, count), *_thin(kt, tokens),
                       starts / TICKS_PER_SECOND, hits))
    end = max(s[1][-1] for s in series)
    lines = [(top.step([], [], where="post", linewidth=1.5, label=s[0])[0],
              bottom.step([], [], where="post", linewidth=1.0)[0]) for s in series]
    for (a, b) in lines:
        b.set_color(a.get_color())
    top.set_ylim(0, 1.3 * max(s[2].max() for s in series))
    bottom.set_ylim(0, 1.4 * capacity)
    top.set_xlim(0, end)
    reference_hline(bottom, capacity, f"cache M = {capacity:,.0f} tokens")
    decorate(top, "Pending requests", None, PENDING, legend=False)
    decorate(bottom, "KV cache in use", TIME, KV, legend=False)
    place_legend(top, outside=False, loc="upper left")
    place_legend(bottom, outside=False, loc="lower right")
    # above the cache line (at 1 / 1.4 of the bottom panel's height)
    counters = [bottom.text(0.99, 0.88 - 0.08 * i, "", transform=bottom.transAxes, ha="right",
                            va="top", color=a.get_color(), fontsize=LEGEND_SIZE)
                for i, (a, _) in enumerate(lines)]
    clock = top.text(0.99, 0.97, "", transform=top.transAxes, ha="right", va="top")
    if note:
        bottom.text(0.01, 0.95, note, transform=bottom.transAxes, ha="left", va="top",
                    fontsize=LEGEND_SIZE, bbox={"facecolor": "white", "alpha": 0.8,
                                                "edgecolor": REFERENCE_COLOUR})
    suptitle(fig, title)
    engine = fig.get_layout_engine()
    assert engine is not None  # panels_for made the figure with layout="constrained"
    engine.execute(fig)
    fig.set_layout_engine("none")  # the moving texts must not shift the axes
    frames = max(2, int(seconds * fps))

    def draw(i: int) -> List:
        now = end * (i + 1) / frames
        for (a, b), text, (name, t, p, kt, kv, starts, hits) in zip(lines, counters, series):
            k, j = int(np.searchsorted(t, now, side="right")), \
                int(np.searchsorted(kt, now, side="right"))
            a.set_data(np.append(t[:k], now), np.append(p[:k], p[max(k - 1, 0)]))
            b.set_data(np.append(kt[:j], now), np.append(kv[:j], kv[max(j - 1, 0)]))
            n = int(np.searchsorted(starts, now, side="right"))
            text.set_text(f"{name}: {int(hits[n - 1]) if n else 0:,} preemptions so far")
        clock.set_text(f"t = {now:.0f} s")
        return [x for pair in lines for x in pair] + counters + [clock]

    return FuncAnimation(fig, draw, frames=frames, interval=1000 / fps, blit=False)


def plot_limit_cycle(series: Sequence[Tuple[str, np.ndarray, np.ndarray]], title: str,
                     references: Sequence[Reference], window: int, zoom: Tuple[float, float],
                     tau: float = 1.0, axes: Optional[Sequence[Axes]] = None) -> Figure:
    """Completions per iteration of runs given as ``(label, iteration ends s,
    completions)``.  Left: their moving average over ``window`` iterations
    beside the ``references`` (completions per iteration).  Right: cumulative
    completions within ``zoom`` = (start, end) s, with each reference drawn as
    a line of that many completions per iteration of ``tau`` s.  Draws into the
    two ``axes`` when given; returns the figure."""
    fig, (left, right) = panels_for(axes, 2, panel=(6.5, 4.8))
    for name, ends, counts in series:
        if counts.size >= window:
            mean = np.convolve(counts, np.ones(window) / window, mode="valid")
            line = left.plot(ends[window - 1:], mean, linewidth=1.4, label=name)[0]
        else:
            line = left.plot([], [], label=name)[0]
        inside = (ends > zoom[0]) & (ends <= zoom[1])
        right.step(np.concatenate([[zoom[0]], ends[inside]]),
                   np.concatenate([[0], np.cumsum(counts[inside])]), where="post",
                   color=line.get_color(), linewidth=1.4, label=name)
    _references(left, references)
    for (value, text), style in zip(references, STYLES * len(references)):
        right.plot(zoom, [0, value * (zoom[1] - zoom[0]) / tau], color=REFERENCE_COLOUR,
                   linestyle=style, linewidth=1.2, label=text)
    left.set_ylim(bottom=0)
    right.set_xlim(*zoom)
    right.set_ylim(bottom=0)
    time = label("time", f"s; an iteration lasts {tau:g} s")
    decorate(left, f"Moving average over {window} iterations", time,
             label("completions", "per iteration"), outside=False)
    decorate(right, f"Cumulative completions from t = {zoom[0]:g} s (zoom)", time,
             label("completions since the zoom's start", "requests"), outside=False)
    suptitle(fig, title)
    return fig


__all__ = ["animate_storm", "finished_rate", "plot_limit_cycle", "plot_storm",
           "preemption_rate"]
