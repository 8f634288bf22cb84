"""The stability boundary under KV-cache memory (docs/model.md §6.8.2; Nie et al.'s
Theorems 4.1 and 4.2).

The 1:1 row of Table 1 (prompts and outputs U{10..1600}, every iteration
0.0372 s, M = 131,000 KV tokens, whole prompts, no kmax, a budget that never
binds) has the memory capacity mu = M / (b̄ E[g]) = 3.2645 req/s, and
delta = max(vp + vd) / M = 0.0244.  Poisson arrivals at a fraction of mu, several
seeds per load; the slope of **pending** (requests/s) over the second half of
every run, averaged over the seeds:

* below mu (1 - delta) = 3.185 req/s the slope is statistically 0;
* above mu it is lambda - mu_sat, where mu_sat is the saturated throughput
  measured as in §6.8.1 (a backlog at time 0, arrivals at 1.5 mu, the second
  half of the run), about 3.255 req/s;
* the token backlog grows at about (lambda - mu_sat) E[vp + vd] tokens/s;
* memory is the binding resource: b* = M E[vp + vd] / E[g] = 196 tokens per
  iteration, far below the budget.

The ``chunked`` variant repeats it with ``sarathi`` at bmax = 512 and chunked
prefill; its theory uses Nie's chunked area with ŝ = 512 (within 5%, since
Sarathi's chunks are what is left of the budget, not exactly ŝ).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result, Summary
from llmqueue.experiments import memory_runs as mr
from llmqueue.experiments import nie_table1 as table1
from llmqueue.experiments.base import Check, Param, Rows
from llmqueue.models.arrivals import Poisson
from llmqueue.models.workload import compose
from llmqueue.theory import memory
from llmqueue.theory.stability import measured_verdict

WORKLOAD = table1.BY_NAME["1:1"]
CHUNKED_BMAX = 512
LOADS = (0.6, 0.8, 0.9, 1.1, 1.2, 1.5)   # fractions of mu (docs/model.md §6.8.2)
SEEDS = 8                                # docs/model.md §6.8.2's seeds (the scenario's)
HORIZON = 3000.0                         # docs/model.md §6.8.2's horizon (the scenario's), s
#: The command line's default: fewer seeds and a shorter horizon.
DEFAULT_SEEDS = 3
DEFAULT_HORIZON = 1000.0
#: (variant, bmax, chunked, tolerance of mu_sat against the theory's mu)
VARIANTS: Dict[str, Tuple[int, bool, float]] = {
    "whole": (mr.BMAX, False, table1.TOLERANCE),
    "chunked": (CHUNKED_BMAX, True, 0.05),
}
#: Standard errors a slope above mu may stray from lambda - mu_sat.
SLOPE_SE = 3.0
#: Token backlog per pending request above mu: E[vp + vd] within this share.
TOKENS_TOLERANCE = 0.05


def theory(variant: str, M: int) -> Dict[str, Any]:
    """``mu`` (req/s) and the joint capacity's binding resource for a variant:
    whole prompts, or chunks of 512 (integer moments either way)."""
    bmax, chunked, _ = VARIANTS[variant]
    row = WORKLOAD
    g = table1.mean_area(row, bmax if chunked else None)
    mp, md = table1.uniform_moments(*row.prompt)[0], table1.uniform_moments(*row.output)[0]
    joint = memory.lambda_joint(M, mp, md, g, bmax, mr.constant_time(row.tau))
    return {"mean_g": g, "mu": memory.mu_mem(M, g, row.tau), "binding": joint.binding,
            "b_star": joint.b_star, "mean_tokens": mp + md,
            "delta": memory.delta(row.prompt[1] + row.output[1], M)}


def variants_of(text: str) -> List[str]:
    """``whole``, ``chunked`` or ``whole,chunked``."""
    names = [x.strip() for x in str(text).split(",") if x.strip()]
    if not names or any(x not in VARIANTS for x in names):
        raise ValueError(f"variants must be comma-separated names from "
                         f"{', '.join(VARIANTS)}; got {text!r}")
    return names


def _run(variant: str, M: int, mu: float, horizon: float, seed: int,
         rate: Optional[float] = None) -> Result:
    """One run of ``variant``: Poisson arrivals at ``rate`` from an empty
    system (its time series kept), or saturated (``rate=None``, the second
    half measured)."""
    bmax, chunked, _ = VARIANTS[variant]
    sizes = mr.uniform(*WORKLOAD.prompt), mr.uniform(*WORKLOAD.output)
    if rate is None:
        stream = mr.saturated(mu, *sizes, M, seed)
    else:
        stream = compose(Poisson(rate), *sizes, seed=seed)
    return mr.serve(stream, "sarathi", mr.constant_time(WORKLOAD.tau), M, horizon,
                    warmup=horizon / 2 if rate is None else 0.0, chunked=chunked, bmax=bmax,
                    timeseries=rate is not None)


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """For each variant: a ``saturated`` row (mu_sat over ``seeds`` runs), then
    one row per load with the pending and backlog slopes averaged over
    ``seeds`` runs.  A load row keeps its first seed's time series."""
    M, seeds = params["kv"], params["seeds"]
    horizon = options.horizon or DEFAULT_HORIZON
    base = options.seed or 0
    loads = mr.parse_numbers("loads", params["loads"])
    out: Rows = []
    for variant in variants_of(params["variants"]):
        th = theory(variant, M)
        mu = th["mu"]
        sat = [_run(variant, M, mu, horizon, base + i).summary for i in range(seeds)]
        mu_sat, mu_sat_se = mr.mean_se([s["throughput_requests_per_s"] or 0.0 for s in sat])
        common = {"variant": variant, "kv": M, "seeds": seeds, **th, "mu_sat": mu_sat,
                  "mu_sat_se": mu_sat_se}
        out.append((f"{variant} saturated", Result(Summary.from_mapping({
            **common, "load": None, "throughput_requests_per_s": mu_sat,
            "preemptions_per_iteration": mr.mean_se(
                [s["preemptions_per_iteration"] or 0.0 for s in sat])[0],
            "kv_utilization": mr.mean_se([s["kv_utilization"] or 0.0 for s in sat])[0]}))))
        for load in loads:
            rate = load * mu
            results = [_run(variant, M, mu, horizon, base + i, rate) for i in range(seeds)]
            out.append((f"{variant} {load:.2f} mu",
                        load_row(results, horizon, rate, load, common)))
    return out


