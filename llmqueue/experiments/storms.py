"""Preemption storms and metastability under greedy admission; WAIT's larger
stable range (docs/model.md §6.8.3).

One request type, (vp, vd) = (20, 200) tokens (decode-heavy), a KV cache of
M = 100,000 tokens (blocks of 1, lazy admission, preemption by recompute,
``restart="keep"``), whole prompts, no kmax, a budget of 10**6 tokens (memory
binds, never compute) and the linear time t = 0.02 + 2e-5 b s for b tokens.

Closed forms [I]: a request holds g = 24,120 token-iterations, so the cache
finishes at most M / g = 4.146 requests per iteration, b* = 912.1 tokens and
mu_mem = lambda_joint = 108.41 req/s.  WAIT(4) starts 4 whole prompts per
iteration of 0.0376 s: lambda_WAIT = 106.38 req/s with 96,480 tokens of KV.
Below capacity greedy admission has a fluid point: n = lambda c / (1 - lambda
a 220) starts per iteration, 3.265 and 78.7 % of the cache at 95 req/s.

Greedy admission (``sarathi`` + lazy, as vLLM v1) starts every prompt that
fits *now*; all residents then grow by one token per iteration together, the
cache overflows and the youngest are preempted and recomputed: a **storm**.
Once it has started it sustains itself (recompute is prefill work, so
iterations get longer and more requests queue), so the outcome depends on
where the run starts (**metastability**): at 95 req/s an empty start stays at
the fluid point, a start with 3,000 requests waiting stays stuck near
87.7 req/s and never drains.  WAIT's quota keeps the KV at its fixed point:
no preemption, and it drains the same backlog at lambda_WAIT - lambda.

Rows (``cases``), greedy against ``wait(n=4, gate="all", idle="strict")`` on
the same arrivals: ``saturated`` (``initial`` requests at t = 0, Poisson at
1.5 mu_mem), ``95-empty``, ``95-full`` and ``90-full`` (``initial`` at t = 0:
docs/model.md's "or 90 with the same start" is lambda = 90), ``104`` (a storm sets in
after a calm start), ``110`` (both unstable) and greedy alone, saturated,
with a watermark of 1 % or 5 % of the cache on new starts
(``watermark-1%``, ``watermark-5%``: the storms remain).  Figures over the
second half of the run: throughput, preemptions per iteration, recompute
fraction, KV utilization, the pending slope (req/s, as docs/model.md §6.8); also the
preemptions per iteration over the whole run and the first preemption's time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import numpy as np

from llmqueue.common.units import to_seconds
from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result, Summary
from llmqueue.experiments import memory_runs as mr
from llmqueue.experiments.base import Check, Param, Rows
from llmqueue.experiments.greedy_memory import (INITIAL, LINEAR, M, POLICIES, SATURATION, VD, VP,
                                                label, policy, serve, theory)
from llmqueue.models.arrivals import Poisson
from llmqueue.models.workload import Workload, compose
from llmqueue.theory.greedy import fluid_point

HORIZON = 300.0                  # seconds per run (the figures: its second half)

#: docs/model.md §6.8.3's prototype figures [S] and the tolerances the checks allow.
GREEDY_STUCK = 87.7              # req/s, greedy saturated
GREEDY_PREEMPTIONS = 8.9         # per iteration, greedy saturated
GREEDY_RECOMPUTE = 0.31          # share of processed tokens, greedy saturated
WATERMARK_SERVED = 90.5          # req/s, greedy saturated with a watermark (90-91)
STORM_SLOPE = (12.0, 16.0)       # req/s, greedy at 104 req/s
RATE_TOL = 0.05                  # relative, on a rate "about" the expected one
WAIT_TOL = 0.02                  # relative, on WAIT's saturated rate against lambda_WAIT
COUNT_TOL = 0.25                 # relative, on preemptions per iteration
SHARE_TOL = 0.05                 # absolute, on the recompute fraction
KV_TOL = 0.015                   # absolute, on the KV share at greedy's fluid point
KV_FULL = 0.99                   # "KV about 100 %"
SLOPE_TOL = 2.0                  # req/s (or 3 se) on a slope against lambda - throughput
FLAT = 1.0                       # req/s: a pending slope within max(3 se, FLAT) of 0 is flat
CALM = 10.0                      # s: a storm "sets in" after this long without a preemption


@dataclass(frozen=True)
class Case:
    """One row pair of docs/model.md §6.8.3's table and what it expects of it."""

    name: str
    """Its name in ``cases``."""
    rate: Optional[float]
    """Poisson arrivals per second (``None``: saturated, 1.5 mu_mem)."""
    full: bool
    """Whether ``initial`` requests are waiting at t = 0."""
    greedy: str
    """Greedy's expected fate: ``saturated``, ``stable``, ``stuck``
    (metastable), ``storm`` (sets in later), ``unstable`` or ``watermark``."""
    wait: Optional[str]
    """WAIT's: ``saturated``, ``stable``, ``drains`` or ``unstable`` (``None``:
    WAIT does not run this case)."""
    watermark: Optional[float] = None
    """Share of the cache a new start must leave free (greedy only)."""


