"""Shared system prompts multiply an engine's capacity: Theorem 2 with hits.

Requests come from G = 8 prefix groups of Zipf popularity (s = 1): each
prompt is its group's 1024 shared tokens followed by a suffix of its own
(geometric, mean 128), and it decodes a geometric number of tokens (mean
128).  The engine is sarathi with bmax = 512, no kmax, the CodeLlama-34B
staircase (t(512) = 0.15316 s, 3342.9 tokens/s) and a KV cache of
M = 2,000,000 tokens in blocks of 16 (hash blocks of 16) that never binds.

Once every group's prefix is cached a request finds E[c] = 1024 of its
E[vp] = 1152 prompt tokens cached, so Theorem 2 at the tokens it really
computes gives the capacity with hits

    lambda*_c = (bmax / t(bmax)) / (E[vp] - E[c] + E[vd]) = 3342.9 / 256 = 13.06 req/s,

five times the 2.61 req/s of the same engine without the cache
(1280 / 256 = 5).  Runs of 4,000 Poisson arrivals, 3 seeds, judged by the
slope of pending requests over the second half of the arrivals (the runs end
at their last arrival) and its standard error over the seeds:

* at 0.9 lambda*_c with the cache the queue holds, with about 89% of the
  prompt tokens found cached;
* at 1.1 lambda*_c it grows, at about lambda - lambda*_c requests/s;
* at the same 0.9 lambda*_c without the cache (4.5 times its capacity) the
  backlog grows at lambda (E[vp] + E[vd]) - bmax / t(bmax) = 11,700 tokens/s.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result, Summary
from llmqueue.experiments import memory_runs as mr
from llmqueue.experiments.base import Check, Column, Experiment, Param, Rows, register
from llmqueue.experiments.prefix_runs import BMAX, KV_BLOCK, LATENCY, serve
from llmqueue.models.prefixes import PrefixGroups
from llmqueue.models.sizes import Geometric
from llmqueue.models.workload import Workload
from llmqueue.theory import capacity
from llmqueue.theory.prefix import group_mean_hit, lambda_star_cached, prefix_gain
from llmqueue.theory.stability import measured_verdict

GROUPS = 8
ZIPF = 1.0
SHARED = 1024                 # tokens a group's prompts share
SUFFIX = Geometric(128)       # each prompt's own tokens
DECODE = Geometric(128)
CACHE = 2_000_000             # M: KV tokens
REQUESTS = 4_000
SEEDS = 3
#: (label, load as a fraction of lambda*_c, prefix cache on)
RUNS: Tuple[Tuple[str, float, bool], ...] = (
    ("0.90 lambda*_c", 0.9, True), ("1.10 lambda*_c", 1.1, True),
    ("0.90 lambda*_c, no cache", 0.9, False))
#: The hit ratio the stable run must exceed.
HIT_FLOOR = 0.85
#: The backlog slope without the cache against the fluid slope: within this share.
BACKLOG_TOLERANCE = 0.05
#: Standard errors the overloaded run's pending slope may stray above its fluid slope.
SLOPE_SE = 3.0
#: What ``llmqueue list`` says it runs.
SUMMARY = ("shared system prompts: stable at 0.9 and unstable at 1.1 of the capacity with "
           "hits, unstable at 0.9 of it without the cache")
#: The ``--set`` parameters: the runs' size and count, and the cache.
PARAMS: Dict[str, Param] = {
    "count": Param("int", REQUESTS, "Poisson arrivals per run (it ends at the last)", low=2),
    "seeds": Param("int", SEEDS, "runs per row, seeds from --seed on", low=1),
    "kv": Param("int", CACHE, "KV cache M (tokens)", low=KV_BLOCK)}


def theory() -> Dict[str, float]:
    """The closed forms: mean prompt, hit and output (tokens), ``lambda_star_c``
    and ``lambda_star_none`` (req/s), their ratio ``gain`` and the token
    capacity ``bmax / t(bmax)`` (tokens/s)."""
    vp, vd = SHARED + SUFFIX.mean, DECODE.mean
    hit = group_mean_hit(SHARED, KV_BLOCK, SUFFIX)
    return {"mean_prompt": vp, "mean_hit": hit, "mean_decode": vd,
            "lambda_star_c": lambda_star_cached(BMAX, vp, vd, hit, LATENCY),
            "lambda_star_none": capacity.lambda_star(BMAX, vp, vd, LATENCY),
            "gain": prefix_gain(vp, vd, hit),
            "token_capacity": BMAX / LATENCY.tokens_time(BMAX)}


def workload(rate: float, count: int, seed: int, prefix: bool) -> Workload:
    """``count`` Poisson arrivals at ``rate`` from the prefix groups (without
    their ids for an engine without the cache)."""
    groups = PrefixGroups(GROUPS, ZIPF, SHARED, SUFFIX, DECODE, rate=rate, count=count,
                          seed=seed, hash_block=KV_BLOCK)
    return groups if prefix else groups.without_ids()


def measure(rate: float, count: int, seed: int, M: int, prefix: bool) -> Result:
    """One run on the shared engine until its last arrival, its time series
    kept, with the slope of pending over its second half (``pending_slope``
    +- ``pending_slope_se``, req/s) and the arrivals per second of that half
    (``arrival_rate_late``) added."""
    work = workload(rate, count, seed, prefix)
    times = np.array([a.time for a in work])
    span = float(times[-1])
    result = serve(work, M, prefix, horizon=span, timeseries=True)
    slope, slope_se = mr.pending_slope(result, span)
    late = int(np.count_nonzero((times >= span / 2) & (times < span))) / (span / 2)
    result.add_figures(pending_slope=slope, pending_slope_se=slope_se, span=span,
                       arrival_rate_late=late)
    return result


def _mean(results: Sequence[Result], key: str) -> Tuple[Optional[float], Optional[float]]:
    """Mean over the seeds of ``key`` and its standard error (``None`` where undefined)."""
    values = [r.summary[key] for r in results]
    if any(v is None for v in values):
        return None, None
    return mr.mean_se(values)


def summarise(results: Sequence[Result], load: float, prefix: bool, count: int, M: int,
              th: Dict[str, float]) -> Result:
    """One row from its seeds' runs: means and standard errors over the seeds
    (one seed: the slopes' own errors over their windows), the measured
    verdict and the fluid slopes; the first seed's time series is kept."""
    rate = load * th["lambda_star_c"]
    slope, slope_se = _mean(results, "pending_slope")
    backlog, backlog_se = _mean(results, "backlog_slope")
    if len(results) == 1:
        slope_se = results[0].summary["pending_slope_se"]
        backlog_se = results[0].summary["backlog_slope_se"]
    hit, hit_se = _mean(results, "prefix_hit_ratio") if prefix else (None, None)
    star, _ = _mean(results, "lambda_star_effective") if prefix else (None, None)
    capacity_now = th["lambda_star_none"] if star is None else star
    verdict = measured_verdict(slope, slope_se, rate)
    late, _ = _mean(results, "arrival_rate_late")
    if not prefix:
        fluid_backlog: Optional[float] = capacity.fluid_slope(
            rate, BMAX, th["mean_prompt"], th["mean_decode"], LATENCY)
    else:  # above capacity the backlog's whole unstarted prompts make no fluid figure
        fluid_backlog = 0.0 if rate < capacity_now else None
    figures = {**th, "load": load, "rate": rate, "prefix": prefix, "seeds": len(results),
               "requests": count, "kv": M,
               "prefix_hit_ratio": hit, "prefix_hit_ratio_se": hit_se,
               "lambda_star_effective": star,
               "pending_slope": slope, "pending_slope_se": slope_se,
               "fluid_slope": max(0.0, rate - capacity_now),
               "backlog_slope": backlog, "backlog_slope_se": backlog_se,
               "fluid_backlog_slope": fluid_backlog, "verdict": verdict,
               # what an overloaded engine serves: arrivals less growth, over the second half
               "served_rate": late - slope if verdict == "unstable" and late and slope else None,
               "pending_slopes": [r.summary["pending_slope"] for r in results],
               "backlog_slopes": [r.summary["backlog_slope"] for r in results],
               "pending_mean": float(np.mean([r.summary["pending_mean"] for r in results]))}
    first = results[0]
    return Result(Summary.from_mapping(figures), first.params, series=first.series)


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """The three runs of :data:`RUNS`, ``seeds`` seeds each from ``--seed`` on
    (the same arrivals for the runs with and without the cache)."""
    th = theory()
    base = options.seed or 0
    out: Rows = []
    for label, load, prefix in RUNS:
        rate = load * th["lambda_star_c"]
        results = [measure(rate, params["count"], seed, params["kv"], prefix)
                   for seed in range(base, base + params["seeds"])]
        out.append((label, summarise(results, load, prefix, params["count"], params["kv"], th)))
    return out


def checks(rows: Rows) -> List[Check]:
    """The closed forms, then each run's verdict and figures."""
    th = rows[0][1].summary if rows else theory()
    out = [Check("capacity with every group's prefix cached: 13.06 req/s, 5 times the "
                 "capacity without the cache",
                 abs(th["lambda_star_c"] - 13.06) <= 0.005 and abs(th["gain"] - 5) <= 1e-9,
                 f"lambda*_c = {th['lambda_star_c']:.4f} req/s, without: "
                 f"{th['lambda_star_none']:.4f} req/s, gain {th['gain']:.3f}")]
    for label, result in rows:
        s = result.summary
        slope = _slope(s)
        if s["prefix"] and s["load"] < 1:
            hit = s["prefix_hit_ratio"]
            out.append(Check(f"{label}: stable, hit ratio above {HIT_FLOOR:g}",
                             s["verdict"] == "stable" and hit is not None and hit > HIT_FLOOR,
                             f"{slope} {s['verdict']}, hit ratio {_hit(s)}"))
        elif s["prefix"]:
            bound = s["fluid_slope"] + SLOPE_SE * (s["pending_slope_se"] or 0.0)
            out.append(Check(f"{label}: unstable, pending grows by at most lambda - "
                             f"lambda*_c (+ {SLOPE_SE:g} SE)",
                             s["verdict"] == "unstable" and s["pending_slope"] <= bound,
                             f"{slope} {s['verdict']}, fluid {s['fluid_slope']:.2f} req/s "
                             f"(lambda*_c with the measured hits "
                             f"{s['lambda_star_effective']:.3f} req/s)"))
        else:
            fluid = s["fluid_backlog_slope"]
            out.append(Check(f"{label}: unstable, backlog grows at the fluid slope "
                             f"(within {BACKLOG_TOLERANCE:.0%})",
                             s["verdict"] == "unstable" and s["backlog_slope"] is not None
                             and abs(s["backlog_slope"] / fluid - 1) <= BACKLOG_TOLERANCE,
                             f"{s['backlog_slope']:,.0f} against {fluid:,.0f} tokens/s, "
                             f"{slope} {s['verdict']}"))
    return out


def _slope(s: Any) -> str:
    se = s["pending_slope_se"]
    return f"pending slope {s['pending_slope']:+.3f}" + \
        ("" if se is None else f" +- {se:.3f}") + " req/s"


def _hit(s: Any) -> str:
    se = s["prefix_hit_ratio_se"]
    return f"{s['prefix_hit_ratio']:.4f}" + ("" if se is None else f" +- {se:.4f}")


def notes(rows: Rows, params: Dict[str, Any]) -> List[str]:
    """The capacities, and what each run measured against them."""
    if not rows:
        return []
    th = rows[0][1].summary
    out = [f"capacity: {th['token_capacity']:.1f} tokens/s over E[vp] - E[c] + E[vd] = "
           f"{th['mean_prompt']:g} - {th['mean_hit']:g} + {th['mean_decode']:g} tokens: "
           f"lambda*_c = {th['lambda_star_c']:.3f} req/s; without the cache "
           f"{th['lambda_star_none']:.3f} req/s ({th['gain']:.1f} times less)",
           f"{th['seeds']} seed{'s' if th['seeds'] > 1 else ''} x {th['requests']:,} "
           f"requests, M = {th['kv']:,} KV tokens; slopes over the second half of the "
           "arrivals, +- their standard error over the seeds"]
    for label, result in rows:
        s = result.summary
        line = f"{label}: {s['rate']:.3f} req/s, {_slope(s)}, backlog slope " \
               f"{s['backlog_slope']:+,.0f}" + (f" +- {s['backlog_slope_se']:,.0f}"
                                               if s["backlog_slope_se"] is not None else "") \
               + " tokens/s"
        if s["prefix"]:
            line += f", hit ratio {_hit(s)}"
        if s["served_rate"] is not None:
            line += f"; it serves {s['served_rate']:.2f} req/s"
        out.append(line)
    return out


COLUMNS: Sequence[Column] = [
    ("rate", "req/s", "{:.3f}"), ("prefix_hit_ratio", "hit ratio", "{:.4f}"),
    ("pending_slope", "pending slope", "{:+.3f}"), ("pending_slope_se", "+- se", "{:.3f}"),
    ("fluid_slope", "fluid", "{:.3f}"), ("backlog_slope", "tokens/s", "{:+,.0f}"),
    ("backlog_slope_se", "+- se", "{:,.0f}"), ("fluid_backlog_slope", "fluid", "{:,.0f}"),
    ("pending_mean", "pending mean", "{:.1f}"), ("verdict", "verdict", "{}")]


EXPERIMENT = register(Experiment(
    "prefix-capacity", SUMMARY, PARAMS, run, seeded=True, options=frozenset({"seed"}),
    checks=checks, columns=COLUMNS, notes=notes))
