"""Figures a person would put in a talk: titled, labelled, with legends."""

from __future__ import annotations

import os
from typing import Optional, Sequence, Tuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .simulate import Result  # noqa: E402


def plot_pending(rows: Sequence[Tuple[str, Result]], path: str, title: str,
                 kmax: Optional[int] = None, log: bool = False) -> None:
    """Pending requests over time, one step line per run; ``kmax`` drawn as a
    dashed line (above it, requests wait for a slot)."""
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
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
    save(fig, path)


def save(fig: "plt.Figure", path: str) -> None:
    """Write ``fig`` to ``path`` (creating its folder) and close it."""
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
