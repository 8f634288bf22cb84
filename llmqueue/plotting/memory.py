"""Figures of the KV-cache reference experiments (docs/model.md §6.8): Nie et al.'s
Table 1, the stability boundary under memory, coprime output lengths and the
memory waste of policies that are not work-conserving.  Each takes the rows
of its experiment (``(label, result)``, figures in the summaries) and draws
the theory beside the measurement."""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from llmqueue.engine.results import Result
from llmqueue.plotting.style import (DATA_ZORDER, decorate, figure_for, label, panels_for,
                                     reference_hline, reference_vline, suptitle)
from llmqueue.plotting.theorem2 import runs_over_time

Rows = Sequence[Tuple[str, Result]]
WIDTH = 0.38
WORKLOAD = label("workload", "prompt : output length")
POLICY = label("policy", "no token budget")


def _bar_panel(ax: Axes, names: Sequence[str], top: float, title: str, xlabel: str,
               ylabel: str) -> None:
    """Name ``ax``'s bar groups (at 0, 1, ...) by ``names``, run its value
    axis from 0 to ``top`` and decorate it."""
    ax.set_xticks(np.arange(len(names)), names)
    ax.set_ylim(0, top)
    decorate(ax, title, xlabel, ylabel)


def plot_table1(rows: Rows, title: str, tolerance: float = 0.03,
                axes: Optional[Sequence[Axes]] = None) -> Figure:
    """Left: measured saturated throughput per workload beside the
    whole-prompt ``mu`` (with its +- ``tolerance`` band) and the chunked
    calculator.  Right: the share of processed tokens recomputed and the KV
    utilization, with the preemptions per iteration written on the bars.
    Summaries need ``throughput_requests_per_s``, ``mu``, ``mu_calculator``,
    ``recompute_fraction``, ``kv_utilization`` and ``preemptions_per_iteration``.
    Draws into the two ``axes`` when given; returns the figure."""
    fig, (left, right) = panels_for(axes, 2, panel=(6.2, 4.8))
    names = [name for name, _ in rows]
    s = [r.summary for _, r in rows]
    x = np.arange(len(rows))
    measured = [v["throughput_requests_per_s"] or 0.0 for v in s]
    left.bar(x, measured, 0.5, color="tab:blue", zorder=DATA_ZORDER - 1,
             label="measured: saturated sarathi, second half")
    for i, v in enumerate(s):
        left.annotate(f"{measured[i]:.3f}\n({measured[i] / v['mu']:.3f} mu)",
                      (i, 0.5 * measured[i]), ha="center", va="center", color="white",
                      fontsize=9)
    for i, v in enumerate(s):
        mu = v["mu"]
        left.fill_between([i - 0.35, i + 0.35], mu * (1 - tolerance), mu * (1 + tolerance),
                          color="0.85", zorder=0.5,
                          label=f"+- {tolerance:.0%} of mu" if i == 0 else None)
        left.plot([i - 0.35, i + 0.35], [mu, mu], color="black", linewidth=2,
                  zorder=DATA_ZORDER, label="mu = M / (b̄ E[g]), whole prompts" if i == 0 else None)
        left.plot([i - 0.35, i + 0.35], [v["mu_calculator"]] * 2, color="tab:orange",
                  linestyle=":", linewidth=2, zorder=DATA_ZORDER,
                  label="calculator: chunks of 512, continuous moments" if i == 0 else None)
    # room for the legend above the bars
    _bar_panel(left, names, 1.65 * max(v["mu"] for v in s),
               "Throughput against the memory capacity", WORKLOAD, label("throughput", "req/s"))
    recomputed = [v["recompute_fraction"] or 0.0 for v in s]
    used = [v["kv_utilization"] or 0.0 for v in s]
    right.bar(x - WIDTH / 2, [100 * r for r in recomputed], WIDTH, color="tab:red",
              label="tokens recomputed after preemption")
    right.bar(x + WIDTH / 2, [100 * u for u in used], WIDTH, color="tab:green",
              label="KV utilization (time average)")
    for i, v in enumerate(s):
        right.annotate(f"{v['preemptions_per_iteration'] or 0.0:.3f}\npreempt/iter",
                       (i - WIDTH / 2, 100 * recomputed[i]), ha="center", va="bottom",
                       fontsize=8)
    _bar_panel(right, names, 130, "Preemption and memory use", WORKLOAD, label("share", "%"))
    suptitle(fig, title)
    return fig


