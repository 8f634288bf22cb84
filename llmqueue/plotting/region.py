"""The figure of Theorem 10's region with simulated verdicts on top."""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import matplotlib.pyplot as plt
from matplotlib.patches import Polygon

from llmqueue.models.latency import Staircase
from llmqueue.plotting.pending import save
from llmqueue.theory.region import stability_region, vertex_c
from llmqueue.engine.results import Result

MARKERS = {"stable": ("o", "tab:green"), "unstable": ("X", "tab:red"),
           "inconclusive": ("s", "tab:grey")}


def plot_region(rows: Sequence[Tuple[str, Result]], path: str, kmax: Optional[int]) -> None:
    """One panel per (scheduler, bmax) of ``rows``: the region at that budget
    (shaded), the other budgets' regions (outlined), point C, and each run's
    measured verdict at its (lambda_p, lambda_d)."""
    panels = list(dict.fromkeys((r.summary["scheduler"], r.summary["bmax"]) for _, r in rows))
    budgets = sorted({bmax for _, bmax in panels})
    latency = Staircase()
    regions = {b: stability_region(b, kmax, latency) for b in budgets}
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.8), sharey=True)
    for ax, (scheduler, bmax) in zip(axes, panels):
        for b, region in regions.items():
            ax.add_patch(Polygon(region.vertices, closed=True,
                                 facecolor="tab:blue" if b == bmax else "none",
                                 alpha=0.15 if b == bmax else 1.0,
                                 edgecolor="tab:blue", linestyle="-" if b == bmax else ":",
                                 label=f"region, bmax = {b}"))
        if kmax is not None and kmax <= latency.b0:
            cx, cy = vertex_c(kmax, latency)
            ax.plot([cx], [cy], marker="*", color="black", markersize=14, linestyle="none",
                    label="vertex C (point C)")
        for verdict, (marker, colour) in MARKERS.items():
            pts = [(r.summary["lambda_p"], r.summary["lambda_d"]) for _, r in rows
                   if (r.summary["scheduler"], r.summary["bmax"]) == (scheduler, bmax)
                   and r.summary["verdict"] == verdict]
            if pts:
                xs, ys = zip(*pts)
                ax.scatter(xs, ys, marker=marker, color=colour, s=45, label=f"run: {verdict}",
                           zorder=3)
        ax.set_title(f"{scheduler}, bmax = {bmax}, kmax = {kmax}")
        ax.set_xlabel("prefill token rate lambda_p (tokens/s)")
        ax.set_xlim(0, 3700)
        ax.set_ylim(0, 2400)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("decode token rate lambda_d (tokens/s)")
    axes[-1].legend(loc="upper right", fontsize=8)
    fig.suptitle("Theorem 10: sustainable (prefill, decode) rates with kmax, and what each "
                 "scheduler holds (CodeLlama-34B staircase)")
    save(fig, path)