CASES: Dict[str, Case] = {c.name: c for c in (
    Case("saturated", None, True, "saturated", "saturated"),
    Case("95-empty", 95.0, False, "stable", "stable"),
    Case("95-full", 95.0, True, "stuck", "drains"),
    Case("90-full", 90.0, True, "stuck", "drains"),
    Case("104", 104.0, False, "storm", "stable"),
    Case("110", 110.0, False, "unstable", "unstable"),
    Case("watermark-1%", None, True, "watermark", None, 0.01),
    Case("watermark-5%", None, True, "watermark", None, 0.05))}


def storm_figures(result: Result, horizon: float) -> Dict[str, Any]:
    """A run's figures: the summary's memory figures (second half), the pending
    slope, the preemptions per iteration over the whole run and the time (s) of
    the first preemption (``None``: none).  Needs the batch and pending logs."""
    s = result.summary
    if result.kv_log is None or result.batch_log is None:
        raise ValueError("storm_figures needs a run recorded with batches=True")
    slope, se = mr.pending_slope(result, horizon)
    hits = [b.start for b, k in zip(result.batch_log, result.kv_log) if k.preemptions]
    total = sum(k.preemptions for k in result.kv_log)
    return {key: s.get(key) for key in ("throughput_requests_per_s", "preemptions_per_iteration",
                                          "recompute_fraction", "kv_utilization",
                                          "pending_final", "threshold_error")} | {
        "pending_slope": slope, "pending_slope_se": se,
        "preemptions_whole": total / len(result.kv_log) if result.kv_log else None,
        "storm_onset": to_seconds(hits[0]) if hits else None}


