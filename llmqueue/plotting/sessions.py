"""Figure of multi-turn sessions with and without the prefix cache: the TTFT
distributions, TTFT p90 and the prefill tokens computed per request, at each
cache size."""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from llmqueue.engine.results import Result
from llmqueue.plotting.style import DATA_ZORDER, decorate, label, log_axis, panels_for, suptitle

#: Bar colours: with the prefix cache, without.
COLOURS = {True: "tab:blue", False: "0.65"}
#: Line styles of the TTFT CDFs, one per cache size.
STYLES = ("-", "--", "-.", ":")
CACHE = label("KV cache M", "tokens")


def _bars(ax: Axes, sizes: Sequence[int], values: Dict[Tuple[int, bool], float],
          notes: Dict[int, str]) -> None:
    """Two bars per cache size (cache, no cache), each value above its bar, and
    ``notes[M]`` over the pair."""
    x = np.arange(len(sizes))
    for j, prefix in enumerate((True, False)):
        heights = np.array([values.get((M, prefix), np.nan) for M in sizes])
        where = x - 0.2 + 0.4 * j
        ax.bar(where, heights, 0.4, color=COLOURS[prefix], zorder=DATA_ZORDER - 1,
               label="prefix cache" if prefix else "no prefix cache")
        for xi, h in zip(where, heights):
            if np.isfinite(h):
                ax.annotate(f"{h:,.0f}" if h >= 100 else f"{h:.3g}", (xi, h), ha="center",
                            va="bottom", fontsize=9)
    for xi, M in zip(x, sizes):
        ax.annotate(notes.get(M, ""), (xi, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(0, -4), textcoords="offset points", ha="center", va="top",
                    fontsize=9)
    ax.set_xticks(x, [f"{M:,}" for M in sizes])


def plot_sessions(rows: Sequence[Tuple[str, Result]], title: str,
                  axes: Optional[Sequence[Axes]] = None) -> Figure:
    """Three panels from a ``prefix-sessions`` run (summaries with ``kv``,
    ``prefix``, ``ttft_p90``, ``prefill_per_request``, ``prefix_hit_ratio``,
    ``ttft_ratio``, ``prefill_ratio`` and ``preemptions``; each row's
    ``ttft`` that of its first seed): the empirical CDFs of TTFT (log scale),
    TTFT p90 per cache size with and without the cache (log scale; the ratio
    above each pair) and prefill tokens computed per request (the hit ratio
    and preemptions above each pair).  Draws into the three ``axes`` when
    given; returns the figure."""
    fig, (cdf, p90, prefill) = panels_for(axes, 3, panel=(5.6, 4.8))
    sizes = sorted({r.summary["kv"] for _, r in rows}, reverse=True)
    ttft: Dict[Tuple[int, bool], float] = {}
    work: Dict[Tuple[int, bool], float] = {}
    ratio_notes: Dict[int, str] = {}
    hit_notes: Dict[int, str] = {}
    for name, result in rows:
        s = result.summary
        key = (s["kv"], s["prefix"])
        ttft[key], work[key] = s["ttft_p90"], s["prefill_per_request"]
        if s["prefix"]:
            ratio_notes[s["kv"]] = f"cache / none: {s['ttft_ratio']:.3f}"
            hit_notes[s["kv"]] = (f"hit ratio {s['prefix_hit_ratio']:.3f}\n"
                                  f"{s['preemptions']:,.0f} preemptions")
        values = np.sort(result.ttft if result.ttft is not None else np.array([]))
        if values.size:
            cdf.step(values, np.arange(1, values.size + 1) / values.size, where="post",
                     color=COLOURS[s["prefix"]], linestyle=STYLES[sizes.index(s["kv"]) % 4],
                     linewidth=1.8, label=name)
    log_axis(cdf, "x")
    cdf.set_ylim(0, 1.0)
    decorate(cdf, "TTFT of every request (first seed)", label("TTFT", "s, log scale"),
             label("requests at or below", "fraction"), grid="both", outside=False)
    _bars(p90, sizes, ttft, ratio_notes)
    log_axis(p90, "y")
    top = max(ttft.values(), default=1.0)
    p90.set_ylim(top=top * 30)
    decorate(p90, "TTFT p90 (mean over seeds)", CACHE, label("TTFT p90", "s, log scale"),
             outside=False)
    _bars(prefill, sizes, work, hit_notes)
    prefill.set_ylim(0, max(work.values(), default=1.0) * 1.35)
    decorate(prefill, "Prefill computed (mean over seeds)", CACHE,
             label("prefill tokens computed", "per request"), outside=False)
    suptitle(fig, title)
    return fig


__all__ = ["plot_sessions"]
