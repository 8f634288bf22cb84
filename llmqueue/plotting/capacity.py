"""The capacity-planning figure (SPEC 8.9): attainment against rate with the
target, the token bound and the ``[lo, hi]`` band; TTFT and TPOT p90 against
rate with the SLO lines; for ``plan_engines``, attainment against K."""

from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence, Set, Union

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from llmqueue.planning.engines import EnginesResult
from llmqueue.planning.plan import PlanResult, at_rate, shown_quantile
from llmqueue.planning.probe import PASS
from llmqueue.plotting.style import (DATA_ZORDER, REFERENCE_COLOUR, decorate, label, panels_for,
                                     reference_hline, reference_vline, suptitle)


#: Size of each panel when several results share the figure (inches).
WIDE = (11.0, 4.4)


def _name(r: Any) -> str:
    router = r.config.get("router")
    return f"{r.config['scheduler']} bmax={r.config['bmax']}" + (f", {router}" if router else "")


def plot_capacity(results: Union[PlanResult, EnginesResult,
                                 Sequence[Union[PlanResult, EnginesResult]]],
                  title: Optional[str] = None,
                  axes: Optional[Sequence[Axes]] = None) -> Figure:
    """Left: mean attainment of each simulated probe against its rate (K for a
    :class:`EnginesResult`), one curve per result, with CI bars and open
    markers for the probes that did not pass (FAIL or boundary); the target
    (horizontal); ``lambda_tok`` (dashed vertical) and each result's ``[lo,
    hi]`` band shaded and named in its legend entry, or against K, ``K_lb``
    and the region below it.  Right: TTFT and TPOT p90 (log y) of each probe
    against the rate (or K), with the SLO lines; below the left panel when
    there are several results.  Draws into the two ``axes`` when given;
    returns the figure."""
    items: List[Any] = list(results) if isinstance(results, (list, tuple)) else [results]
    # several results: one panel above the other, wide enough for their legends
    stacked = len(items) > 1 and axes is None
    fig, (left, right) = panels_for(axes, 2, column=True, sharex=True, panel=WIDE) \
        if stacked else panels_for(axes, 2)
    by_k = any(isinstance(r, EnginesResult) for r in items)
    slo_lines = {}
    bounds: Set[float] = set()  # each bound line once, however many results share it
    for i, r in enumerate(items):
        colour = f"C{i}"
        probes = sorted((p for p in r.probes if p.reps), key=lambda p: (p.engines, p.rate))
        xs = [p.engines if by_k else p.rate for p in probes]
        means = [p.mean for p in probes]
        band = ""
        if isinstance(r, PlanResult):
            hi = r.hi if math.isfinite(r.hi) else r.lo
            band = f": [lo, hi] = [{r.lo:.3g}, {hi:.3g}] req/s"
            left.axvspan(r.lo, hi, color=colour, alpha=0.15)
            bound = r.bounds.lambda_tok * r.engines
            if bound not in bounds:
                bounds.add(bound)
                reference_vline(left, bound, f"lambda_tok = {bound:.3g} req/s", linestyle="--")
        elif r.k_lb not in bounds:
            bounds.add(r.k_lb)
            reference_vline(left, r.k_lb, f"K_lb = {r.k_lb}", linestyle="--")
            if r.k_lb > 1:
                left.axvspan(r.k_lb - 1, r.k_lb, color=REFERENCE_COLOUR, alpha=0.15,
                             label="K < K_lb: no router keeps up")
        left.errorbar(xs, means, yerr=[p.hw for p in probes], fmt="o-", color=colour,
                      capsize=3, zorder=DATA_ZORDER, label=_name(r) + band)
        short = [(x, m) for x, m, p in zip(xs, means, probes) if p.decision != PASS]
        if short:  # open markers: FAIL or boundary
            left.plot(*zip(*short), "o", color=colour, markerfacecolor="white",
                      zorder=DATA_ZORDER + 1)
        key, shown = shown_quantile(getattr(r, "mode", "joint"), r.target)
        for metric, style in (("ttft", "o-"), ("tpot", "s--")):
            ys = [at_rate(p)[f"{metric}_{key}"][0] for p in probes]
            keep = [(x, y) for x, y in zip(xs, ys) if y is not None and y > 0]
            if keep:
                right.plot(*zip(*keep), style, color=colour,
                           label=f"{_name(r)}: {metric.upper()} {shown}")
        slo_lines.update(r.config.get("slo", {}))
    target = items[0].target if items else 0.9
    reference_hline(left, target, f"target {target:g}")
    for metric in ("ttft", "tpot"):
        if metric in slo_lines:
            reference_hline(right, slo_lines[metric], f"SLO {metric.upper()} "
                                                      f"{slo_lines[metric]:g} s")
    right.set_yscale("log")
    if by_k:
        for ax in (left, right):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    xlabel = label("engines", "K") if by_k else label("arrival rate", "req/s")
    decorate(left, "SLO attainment", None if stacked else xlabel,
             label("attainment", "share of requests"))
    quantiles = sorted({shown_quantile(getattr(r, "mode", "joint"), r.target)[1]
                        for r in items}) or ["p90"]
    decorate(right, f"Latency {', '.join(quantiles)}", xlabel, label("latency", "s"))
    suptitle(fig, title)
    return fig