def merged(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Figures over seeds: means (a figure some runs lack is the mean of the
    others; the onset's count of runs that had one is ``storm_runs``); with two
    seeds or more the slope's error is its standard error over the seeds."""
    out: Dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs if r[key] is not None]
        out[key] = float(np.mean(values)) if values else None
    out["pending_final"] = int(round(out["pending_final"]))
    out["storm_runs"] = sum(r["storm_onset"] is not None for r in runs)
    if len(runs) > 1:
        slopes = np.array([r["pending_slope"] for r in runs], dtype=float)
        out["pending_slope_se"] = float(slopes.std(ddof=1) / np.sqrt(len(slopes)))
    return out


def rate_of(case: Case) -> float:
    """Arrivals per second of ``case`` (saturated: 1.5 mu_mem = 162.6)."""
    return case.rate if case.rate is not None else SATURATION * theory()["mu_mem"]


def workload(case: Case, initial: int, seed: int) -> Workload:
    """The arrivals of ``case``: Poisson at :func:`rate_of`, after ``initial``
    requests at t = 0 when it starts full."""
    return compose(Poisson(rate_of(case)), VP, VD, seed=seed, initial=initial if case.full else 0)


def parse_cases(text: str) -> List[Case]:
    """``"saturated,95-full"`` (or ``all``) as cases, in the order given."""
    names = list(CASES) if str(text).strip() == "all" else \
        [x.strip() for x in str(text).split(",") if x.strip()]
    unknown = [x for x in names if x not in CASES]
    if unknown or not names:
        raise ValueError(f"cases must be all or a comma-separated list of "
                         f"{', '.join(CASES)}; got {text!r}")
    return [CASES[x] for x in names]


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """Greedy (and WAIT, where the case has it) per case, on the same arrivals
    (seeds ``seed .. seed + seeds - 1``), figures averaged over the seeds; the
    logs asked for are those of the first seed."""
    horizon = options.horizon or HORIZON
    seeds, initial = params["seeds"], params["initial"]
    rows: Rows = []
    for case in parse_cases(params["cases"]):
        for name in POLICIES if case.wait else POLICIES[:1]:
            runs: List[Dict[str, Any]] = []
            first: Optional[Result] = None
            for k in range(seeds):
                result = serve(workload(case, initial, (options.seed or 0) + k), policy(name),
                               horizon, watermark=case.watermark, requests=options.requests)
                runs.append(storm_figures(result, horizon))
                if first is None:
                    first = result
            assert first is not None
            summary = Summary.from_mapping({
                "case": case.name, "policy": name, "rate": rate_of(case), "seeds": seeds,
                "initial": initial if case.full else 0, "watermark": case.watermark,
                "horizon": horizon, **merged(runs)})
            kept = Result(summary, first.params, first.batch_log if options.batches else None,
                          first.request_log, first.series if options.timeseries else None)
            kept.kv_log = first.kv_log if options.batches else None
            kept.kv_series = first.kv_series if options.timeseries else None
            rows.append((f"{case.name} {label(name)}", kept))
    return rows


def _near(value: Optional[float], target: float, tol: float) -> bool:
    return value is not None and abs(value - target) <= tol


def _flat(s: Summary) -> bool:
    slope, se = s["pending_slope"], s["pending_slope_se"] or 0.0
    return slope is not None and abs(slope) <= max(3 * se, FLAT)


def _rising(s: Summary) -> bool:
    slope, se = s["pending_slope"], s["pending_slope_se"] or 0.0
    return slope is not None and slope > max(3 * se, FLAT)


def _quiet(s: Summary) -> bool:
    return s["preemptions_whole"] == 0 and s["storm_runs"] == 0


def _slope(s: Summary) -> str:
    return f"pending slope {s['pending_slope']:+.2f} +- {s['pending_slope_se'] or 0:.2f} req/s"


#: The figures every row's checks read (a run too short to define one fails).
FIGURES = ("throughput_requests_per_s", "preemptions_per_iteration", "preemptions_whole",
           "recompute_fraction", "kv_utilization", "pending_slope")


def row_checks(s: Summary, th: Dict[str, Any], stuck: float) -> List[Check]:
    """docs/model.md §6.8.3's expectations for one row (``stuck``: greedy's saturated
    throughput, measured when the saturated row ran, else the expected 87.7)."""
    case, rate, served = CASES[s["case"]], s["rate"], s["throughput_requests_per_s"]
    name, lw = f"{s['case']} {label(s['policy'])}", th["lambda_wait"]
    missing = [key for key in FIGURES if s.get(key) is None]
    if missing:
        return [Check(f"{name}: figures defined", False, f"too short a run: "
                      f"{', '.join(missing)} undefined over the second half")]
    se = s["pending_slope_se"] or 0.0
    pre = (f"{s['preemptions_per_iteration']:.2f} preemptions per iteration "
           f"({s['preemptions_whole']:.2f} over the whole run)")
    quiet = Check(f"{name}: no preemption", _quiet(s), pre)
    flat = Check(f"{name}: stable (pending slope within max(3 se, {FLAT:g}) of 0)", _flat(s),
                 _slope(s))
    expect = case.greedy if s["policy"] == "greedy" else case.wait
    if expect == "drains":
        drained = s["pending_final"] < s["initial"] and not _rising(s)
        return [quiet, Check(f"{name}: drains the backlog (fewer pending at the end than the "
                             f"{s['initial']} at t = 0, and not rising)", drained,
                             f"{s['pending_final']} pending at the end; {_slope(s)}")]
    if expect == "saturated" and s["policy"] == "wait":
        return [quiet, Check(f"{name}: serves lambda_WAIT = {lw:.2f} req/s (+-{WAIT_TOL:.0%})",
                             _near(served, lw, WAIT_TOL * lw), f"{served:.2f} req/s")]
    if expect == "unstable" and s["policy"] == "wait":
        fluid = rate - lw
        return [quiet, Check(f"{name}: unstable, slope lambda - lambda_WAIT = {fluid:.2f} req/s "
                             f"(+- max({FLAT:g}, 3 se))", _rising(s) and _near(
                                 s["pending_slope"], fluid, max(FLAT, 3 * se)), _slope(s))]
    if expect == "stable" and s["policy"] == "wait":
        return [quiet, flat]
    if expect == "watermark":
        return [Check(f"{name}: storms remain (>= 1 preemption per iteration; prototype "
                      f"7.5 / 6.4)", s["preemptions_per_iteration"] >= 1, pre),
                Check(f"{name}: about {WATERMARK_SERVED} req/s (+-{RATE_TOL:.0%}), still >= 10 % "
                      "below lambda_WAIT", _near(served, WATERMARK_SERVED,
                                                 RATE_TOL * WATERMARK_SERVED)
                      and served <= 0.9 * lw, f"{served:.2f} req/s ({served / lw:.1%} of "
                      f"lambda_WAIT)")]
    if expect == "saturated":
        return [Check(f"{name}: about {GREEDY_STUCK} req/s (+-{RATE_TOL:.0%}), >= 15 % below "
                      "lambda_WAIT", _near(served, GREEDY_STUCK, RATE_TOL * GREEDY_STUCK)
                      and served <= 0.85 * lw, f"{served:.2f} req/s ({served / lw:.1%} of "
                      f"lambda_WAIT = {lw:.2f})"),
                Check(f"{name}: about {GREEDY_PREEMPTIONS} preemptions per iteration "
                      f"(+-{COUNT_TOL:.0%})", _near(s["preemptions_per_iteration"],
                                                     GREEDY_PREEMPTIONS,
                                                     COUNT_TOL * GREEDY_PREEMPTIONS), pre),
                Check(f"{name}: about {GREEDY_RECOMPUTE:.0%} of processed tokens recomputed "
                      f"(+-{SHARE_TOL * 100:.0f} points)", _near(
                          s["recompute_fraction"], GREEDY_RECOMPUTE, SHARE_TOL),
                      f"{s['recompute_fraction']:.1%}"),
                Check(f"{name}: KV about 100 % (>= {KV_FULL:.0%})",
                      s["kv_utilization"] >= KV_FULL, f"{s['kv_utilization']:.2%}")]
    if expect == "stuck":
        fluid = rate - stuck
        tol = max(SLOPE_TOL, 3 * se)
        # the slope need not be resolved from 0: at 90 req/s, lambda - 87.7 is
        # about one standard error of a 300 s run; the backlog's fate is checked
        return [Check(f"{name}: metastable, stuck at about {GREEDY_STUCK} req/s "
                      f"(+-{RATE_TOL:.0%}) below lambda = {rate:g}", _near(
                          served, GREEDY_STUCK, RATE_TOL * GREEDY_STUCK) and served < rate,
                      f"{served:.2f} req/s"),
                Check(f"{name}: never drains (more pending at the end than the {s['initial']} "
                      "at t = 0)", s["pending_final"] > s["initial"],
                      f"{s['pending_final']} pending at the end"),
                Check(f"{name}: slope lambda - {stuck:.2f} = {fluid:.2f} req/s (+- {tol:.1f})",
                      _near(s["pending_slope"], fluid, tol), _slope(s))]
    if expect == "stable":
        share = fluid_point(rate, VP, VD, LINEAR).kv_tokens / M
        return [quiet, Check(f"{name}: KV at the fluid point {share:.1%} (+-{KV_TOL * 100:.1f} "
                             "points; expected 77-79 %)", _near(s["kv_utilization"], share, KV_TOL),
                             f"{s['kv_utilization']:.2%}"), flat]
    if expect == "storm":
        low, high = STORM_SLOPE
        onset = s["storm_onset"]
        return [Check(f"{name}: a storm sets in after a calm start (first preemption after "
                      f"{CALM:g} s; >= 1 per iteration over the second half)",
                      onset is not None and onset >= CALM
                      and s["preemptions_per_iteration"] >= 1,
                      f"first preemption at {'-' if onset is None else f'{onset:.1f}'} s; "
                      f"{pre}"),
                Check(f"{name}: unstable, slope in the expected {low:g}-{high:g} req/s (+- 3 se)",
                      _rising(s) and low - 3 * se <= s["pending_slope"] <= high + 3 * se,
                      _slope(s))]
    return [Check(f"{name}: unstable (pending slope > max(3 se, {FLAT:g}))", _rising(s),
                  _slope(s))]


def checks(rows: Rows) -> List[Check]:
    """Every row's expectations (:func:`row_checks`)."""
    th = theory()
    found = {(r.summary["case"], r.summary["policy"]): r.summary for _, r in rows}
    saturated = found.get(("saturated", "greedy"))
    stuck = saturated["throughput_requests_per_s"] if saturated else GREEDY_STUCK
    return [c for s in found.values() for c in row_checks(s, th, stuck)]


def notes(rows: Rows, params: Dict[str, Any]) -> List[str]:
    """The closed forms, greedy's fluid points, and what the rows show."""
    th = theory()
    found = {(r.summary["case"], r.summary["policy"]): r.summary for _, r in rows}
    lines = [f"Theory: g = {th['g']:,} token-iterations, fixed point M/g = "
             f"{th['fixed_point']:.3f} starts per iteration, b* = {th['b_star']:.1f} tokens, "
             f"mu_mem = lambda_joint = {th['mu_mem']:.2f} req/s ({th['binding']} binds); "
             f"WAIT({th['wait_n']}): tau = {th['wait_tau']:.4f} s, lambda_WAIT = "
             f"{th['lambda_wait']:.2f} req/s, KV {th['wait_kv']:,} ({th['wait_kv'] / M:.1%})."]
    for rate in sorted({s["rate"] for s in found.values() if s["rate"] < th["mu_mem"]}):
        point = fluid_point(rate, VP, VD, LINEAR)
        lines.append(f"Greedy fluid point at {rate:g} req/s: n = {point.starts:.3f} starts per "
                     f"iteration of {point.iteration * 1e3:.1f} ms, KV {point.kv_tokens:,.0f} "
                     f"({point.kv_tokens / M:.1%}); it fits, yet it is not the only outcome.")
    storm = found.get(("104", "greedy"))
    if storm is not None and storm["preemptions_whole"] is not None:
        lines.append(f"104 req/s, greedy: first preemption at {storm['storm_onset'] or 0:.0f} s; "
                     f"{storm['preemptions_whole']:.2f} preemptions per iteration over the "
                     f"whole {storm['horizon']:g} s (expected: about 5 over 300 s, 7 over 600 s).")
    lines += [
        "Why: greedy admission starts every prompt that fits now. Its residents all grow one "
        "token per iteration, so a cache that was full enough overflows; the youngest are "
        "preempted and recomputed as longer prompts, iterations lengthen, more requests queue "
        "and start together: the storm feeds itself. Started from a backlog, greedy stays in it "
        "below both capacities (metastability); the same load from empty never enters it.",
        f"WAIT starts {th['wait_n']} whole prompts per iteration, so the KV stays at its fixed "
        f"point {th['wait_kv']:,} < M: it never preempts and drains a backlog at lambda_WAIT - "
        "lambda. A static watermark only delays new starts; the residents' synchronised growth, "
        "and the storms, remain."]
    return lines


COLUMNS = [("rate", "req/s in", "{:.1f}"), ("initial", "at t=0", "{:d}"),
           ("throughput_requests_per_s", "served req/s", "{:.2f}"),
           ("preemptions_per_iteration", "preempt/iter", "{:.2f}"),
           ("preemptions_whole", "whole run", "{:.2f}"),
           ("recompute_fraction", "recomputed", "{:.1%}"),
           ("kv_utilization", "KV used", "{:.1%}"),
           ("pending_slope", "pending slope req/s", "{:+.2f}"),
           ("pending_slope_se", "+- se", "{:.2f}"),
           ("storm_onset", "1st preempt s", "{:.0f}"), ("pending_final", "pending end", "{:d}")]

EXPERIMENT = mr.register_memory(
    name="storms",
    summary="model §6.8.3: preemption storms and metastability under greedy admission against "
            "WAIT(4) ((20, 200) tokens, M = 100,000, t = 0.02 + 2e-5 b)",
    params={"cases": Param("str", "all", f"comma-separated cases ({', '.join(CASES)}) or all"),
            "initial": Param("int", INITIAL, "requests at t = 0 in the full starts", low=1),
            "seeds": Param("int", 1, "runs per row (figures averaged)", low=1)},
    run=run, checks=checks, columns=COLUMNS, notes=notes, horizon=HORIZON, recordings=True)