def plot_memory_boundary(rows: Rows, shown: Sequence[str], title: str,
                         axes: Optional[Sequence[Axes]] = None) -> Figure:
    """Left: pending over time of the rows named in ``shown`` (their first
    seed, recorded with ``timeseries=True``) beside their expected slope from
    mid-run.  Right: the mean pending slope (+- 2 SE over seeds) against the
    load for every variant, beside ``max(0, lambda - mu_sat)`` and the closed
    form ``max(0, lambda - mu)``, with ``mu (1 - delta)`` and ``mu`` marked.
    Rows are a ``memory-boundary`` run: a ``saturated`` row per variant, then
    its load rows.  Draws into the two ``axes`` when given; returns the figure."""
    fig, (left, right) = panels_for(axes, 2, panel=(6.5, 5.0))
    runs_over_time(left, dict(rows), shown, "pending", "expected slope {:.3f} req/s",
                   mid_run=True)
    decorate(left, "Pending over time, below and above mu", label("time", "s"),
             label("pending", "requests"))
    marked = False
    for variant, marker, colour in zip(dict.fromkeys(r.summary["variant"] for _, r in rows),
                                       "os^", ("tab:red", "tab:purple", "tab:green")):
        own = [r.summary for _, r in rows if r.summary["variant"] == variant]
        sat, points = own[0], own[1:]
        loads = np.array([v["load"] for v in points])
        grid = np.linspace(min(0.5, loads.min(initial=1.0)), max(1.6, loads.max(initial=1.0)),
                           300)
        right.plot(grid, np.maximum(0.0, grid * sat["mu"] - sat["mu_sat"]), color=colour,
                   linewidth=1, label=f"{variant}: lambda - mu_sat (mu_sat {sat['mu_sat']:.3f})")
        right.errorbar(loads, [v["slope"] for v in points],
                       yerr=[2 * (v["slope_se"] or 0.0) for v in points], fmt=marker,
                       color=colour, capsize=3, zorder=DATA_ZORDER,
                       label=f"{variant}: measured, {sat['seeds']} seeds, +- 2 SE")
        if not marked:
            right.plot(grid, np.maximum(0.0, (grid - 1) * sat["mu"]), color="black",
                       linestyle=":", label=f"closed form lambda - mu (mu {sat['mu']:.4f})")
            reference_vline(right, 1 - sat["delta"], f"mu (1 - delta) = "
                            f"{sat['mu'] * (1 - sat['delta']):.3f} req/s")
            reference_vline(right, 1.0, f"mu = {sat['mu']:.4f} req/s", linestyle="--")
            marked = True
    decorate(right, "Pending slope over the second half", label("load", "lambda / mu"),
             label("pending slope", "requests/s"))
    suptitle(fig, title)
    return fig