def fluid(rate: float, mu: float, mu_sat: float, delta: float) -> Optional[float]:
    """docs/model.md §6.8.2's expected pending slope (req/s): 0 below ``mu (1 - delta)``,
    ``rate - mu_sat`` above ``mu``, no claim in between."""
    if rate <= mu * (1 - delta):
        return 0.0
    return rate - mu_sat if rate > mu else None


def load_row(results: List[Result], horizon: float, rate: float, load: float,
             common: Dict[str, Any]) -> Result:
    """One load's figures over its seeds' runs (recorded with ``timeseries=True``)."""
    slopes = [mr.pending_slope(r, horizon)[0] for r in results]
    slope, slope_se = mr.mean_se([s if s is not None else np.nan for s in slopes])
    backlog, backlog_se = mr.mean_se([r.summary["backlog_slope"] or 0.0 for r in results])
    expected = fluid(rate, common["mu"], common["mu_sat"], common["delta"])
    figures = {**common, "load": load, "rate": rate, "slope": slope, "slope_se": slope_se,
               "fluid_slope": expected, "theory_slope": max(0.0, rate - common["mu"]),
               "backlog_slope": backlog, "backlog_slope_se": backlog_se,
               "verdict": measured_verdict(slope, slope_se, rate),
               "pending_mean": mr.mean_se([r.summary["pending_mean"] for r in results])[0],
               "throughput_requests_per_s": mr.mean_se(
                   [r.summary["throughput_requests_per_s"] or 0.0 for r in results])[0],
               "preemptions_per_iteration": mr.mean_se(
                   [r.summary["preemptions_per_iteration"] or 0.0 for r in results])[0]}
    if expected is not None and slope_se is not None:
        error = float(np.hypot(slope_se, common["mu_sat_se"] or 0.0))
        figures["z"] = (slope - expected) / error if error > 0 else None
    first = results[0]
    return Result(Summary.from_mapping(figures), first.params, series=first.series)


