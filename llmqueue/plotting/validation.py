"""Predicted against measured throughput (``llmqueue validate``): a point per
published run, the line where they agree and bands of 10% and 20% error."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from llmqueue.plotting.style import decorate, figure_for, label


def plot_validation(rows: Sequence[Mapping[str, Any]], stats: Mapping[str, Any],
                    settings: Optional[Mapping[str, str]] = None,
                    ax: Optional[Axes] = None, key: str = "predicted",
                    title: str = "Offline throughput, predicted against published",
                    measured: str = "output_tokens_per_s",
                    group: Optional[str] = None) -> Figure:
    """Each row's predicted output tokens/s (its ``key``) against its
    ``measured`` one (log axes), one marker per value of its ``group`` field
    (default: its model, tp and GPU), with ``y = x`` and the 10% and 20%
    bands; the title gives the median and largest error and any ``settings``."""
    fig, ax = figure_for(ax, (9.0, 6.0))
    rows = [r for r in rows if r[key] is not None]
    values = [r[k] for r in rows for k in (key, measured)]
    lo, hi = min(values) / 1.5, max(values) * 1.5
    ax.plot([lo, hi], [lo, hi], color="black", lw=1, label="predicted = measured")
    for share, alpha in ((0.1, 0.18), (0.2, 0.08)):
        ax.fill_between([lo, hi], [lo * (1 - share), hi * (1 - share)],
                        [lo * (1 + share), hi * (1 + share)], color="tab:blue", alpha=alpha,
                        lw=0, label=f"within {share:.0%}")
    groups: Dict[str, list] = {}
    for r in rows:
        name = str(r[group]) if group else f"{r['model']} on {r['tp']} x {r['gpu']}"
        groups.setdefault(name, []).append(r)
    for (name, members), marker in zip(groups.items(), "osD^v<>px*"):
        ax.scatter([r[measured] for r in members],
                   [r[key] for r in members], marker=marker, s=36, zorder=3,
                   label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):  # 1, 2, 5 x 10^k labelled as plain numbers
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    given = ", ".join(f"{k}={v}" for k, v in (settings or {}).items())
    title = (f"{title}: median |error| {stats['median_abs_error']:.0%}, largest "
             f"{stats['max_abs_error']:.0%}" + (f"\n({given})" if given else ""))
    decorate(ax, title, label("measured output throughput", "tokens/s"),
             label("predicted output throughput", "tokens/s"), grid="both")
    return fig
