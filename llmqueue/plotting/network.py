"""Figures of multi-engine runs: backlogs per engine, load against capacity,
job latencies, and latency against load."""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

from llmqueue.plotting.pending import plt, save
from llmqueue.engine.results import Result


def plot_backlogs(panels: Sequence[Tuple[str, Dict[str, Result]]], path: str, title: str,
                  unit: str = "s") -> None:
    """One panel per run, sharing the time axis: each engine's backlog
    (unprocessed tokens) and their sum over time."""
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 3.6 * len(panels)), sharex=True,
                             squeeze=False)
    for ax, (name, results) in zip(axes[:, 0], panels):
        for label, result in results.items():
            t, _, backlog = result.timeseries()
            style = {"color": "black", "linewidth": 1.6} if label == "total" else \
                {"linewidth": 1.0, "alpha": 0.8}
            ax.step(t, backlog, where="post", label=label, **style)
        ax.set_title(name, fontsize=10)
        ax.set_ylabel("backlog (tokens)")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=9)
    axes[-1, 0].set_xlabel(f"time ({unit})")
    fig.suptitle(title)
    save(fig, path)


def plot_agents(loads: Dict[str, Tuple[float, float, float]], e2e: Sequence[float],
                path: str, title: str) -> None:
    """Left: each engine's measured token load and GPU busy fraction beside the
    expected load, all as fractions of capacity.  Right: the distribution of
    job end-to-end times."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    names = list(loads)
    x = np.arange(len(names))
    measured = [loads[n][0] for n in names]
    expected = [loads[n][1] for n in names]
    busy = [loads[n][2] for n in names]
    left.bar(x - 0.2, measured, 0.4, label="token load, measured")
    left.bar(x + 0.2, busy, 0.4, label="GPU busy fraction", color="tab:orange", alpha=0.7)
    left.scatter(x - 0.2, expected, color="black", marker="_", s=600, zorder=3,
                 label="token load, expected (rate x tokens / capacity)")
    left.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="capacity")
    left.set_xticks(x, names)
    left.set_ylabel("fraction of capacity bmax / t_bmax")
    left.set_ylim(0, 1.6)
    left.set_title("per-engine load against capacity", fontsize=10)
    left.legend(fontsize=8, loc="upper left")
    values = np.sort(np.asarray(e2e, dtype=float))
    right.step(values, np.arange(1, len(values) + 1) / len(values), where="post")
    for q, style in ((50, ":"), (99, "--")):
        v = float(np.percentile(values, q))
        right.axvline(v, color="grey", linestyle=style, linewidth=1, label=f"p{q} = {v:.1f} s")
    right.set_xlabel("job end-to-end time (s)")
    right.set_ylabel("fraction of finished jobs")
    right.set_title("job latency (distribution)", fontsize=10)
    right.grid(alpha=0.3)
    right.legend(fontsize=9, loc="lower right")
    fig.suptitle(title)
    save(fig, path)


def plot_against_load(loads: Sequence[float], curves: Dict[str, Dict[str, List[float]]],
                      limits: Dict[str, float], path: str, title: str) -> None:
    """One panel per figure (e.g. TTFT p99, TPOT p99) against the load, a line
    per mode, and each mode's load limit as a dotted vertical line; a panel
    whose values span more than 5x is drawn on a log scale."""
    figures = list(next(iter(curves.values())))
    fig, axes = plt.subplots(1, len(figures), figsize=(5.5 * len(figures), 4.5), squeeze=False)
    for ax, figure in zip(axes[0], figures):
        for mode, series in curves.items():
            line, = ax.plot(loads, series[figure], marker="o", label=mode)
            if mode in limits:
                ax.axvline(limits[mode], color=line.get_color(), linestyle=":",
                           label=f"{mode} limit (theory) = {limits[mode]:.2f}")
        ax.set_xlabel("load (fraction of the colocated lambda*)")
        ax.set_ylabel(f"{figure} (s)")
        values = [v for c in curves.values() for v in c[figure] if v]
        if values and max(values) > 5 * min(values):  # log scale only for a wide range
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(ScalarFormatter())
            ax.yaxis.set_minor_formatter(NullFormatter())
        else:
            ax.set_ylim(0, 1.5 * max(values))
        ax.set_title(figure, fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(title)
    save(fig, path)
