"""Figures a person would put in a talk: titled, labelled, with legends."""

from __future__ import annotations

import os
from typing import Optional, Sequence, Tuple

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from llmqueue.engine.results import Result  # noqa: E402


def plot_pending(rows: Sequence[Tuple[str, Result]], path: str, title: str,
                 kmax: Optional[int] = None, log: bool = False,
                 until: Optional[float] = None) -> None:
    """Pending requests over time, one step line per run; ``kmax`` drawn as a
    dashed line (above it, requests wait for a slot); ``until`` cuts the time
    axis (seconds)."""
    fig, ax = plt.subplots(figsize=(9, 5))
    for label, result in rows:
        t, pending, _ = result.timeseries()
        ax.step(t, pending, where="post", label=label, linewidth=1.4)
    if kmax is not None:
        ax.axhline(kmax, color="grey", linestyle="--", linewidth=1,
                   label=f"kmax = {kmax} (above: waiting for a slot)")
    ax.set_title(title)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("pending requests (resident + waiting)")
    if log:
        ax.set_yscale("symlog", linthresh=10)
        ax.set_ylim(bottom=0)
    if until is not None:
        ax.set_xlim(0, until)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
    save(fig, path)


def plot_latency_cdfs(rows: Sequence[Tuple[str, Result]], path: str, title: str) -> None:
    """Empirical CDFs of TTFT and TPOT of the finished requests, one line per
    run, side by side on logarithmic time axes."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, key, name in ((axes[0], "ttft", "time to first token"),
                          (axes[1], "tpot", "time per output token")):
        for i, (label, result) in enumerate(rows):
            values = np.sort(getattr(result, key))
            if values.size:  # line styles keep coinciding curves apart
                ax.step(values, np.arange(1, values.size + 1) / values.size, where="post",
                        linestyle=("-", "--", "-.", ":")[i % 4], linewidth=2.2 - 0.3 * (i % 4),
                        label=f"{label} (p99 {np.percentile(values, 99):.3g} s)")
        ax.set_xscale("log")
        ax.set_xlabel(f"{name} (s, log scale)")
        ax.set_ylabel("fraction of finished requests")
        ax.set_title(name.capitalize())
        ax.grid(alpha=0.3, which="both")
        ax.legend(loc="lower right", fontsize=8)
    fig.suptitle(title)
    save(fig, path)


def save(fig: "plt.Figure", path: str) -> None:
    """Write ``fig`` to ``path`` (creating its folder) and close it."""
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def animate_pending(rows: Sequence[Tuple[str, Result]], path: str, title: str,
                    note: str = "", seconds: float = 10.0, fps: int = 8,
                    dpi: int = 80) -> None:
    """An animated GIF of pending requests over time: the step lines of
    :func:`plot_pending` drawn progressively over ``seconds`` of playback, each
    with its current value at its tip, the simulated time shown and ``note``
    in a box."""
    from matplotlib.animation import FuncAnimation, PillowWriter

    series = [(label, *result.timeseries()[:2]) for label, result in rows]
    end = max(t[-1] for _, t, _ in series)
    top = max(p.max() for _, _, p in series)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    lines = [ax.step([], [], where="post", label=label, linewidth=1.6)[0]
             for label, _, _ in series]
    tips = [ax.text(0, 0, "", color=line.get_color(), fontsize=9, va="bottom")
            for line in lines]
    ax.set_xlim(0, end * 1.08)
    ax.set_ylim(0, top * 1.05)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("pending requests")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
    clock = ax.text(0.99, 0.97, "", transform=ax.transAxes, ha="right", va="top")
    if note:
        ax.text(0.99, 0.88, note, transform=ax.transAxes, ha="right", va="top", fontsize=9,
                bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "grey"})
    frames = max(2, int(seconds * fps))

    def draw(i: int) -> list:
        now = end * (i + 1) / frames
        for line, tip, (_, t, p) in zip(lines, tips, series):
            k = int(np.searchsorted(t, now, side="right"))
            level = p[max(k - 1, 0)]
            line.set_data(np.append(t[:k], now), np.append(p[:k], level))
            tip.set_position((now, level))
            tip.set_text(f" {level:.0f}")
        clock.set_text(f"t = {now:.0f} s")
        return lines + tips + [clock]

    anim = FuncAnimation(fig, draw, frames=frames, blit=False)
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    fig.tight_layout()
    anim.save(path, writer=PillowWriter(fps=fps), dpi=dpi)
    plt.close(fig)
