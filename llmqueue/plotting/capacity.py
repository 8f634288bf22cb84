"""The capacity-planning figure (SPEC 8.9): attainment against rate with the
target, the token bound and the ``[lo, hi]`` band; TTFT and TPOT p90 against
rate with the SLO lines; for ``plan_engines``, attainment against K."""

from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence, Union

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from llmqueue.planning.engines import EnginesResult
from llmqueue.planning.plan import PlanResult, at_rate
from llmqueue.plotting.style import (DATA_ZORDER, decorate, label, panels_for, reference_hline,
                                     reference_vline, suptitle)


def _name(r: Any) -> str:
    return f"{r.config['scheduler']} bmax={r.config['bmax']}"


def plot_capacity(results: Union[PlanResult, EnginesResult,
                                 Sequence[Union[PlanResult, EnginesResult]]],
                  title: Optional[str] = None,
                  axes: Optional[Sequence[Axes]] = None) -> Figure:
    """Left: mean attainment of each simulated probe against its rate (K for a
    :class:`EnginesResult`), one curve per result, with CI bars, the target
    (horizontal), ``lambda_tok`` (dashed vertical) and the ``[lo, hi]`` band
    shaded.  Right: TTFT and TPOT p90 (log y) of each probe against the rate,
    with the SLO lines.  Draws into the two ``axes`` when given; returns the
    figure."""
    items: List[Any] = list(results) if isinstance(results, (list, tuple)) else [results]
    fig, (left, right) = panels_for(axes, 2)
    by_k = any(isinstance(r, EnginesResult) for r in items)
    slo_lines = {}
    for i, r in enumerate(items):
        colour = f"C{i}"
        probes = sorted((p for p in r.probes if p.reps), key=lambda p: (p.engines, p.rate))
        xs = [p.engines if by_k else p.rate for p in probes]
        left.errorbar(xs, [p.mean for p in probes], yerr=[p.hw for p in probes], fmt="o-",
                      color=colour, capsize=3, zorder=DATA_ZORDER, label=_name(r))
        if isinstance(r, PlanResult):
            hi = r.hi if math.isfinite(r.hi) else r.lo
            left.axvspan(r.lo, hi, color=colour, alpha=0.15,
                         label=f"[lo, hi] = [{r.lo:.3g}, {hi:.3g}] req/s")
            reference_vline(left, r.bounds.lambda_tok * r.engines,
                            f"lambda_tok = {r.bounds.lambda_tok * r.engines:.3g} req/s",
                            linestyle="--")
        for metric, style in (("ttft", "o-"), ("tpot", "s--")):
            ys = [at_rate(p)[f"{metric}_p90"][0] for p in probes]
            keep = [(x, y) for x, y in zip(xs, ys) if y is not None and y > 0]
            if keep:
                right.plot(*zip(*keep), style, color=colour,
                           label=f"{_name(r)}: {metric.upper()} p90")
        slo_lines.update(r.config.get("slo", {}))
    target = items[0].target if items else 0.9
    reference_hline(left, target, f"target {target:g}")
    for metric in ("ttft", "tpot"):
        if metric in slo_lines:
            reference_hline(right, slo_lines[metric], f"SLO {metric.upper()} "
                                                      f"{slo_lines[metric]:g} s")
    right.set_yscale("log")
    xlabel = label("engines", "K") if by_k else label("arrival rate", "req/s")
    decorate(left, "SLO attainment", xlabel, label("attainment", "share of requests"))
    decorate(right, "Latency p90", xlabel, label("latency", "s"))
    suptitle(fig, title)
    return fig
