"""The figure of Theorem 10's region with simulated verdicts on top."""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Polygon

from llmqueue.engine.results import Result
from llmqueue.models.latency import Staircase
from llmqueue.plotting.style import DATA_ZORDER, decorate, label, panels_for, place_legend, suptitle
from llmqueue.theory.region import stability_region, vertex_c

MARKERS = {"stable": ("o", "tab:green"), "unstable": ("X", "tab:red"),
           "inconclusive": ("s", "tab:grey")}
TITLE = ("Theorem 10's stability region and what each scheduler holds: sustainable "
         "(prefill, decode) token rates with kmax, CodeLlama-34B staircase")


def plot_region(rows: Sequence[Tuple[str, Result]], kmax: Optional[int],
                axes: Optional[Sequence[Axes]] = None, title: str = TITLE) -> Figure:
    """One panel per (scheduler, bmax) of ``rows`` (summaries with
    ``scheduler``, ``bmax``, ``lambda_p``, ``lambda_d`` and ``verdict``): the
    region at that budget (shaded), the other budgets' regions (outlined),
    point C, and each run's measured verdict at its rates.  Draws into
    ``axes`` (one per panel) when given; returns the figure."""
    panels = list(dict.fromkeys((r.summary["scheduler"], r.summary["bmax"]) for _, r in rows))
    budgets = sorted({bmax for _, bmax in panels})
    latency = Staircase()
    regions = {b: stability_region(b, kmax, latency) for b in budgets}
    fig, axs = panels_for(axes, len(panels), sharey=True, panel=(5.2, 4.8))
    for ax, (scheduler, bmax) in zip(axs, panels):
        for b, region in regions.items():
            ax.add_patch(Polygon(region.vertices, closed=True,
                                 facecolor="tab:blue" if b == bmax else "none",
                                 alpha=0.15 if b == bmax else 1.0, zorder=1,
                                 edgecolor="tab:blue", linestyle="-" if b == bmax else ":",
                                 label=f"region, bmax = {b}"))
        if kmax is not None and kmax <= latency.b0:
            cx, cy = vertex_c(kmax, latency)
            ax.plot([cx], [cy], marker="*", color="black", markersize=14, linestyle="none",
                    zorder=DATA_ZORDER + 1, label="vertex C (point C)")
        for verdict, (marker, colour) in MARKERS.items():
            pts = [(r.summary["lambda_p"], r.summary["lambda_d"]) for _, r in rows
                   if (r.summary["scheduler"], r.summary["bmax"]) == (scheduler, bmax)
                   and r.summary["verdict"] == verdict]
            if pts:
                xs, ys = zip(*pts)
                ax.scatter(xs, ys, marker=marker, color=colour, s=45, label=f"run: {verdict}",
                           zorder=DATA_ZORDER)
        ax.set_xlim(0, 3700)
        ax.set_ylim(0, 2400)
        decorate(ax, f"{scheduler}, bmax = {bmax}, kmax = {kmax}",
                 label("prefill token rate lambda_p", "tokens/s"),
                 label("decode token rate lambda_d", "tokens/s") if ax is axs[0] else None,
                 legend=False)
    place_legend(axs[-1], outside=True, also=axs[:-1])
    suptitle(fig, title)
    return fig
