"""The capacity-planning figure (docs/model.md §7.9): attainment against rate with the
target, the token bound and the ``[lo, hi]`` band; TTFT and TPOT p90 against
rate with the SLO lines; for ``plan_engines``, attainment against K."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Set, Union

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from llmqueue.planning.engines import EnginesResult
from llmqueue.planning.plan import PlanResult, at_rate, shown_quantile
from llmqueue.planning.probe import PASS
from llmqueue.plotting.style import (DATA_ZORDER, REFERENCE_COLOUR, decorate, label, log_axis,
                                     panels_for, place_legend, reference_hline, reference_vline,
                                     suptitle)


#: Size of each panel, one above the other (inches).
WIDE = (11.0, 4.4)
#: The rate bounds drawn (those within :data:`NEAR` of the smallest), each
#: with its own line style, all black: theory, not data.
BOUNDS = (("lambda_tok", "--"), ("lambda_kv", ":"), ("lambda_slot", "-."))
NEAR = 1.5
#: The target attainment: a thin solid line, unlike every bound.
TARGET = {"color": "black", "linestyle": "-", "linewidth": 0.9, "alpha": 0.7}
#: The latency figures: marker and line style, shared by each SLO's line.
METRICS = (("ttft", "o", "-"), ("tpot", "s", "--"))
#: Legend samples of what every curve's markers mean, drawn in grey.
SAMPLE = "0.3"


def _name(r: Any) -> str:
    router = r.config.get("router")
    return f"{r.config['scheduler']} bmax={r.config['bmax']}" + (f", {router}" if router else "")


def _bound_text(name: str, value: float, exact: bool, engines: int) -> str:
    """The legend text of a rate bound."""
    pool = f" ({engines} engines)" if engines > 1 else ""
    if name == "lambda_tok":
        what = "Theorem 2 bound" if exact else "token bound (necessary)"
        return f"{what} λ_tok = {value:.3g} req/s{pool}"
    what = "memory bound λ_kv" if name == "lambda_kv" else "slot bound λ_slot"
    return f"{what} = {value:.3g} req/s{pool}"


def _slos(items: Sequence[Any]) -> Dict[str, float]:
    """The SLO of each latency figure (seconds) the results share; none for a
    mix of classes with SLOs of their own."""
    out: Dict[str, float] = {}
    for r in items:
        for metric, value in r.config.get("slo", {}).items():
            if isinstance(value, (int, float)):
                out[metric] = float(value)
    return out


def default_title(items: Sequence[Any]) -> str:
    """What the figure answers, and the SLO and target it answers for."""
    slos = _slos(items)
    target = items[0].target if items else 0.9
    rule = " and ".join(f"{m.upper()} ≤ {slos[m]:g} s" for m, _, _ in METRICS if m in slos)
    what = ("Fewest engines that meet the SLO" if any(isinstance(r, EnginesResult) for r in items)
            else "Largest arrival rate that meets the SLO")
    return f"{what}: {rule or 'the SLO'} for {target:.0%} of requests"


def plot_capacity(results: Union[PlanResult, EnginesResult,
                                 Sequence[Union[PlanResult, EnginesResult]]],
                  title: Optional[str] = None,
                  axes: Optional[Sequence[Axes]] = None) -> Figure:
    """Top: mean attainment of each simulated probe against its rate (K for an
    :class:`EnginesResult`), one colour per result, with confidence bars,
    filled markers for the probes that passed and open ones for the others
    (fail or boundary); the target (thin solid line); the rate bounds near
    the binding one (Theorem 2's ``lambda_tok`` dashed, ``lambda_kv`` dotted,
    ``lambda_slot`` dash-dot, all black) and each result's goodput bracket
    (its last pass to its first fail, in its legend entry), shaded in its
    colour; against K, ``K_lb`` and the region below it.  Bottom: TTFT
    (solid, circles) and TPOT (dashed, squares) p90 (log y) of each probe,
    with each SLO as a black line of its figure's style.  Every line, band
    and marker is named in the legend; ``title``
    defaults to what the figure answers (:func:`default_title`).  Draws into
    the two ``axes`` when given (side by side); returns the figure."""
    items: List[Any] = list(results) if isinstance(results, (list, tuple)) else [results]
    stacked = axes is None  # one above the other, sharing the rate axis, legends right
    fig, (left, right) = panels_for(axes, 2, column=True, sharex=True, panel=WIDE) \
        if stacked else panels_for(axes, 2)
    by_k = any(isinstance(r, EnginesResult) for r in items)
    several = len(items) > 1
    drawn: Set[float] = set()  # each bound once, however many results share it
    passed = failed = False
    names = [_name(r) for r in items]  # legend texts of the curves
    for i, r in enumerate(items):
        colour = f"C{i}"
        probes = sorted((p for p in r.probes if p.reps), key=lambda p: (p.engines, p.rate))
        xs = [p.engines if by_k else p.rate for p in probes]
        means = [p.mean for p in probes]
        if isinstance(r, PlanResult):
            b = r.bounds
            values = {name: getattr(b, name) for name, _ in BOUNDS}
            limit = min(v for v in values.values() if v is not None)
            for name, style in BOUNDS:
                value = values[name]
                if value is None or value > NEAR * limit or value * r.engines in drawn:
                    continue
                drawn.add(value * r.engines)
                reference_vline(left, value * r.engines,
                                _bound_text(name, value * r.engines, b.exact, r.engines),
                                color="black", linestyle=style, alpha=0.8)
            if r.lo > 0 or math.isfinite(r.hi):
                hi = r.hi if math.isfinite(r.hi) else r.lo
                left.axvspan(r.lo, hi, color=colour, alpha=0.15, linewidth=0)
                bracket = f"passed at {r.lo:.3g}, failed at {hi:.3g} req/s"
                names[i] = f"{_name(r)}: {bracket}" if several else _name(r)
                if not several:
                    left.fill_between([], [], color=colour, alpha=0.15, linewidth=0,
                                      label=f"shaded: goodput bracket, {bracket}")
        elif r.k_lb not in drawn:
            drawn.add(r.k_lb)
            reference_vline(left, r.k_lb, f"K_lb = {r.k_lb}: fewest engines the token bound "
                            "allows", color="black", linestyle="--", alpha=0.8)
            if r.k_lb > 1:
                left.axvspan(r.k_lb - 1, r.k_lb, color=REFERENCE_COLOUR, alpha=0.15,
                             label="K < K_lb: no router keeps up")
        left.errorbar(xs, means, yerr=[p.hw for p in probes], fmt="o-", color=colour,
                      capsize=3, zorder=DATA_ZORDER, label=names[i])
        short = [(x, m) for x, m, p in zip(xs, means, probes) if p.decision != PASS]
        passed = passed or len(short) < len(probes)
        failed = failed or bool(short)
        if short:  # open markers: FAIL or boundary
            left.plot(*zip(*short), "o", color=colour, markerfacecolor="white",
                      zorder=DATA_ZORDER + 1)
        key, shown = shown_quantile(getattr(r, "mode", "joint"), r.target)
        for metric, marker, style in METRICS:
            ys = [at_rate(p)[f"{metric}_{key}"][0] for p in probes]
            keep = [(x, y) for x, y in zip(xs, ys) if y is not None and y > 0]
            if keep:
                right.plot(*zip(*keep), marker=marker, linestyle=style, color=colour)
    target = items[0].target if items else 0.9
    reference_hline(left, target, f"target: {target:g} of requests within the SLO", **TARGET)
    # what the markers say, once for every curve
    if several and any(isinstance(r, PlanResult) for r in items):
        left.fill_between([], [], color=SAMPLE, alpha=0.25, linewidth=0,
                          label="shaded, in a curve's colour: its goodput bracket")
    if passed:
        left.plot([], [], "o", color=SAMPLE, label="filled: probe passed")
    if failed:
        left.plot([], [], "o", color=SAMPLE, markerfacecolor="white",
                  label="open: probe did not pass (fail or boundary)")
    left.add_line(Line2D([], [], marker="|", markersize=12, color=SAMPLE, linestyle="none",
                         label="bar: confidence interval over the replications"))
    quantiles = sorted({shown_quantile(getattr(r, "mode", "joint"), r.target)[1]
                        for r in items}) or ["p90"]
    slos = _slos(items)
    for metric, marker, style in METRICS:
        right.plot([], [], marker=marker, linestyle=style,
                   color=SAMPLE if several else "C0",
                   label=f"{metric.upper()} {', '.join(quantiles)}")
    for metric, _, style in METRICS:
        if metric in slos:
            reference_hline(right, slos[metric], f"SLO on {metric.upper()}: {slos[metric]:g} s",
                            color="black", linestyle=style, linewidth=1.0, alpha=0.8)
    if by_k:
        for ax in (left, right):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    log_axis(right, "y")
    xlabel = label("engines", "K") if by_k else label("arrival rate", "req/s")
    decorate(left, "SLO attainment", None if stacked else xlabel,
             label("attainment", "share of requests within the SLO"), legend=False)
    place_legend(left, outside=True, first=names)
    decorate(right, f"Latency {', '.join(quantiles)}", xlabel,
             label("latency", "s, log scale"), legend=False)
    place_legend(right, outside=True)
    suptitle(fig, title or default_title(items))
    return fig
