"""Figures of routing over engines with prefix caches: how much of every
prompt each router finds cached, and what that does to the time to the first
token."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from llmqueue.engine.results import Result
from llmqueue.plotting.style import (DATA_ZORDER, LEGEND_SIZE, decorate, label, panels_for,
                                     reference_hline, suptitle)

#: Colours of the cache sizes, in the order the rows first give them.
COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:purple")


def _by_router(rows: Sequence[Tuple[str, Result]], key: str
               ) -> Tuple[List[str], List[object], Dict[Tuple[object, str], List[float]]]:
    """Routers and cache sizes in the rows' order, and ``key``'s value of
    each seed by ``(kv, router)``."""
    routers = list(dict.fromkeys(r.summary["router"] for _, r in rows))
    sizes = list(dict.fromkeys(r.summary["kv"] for _, r in rows))
    values: Dict[Tuple[object, str], List[float]] = {}
    for _, r in rows:
        value = r.summary.as_dict().get(key)
        if value is not None:
            values.setdefault((r.summary["kv"], r.summary["router"]), []).append(float(value))
    return routers, sizes, values


def _strips(ax: Axes, rows: Sequence[Tuple[str, Result]], key: str, fmt: str) -> List[float]:
    """One column per router (a cache size beside another): each seed a dot,
    the mean a bar tick with its value written above them.  Returns every
    value drawn."""
    routers, sizes, values = _by_router(rows, key)
    width = 0.7 / max(1, len(sizes))
    for j, (size, colour) in enumerate(zip(sizes, COLOURS)):
        x0 = np.arange(len(routers)) - 0.35 + width * (j + 0.5)
        text = "M = unlimited" if size is None else f"M = {size:,} tokens per engine"
        for i, router in enumerate(routers):
            seeds = values.get((size, router), [])
            if not seeds:
                continue
            mean = float(np.mean(seeds))
            ax.scatter(np.full(len(seeds), x0[i]), seeds, s=18, color=colour, alpha=0.45,
                       zorder=DATA_ZORDER, label="one seed" if j == 0 and i == 0 else None)
            ax.plot([x0[i] - 0.4 * width, x0[i] + 0.4 * width], [mean, mean], color=colour,
                    linewidth=3, zorder=DATA_ZORDER,
                    label=f"{text}: mean of {len(seeds)} seed{'s' if len(seeds) > 1 else ''}"
                    if i == 0 else None)
            ax.annotate(fmt.format(mean), (x0[i], max(seeds)), xytext=(0, 5), ha="center",
                        textcoords="offset points", va="bottom", fontsize=8, color=colour,
                        bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none",
                              "alpha": 0.85}, zorder=DATA_ZORDER + 1)
    ax.set_xticks(np.arange(len(routers)), routers)
    ax.set_xlim(-0.6, len(routers) - 0.4)
    return [v for seeds in values.values() for v in seeds]


def plot_prefix_routing(rows: Sequence[Tuple[str, Result]], title: str,
                        axes: Optional[Sequence[Axes]] = None) -> Figure:
    """Left: the share of prompt tokens found cached (``prefix_hit_ratio``)
    per router, under the share a cache that keeps every group's prefix would
    find (the rows' ``hit_bound``).  Right: TTFT p90 per router, on a log
    scale.  Each seed is a dot and the mean a bar tick; rows of several cache
    sizes (their ``kv``) stand side by side.  Summaries need ``router``,
    ``kv``, ``prefix_hit_ratio``, ``ttft_p90`` and ``hit_bound``.  Draws into
    the two ``axes`` when given; returns the figure."""
    fig, (left, right) = panels_for(axes, 2, panel=(6.4, 4.8))
    engines = sorted({r.summary.as_dict().get("engines") or 0 for _, r in rows})
    xlabel = label("router", f"{' or '.join(map(str, engines))} engines behind it")
    hits = _strips(left, rows, "prefix_hit_ratio", "{:.3f}")
    bound = rows[0][1].summary.as_dict().get("hit_bound") if rows else None
    if bound is not None:
        reference_hline(left, bound, f"every prefix cached: E[c] / E[vp] = {bound:.3f}")
        hits.append(bound)
    if hits:  # room above the highest values for their labels
        low, high = min(hits), max(hits)
        pad = 0.1 * (high - low) or 0.01
        left.set_ylim(low - pad, high + pad)
    decorate(left, "Prompt tokens found in the cache", xlabel,
             label("prefix hit ratio", "share of prompt tokens"), legend=False)
    ttft = [t for t in _strips(right, rows, "ttft_p90", "{:.2f}") if t > 0]
    right.set_yscale("log")
    if ttft:
        right.set_ylim(min(ttft) / 1.5, max(ttft) * 2.0)
    right.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    right.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    right.yaxis.set_minor_formatter(NullFormatter())
    decorate(right, "Time to the first token, 90th percentile", xlabel,
             label("TTFT p90", "s, log scale"), legend=False)
    handles, texts = left.get_legend_handles_labels()
    fig.legend(handles, texts, loc="outside lower center", ncol=min(len(texts), 2),
               fontsize=LEGEND_SIZE, frameon=False)
    suptitle(fig, title)
    return fig