def plot_coprime(rows: Rows, title: str, thresholds: Tuple[float, float] = (0.01, 1.0),
                 ax: Optional[Axes] = None) -> Figure:
    """Preemptions per iteration for each output-length pair, one bar per
    prompt length (the ``vp`` of the rows), on a symlog scale, with the
    "about 0" and "persistent" ``thresholds`` drawn; tick labels give the
    lives (vd + 1) and their gcd.  Summaries need ``vp``, ``vd_a``, ``vd_b``,
    ``gcd`` and ``preemptions_per_iteration``.  Draws into ``ax`` when given;
    returns the figure."""
    fig, ax = figure_for(ax)
    s = [r.summary for _, r in rows]
    pairs = list(dict.fromkeys((v["vd_a"], v["vd_b"]) for v in s))
    prompts = list(dict.fromkeys((v["vp"], v["kv"]) for v in s))
    gcds: Dict[Tuple[int, int], int] = {(v["vd_a"], v["vd_b"]): v["gcd"] for v in s}
    x = np.arange(len(pairs))
    width = 0.8 / max(1, len(prompts))
    for j, ((vp, M), colour) in enumerate(zip(prompts, ("tab:blue", "tab:orange", "tab:gray"))):
        values = {(v["vd_a"], v["vd_b"]): v["preemptions_per_iteration"] or 0.0
                  for v in s if (v["vp"], v["kv"]) == (vp, M)}
        offsets = x - 0.4 + width * (j + 0.5)
        heights = [values.get(p, np.nan) for p in pairs]
        ax.bar(offsets, heights, width, color=colour, zorder=DATA_ZORDER,
               label=f"vp = {vp}, M = {M:,} tokens")
        for xi, h in zip(offsets, heights):
            if np.isfinite(h):
                ax.annotate(f"{h:.3g}", (xi, h), ha="center", va="bottom", fontsize=8)
    reference_hline(ax, thresholds[1], f"persistent: >= {thresholds[1]:g} per iteration")
    reference_hline(ax, thresholds[0], f"about 0: < {thresholds[0]:g}", linestyle=":")
    ax.set_yscale("symlog", linthresh=thresholds[0])
    ax.set_ylim(0, 200)
    ax.set_xticks(x, [f"({a},{b})\nlives ({a + 1},{b + 1})\ngcd {gcds[(a, b)]}"
                      for a, b in pairs])
    decorate(ax, title, label("output lengths (vd_A, vd_B)", "tokens"),
             label("preemptions per iteration", "second half"))
    return fig


def plot_memory_waste(rows: Rows, title: str, expected: Mapping[str, float],
                      area: Optional[Mapping[str, float]] = None,
                      used: Optional[Mapping[str, float]] = None,
                      axes: Optional[Sequence[Axes]] = None) -> Figure:
    """Left: saturated throughput over ``mu`` per policy beside the
    ``expected`` ratio (docs/model.md §6.8.6).  Right: memory area per request over E[g] and KV
    utilization per policy, beside the expected ``area`` and ``used`` ratios
    (by policy, where given).  Rows whose summary has no
    ``throughput_over_mu`` (point C) are left out.  Draws into the two
    ``axes`` when given; returns the figure."""
    fig, (left, right) = panels_for(axes, 2, panel=(6.2, 4.8))
    kept = [(name, r.summary) for name, r in rows if r.summary.get("throughput_over_mu")]
    names = [name for name, _ in kept]
    x = np.arange(len(kept))
    ratios = [v["throughput_over_mu"] for _, v in kept]
    left.bar(x, ratios, 0.55, color="tab:blue", label="measured, second half")
    for i, (r, (_, v)) in enumerate(zip(ratios, kept)):
        left.annotate(f"{r:.3f}\n{v['throughput_requests_per_s']:.2f} req/s", (i, 0.5 * r),
                      ha="center", va="center", color="white", fontsize=9)
    left.plot([i for i, n in enumerate(names) if n in expected],
              [expected[n] for n in names if n in expected], "D", color="black",
              zorder=DATA_ZORDER, label="expected (model §6.8.6)")
    reference_hline(left, 1.0, "mu = M / (b̄ E[g]) (memory capacity)")
    _bar_panel(left, names, 1.3, "Saturated throughput", POLICY,
               label("throughput / mu", "ratio"))
    right.bar(x - WIDTH / 2, [v["area_over_g"] or 0.0 for _, v in kept], WIDTH,
              color="tab:purple", label="memory area per request / E[g]")
    right.bar(x + WIDTH / 2, [v["kv_utilization"] or 0.0 for _, v in kept], WIDTH,
              color="tab:green", label="KV utilization")
    for offset, marks, text in ((-WIDTH / 2, area or {}, "expected area"),
                                (WIDTH / 2, used or {}, "expected utilization")):
        shown = [(i, marks[n]) for i, n in enumerate(names) if n in marks]
        if shown:
            right.plot([i + offset for i, _ in shown], [m for _, m in shown],
                       "D" if offset < 0 else "o", color="black", zorder=DATA_ZORDER,
                       label=f"{text} (model §6.8.6)")
    reference_hline(right, 1.0, "E[g] / a full cache")
    _bar_panel(right, names, 1.45, "Where the memory goes", POLICY,
               label("ratio", "area / E[g], KV used / M"))
    suptitle(fig, title)
    return fig