def checks(rows: Rows) -> List[Check]:
    """docs/model.md §6.8.2's expectations on each variant's rows."""
    out = []
    for variant in dict.fromkeys(r.summary["variant"] for _, r in rows):
        s = [(label, r.summary) for label, r in rows if r.summary["variant"] == variant]
        sat = s[0][1]
        tolerance = VARIANTS[variant][2]
        out.append(Check(f"{variant}: saturated throughput within {tolerance:.0%} of mu",
                         abs(sat["mu_sat"] / sat["mu"] - 1) <= tolerance,
                         f"mu_sat {sat['mu_sat']:.4f} req/s against mu {sat['mu']:.4f} "
                         f"({sat['mu_sat'] / sat['mu']:.3f})"))
        out.append(Check(f"{variant}: memory binds", sat["binding"] == "memory",
                         f"binding {sat['binding']}, b* = {sat['b_star']:.0f} tokens"))
        below = [(k, v) for k, v in s[1:] if v["fluid_slope"] == 0.0]
        above = [(k, v) for k, v in s[1:] if v["fluid_slope"] not in (None, 0.0)]
        if below:
            out.append(Check(f"{variant}: pending slope statistically 0 below mu (1 - delta)",
                             all(v["verdict"] == "stable" for _, v in below),
                             "; ".join(f"{k}: {_slope(v)} {v['verdict']}" for k, v in below)))
        if above:
            out.append(Check(f"{variant}: pending slope = lambda - mu_sat above mu "
                             f"(within {SLOPE_SE:g} SE)",
                             all(v.get("z") is not None and abs(v["z"]) <= SLOPE_SE
                                 for _, v in above),
                             "; ".join(f"{k}: {_slope(v)} against {v['fluid_slope']:.3f}"
                                       for k, v in above)))
            out.append(Check(f"{variant}: token backlog grows by E[vp + vd] per pending request "
                             f"(within {TOKENS_TOLERANCE:.0%})",
                             all(abs(_per_request(v) / v["mean_tokens"] - 1) <= TOKENS_TOLERANCE
                                 for _, v in above),
                             "; ".join(f"{k}: {_per_request(v):.0f} against "
                                       f"{v['mean_tokens']:.0f} tokens" for k, v in above)))
    return out


def _per_request(v: Mapping[str, Any]) -> float:
    """Token backlog slope over pending slope (tokens per pending request)."""
    return v["backlog_slope"] / v["slope"] if v["slope"] > 0 else float("inf")


def _slope(v: Mapping[str, Any]) -> str:
    se = "" if v["slope_se"] is None else f" +- {v['slope_se']:.3f}"
    return f"{v['slope']:+.3f}{se} req/s"


def notes(rows: Rows, params: Dict[str, Any]) -> List[str]:
    """The boundary and the token backlog's slope against the pending slope."""
    out = []
    for label, result in rows:
        s = result.summary
        if s["load"] is None:
            out.append(f"{s['variant']}: mu = {s['mu']:.4f}, mu (1 - delta) = "
                       f"{s['mu'] * (1 - s['delta']):.4f}, mu_sat = {s['mu_sat']:.4f} req/s "
                       f"({s['seeds']} saturated runs); E[vp + vd] = {s['mean_tokens']:.0f}")
        elif s["fluid_slope"]:
            out.append(f"{label}: backlog slope {s['backlog_slope']:.0f} tokens/s = "
                       f"{_per_request(s):.0f} tokens per pending request "
                       f"(fluid: {s['fluid_slope'] * s['mean_tokens']:.0f} tokens/s)")
    return out


COLUMNS = [("load", "load", "{:.2f}"), ("rate", "req/s", "{:.3f}"),
           ("throughput_requests_per_s", "served req/s", "{:.3f}"),
           ("slope", "pending slope", "{:+.3f}"), ("slope_se", "+- se", "{:.3f}"),
           ("fluid_slope", "lambda - mu_sat", "{:.3f}"), ("z", "z", "{:+.2f}"),
           ("backlog_slope", "tokens/s", "{:.0f}"),
           ("preemptions_per_iteration", "preempt/iter", "{:.3f}"),
           ("pending_mean", "pending mean", "{:.1f}"), ("verdict", "verdict", "{}")]


EXPERIMENT = mr.register_memory(
    name="memory-boundary",
    summary="model §6.8.2: pending slope against load around mu_mem (1:1 row, M = 131,000), "
            "whole prompts and sarathi-512 chunked",
    params={"loads": Param("str", ",".join(f"{x:g}" for x in LOADS),
                           "comma-separated loads, as fractions of mu"),
            "seeds": Param("int", DEFAULT_SEEDS, "runs per load (model §6.8.2: 8)", low=2),
            "variants": Param("str", ",".join(VARIANTS), "whole, chunked or both"),
            "kv": Param("int", table1.CACHE, "KV cache size (tokens)", low=1)},
    run=run, checks=checks, columns=COLUMNS, notes=notes, horizon=DEFAULT_HORIZON)
