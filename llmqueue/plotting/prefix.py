"""Figures of the prefix-caching experiments: the Mooncake traces' hit ratios,
the capacity that shared system prompts give, and an LRU cache against Che's
approximation.  Each takes its experiment's rows (``(label, result)``,
figures in the summaries) and draws the theory beside the measurement."""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from llmqueue.engine.results import Result
from llmqueue.plotting.style import (DATA_ZORDER, decorate, figure_for, label, panels_for,
                                     reference_hline, suptitle)
from llmqueue.plotting.theorem2 import runs_over_time

Rows = Sequence[Tuple[str, Result]]
HIT = label("hit ratio", "share of prompt tokens found cached")


def plot_prefix_mooncake(rows: Rows, title: str, ax: Optional[Axes] = None) -> Figure:
    """Per trace file, three bars: the ideal hit ratio counted from the file,
    the replay with an unlimited cache and the replay with a limited one,
    each value written above its bar.  Rows are a ``prefix-mooncake`` run
    (summaries with ``trace``, ``unlimited``, ``kv``, ``ideal_hit_ratio`` and
    ``prefix_hit_ratio``).  Draws into ``ax`` when given; returns the figure."""
    fig, ax = figure_for(ax)
    files = list(dict.fromkeys(r.summary["trace"] for _, r in rows))
    limited = next((r.summary["kv"] for _, r in rows if not r.summary["unlimited"]), None)
    bars: Dict[str, Dict[str, float]] = {f: {} for f in files}
    for _, r in rows:
        s = r.summary
        bars[s["trace"]]["ideal"] = s["ideal_hit_ratio"]
        bars[s["trace"]]["unlimited" if s["unlimited"] else "limited"] = \
            s["prefix_hit_ratio"] or 0.0
    kinds = [("ideal", "ideal: counted from the file (no simulation)", "0.75"),
             ("unlimited", "simulated: unlimited cache", "tab:blue"),
             ("limited", f"simulated: cache of {limited or 0:,} tokens (LRU)", "tab:orange")]
    width = 0.8 / len(kinds)
    x = np.arange(len(files))
    for j, (kind, text, colour) in enumerate(kinds):
        heights = [bars[f].get(kind, np.nan) for f in files]
        offsets = x - 0.4 + width * (j + 0.5)
        ax.bar(offsets, heights, width, color=colour, label=text, zorder=DATA_ZORDER - 1,
               edgecolor="black" if kind == "ideal" else None, hatch="//" if kind == "ideal"
               else None)
        for xi, h in zip(offsets, heights):
            if np.isfinite(h):
                ax.annotate(f"{h:.4f}", (xi, h), ha="center", va="bottom", fontsize=9)
    ax.set_xticks(x, [f.replace("_trace.jsonl", "").replace(".jsonl", "") for f in files])
    ax.set_ylim(0, 1.0)
    decorate(ax, title, label("Mooncake trace", "file"), HIT, outside=False)
    return fig


def plot_prefix_capacity(rows: Rows, title: str,
                         axes: Optional[Sequence[Axes]] = None) -> Figure:
    """Left: pending over time of every row (its first seed, recorded with
    ``timeseries=True``) beside its fluid slope from mid-run, on a symmetric
    log scale.  Right: the capacity without and with the prefix cache, Theorem
    2's (bars) beside what the overloaded runs served over their second half
    (markers), with the offered rates of the runs drawn across.  Rows are a
    ``prefix-capacity`` run (summaries with ``rate``, ``fluid_slope``,
    ``prefix``, ``lambda_star_c``, ``lambda_star_none``, ``gain``,
    ``served_rate`` and ``load``).  Draws into the two ``axes`` when given;
    returns the figure."""
    fig, (left, right) = panels_for(axes, 2, panel=(6.5, 5.0))
    named = {_greek(name): result for name, result in rows}
    runs_over_time(left, named, list(named), "pending", "fluid: {:.2f} req/s", mid_run=True)
    left.set_yscale("symlog", linthresh=10)
    left.set_ylim(0, 30 * max(max(r.timeseries()[1], default=1) for r in named.values()))
    decorate(left, "Pending requests over time", label("time", "s"),
             label("pending", "requests, log scale above 10"), outside=False)
    s = rows[0][1].summary
    theory = [s["lambda_star_none"], s["lambda_star_c"]]
    x = np.arange(2)
    right.bar(x, theory, 0.5, color=["0.7", "tab:blue"], zorder=DATA_ZORDER - 1,
              label="theory: (bmax / t(bmax)) / (E[vp] - E[c] + E[vd])")
    for xi, value in zip(x, theory):
        right.annotate(f"{value:.2f}", (xi, value / 2), ha="center", va="center",
                       fontsize=10, color="black" if xi == 0 else "white")
    served = [(1 if r.summary["prefix"] else 0, r.summary["served_rate"]) for _, r in rows
              if r.summary["served_rate"] is not None]
    if served:
        right.plot(*zip(*served), "D", color="black", zorder=DATA_ZORDER, markersize=7,
                   label="simulated: served when overloaded (second half)")
        for where, value in served:
            right.annotate(f"{value:.2f}", (where, value), xytext=(8, -3), fontsize=9,
                           textcoords="offset points")
    offered = {round(r.summary["rate"], 9): r.summary["load"] for _, r in rows}
    for (rate, load), style in zip(sorted(offered.items()), ("--", ":", "-.")):
        reference_hline(right, rate, f"offered: {load:.1f} λ*_c = {rate:.2f} req/s",
                        linestyle=style)
    right.set_xticks(x, ["no prefix cache", f"prefix cache ({s['gain']:.1f} times)"])
    right.set_ylim(0, 1.5 * max(max(theory), max(offered)))
    decorate(right, "Capacity without and with the cache", label("engine", "sarathi, bmax 512"),
             label("capacity", "requests/s"), outside=False)
    suptitle(fig, title)
    return fig


def _greek(text: str) -> str:
    """``lambda*_c`` written as in a talk: ``λ*_c``."""
    return text.replace("lambda", "λ")


def plot_prefix_che(rows: Rows, curve: Tuple[Sequence[float], Sequence[float]], title: str,
                    ax: Optional[Axes] = None) -> Figure:
    """Che's predicted hit ratio against the cache size (``curve``: sizes in
    tokens and ratios, a fine grid) beside the simulated points, with the
    ratio that every group's cached prefix would give.  Rows are a
    ``prefix-che`` run (summaries with ``kv``, ``prefix_hit_ratio``,
    ``che_hit_ratio`` and ``hit_bound``).  Draws into ``ax`` when given;
    returns the figure."""
    fig, ax = figure_for(ax)
    grid, predicted = curve
    ax.plot(grid, predicted, color="tab:blue", linewidth=1.5,
            label="Che's approximation (R measured)")
    s = [r.summary for _, r in rows]
    sizes = [v["kv"] for v in s]
    simulated = [v["prefix_hit_ratio"] for v in s]
    ax.plot(sizes, simulated, "o", color="tab:red", markersize=7, zorder=DATA_ZORDER,
            label="simulated: second half of each run (in brackets: minus Che's)")
    for M, hit, che in zip(sizes, simulated, [v["che_hit_ratio"] for v in s]):
        if hit is not None:
            ax.annotate(f"{hit:.3f} ({hit - che:+.3f})", (M, hit), xytext=(6, -12),
                        textcoords="offset points", fontsize=8)
    reference_hline(ax, s[0]["hit_bound"], f"every prefix cached: {s[0]['hit_bound']:.3f}")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.0)
    decorate(ax, title, label("cache size M", "KV tokens"), HIT, outside=False)
    return fig
