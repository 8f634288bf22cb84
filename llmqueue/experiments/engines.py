"""Fewest engines, by router (docs/model.md §7.10, E8.6).

The engine, workload and SLO of E8.5 (:mod:`llmqueue.experiments.goodput`):
K identical engines (the CodeLlama-34B staircase on one A100-80GB each,
sarathi, ``bmax = 512``) behind a router, 39 req/s in all.
:func:`~llmqueue.planning.plan_engines` starts at ``K_lb = floor(39 / 13.87)
+ 1 = 3`` (fewer engines cannot keep up under any router: Theorem 2 and
Proposition 3), then doubles and bisects on K, with 3 replications a round
(up to 20) of 3600 measured requests each.  A probe still undecided after 20
replications is a *boundary* and counts as not passing.

A row per router (jsq-tokens and random) reports ``K_min``, the attainment at
``K_min`` with its lower CI bound, the Ks that passed, failed or stayed at the
boundary, the per-engine load and the cost at $2.21 per A100-hour.  The checks
are docs/model.md's hard items: ``K_lb = 3``; ``K_min(jsq-tokens) <= K_min(random)``;
every reported K passes with its lower CI bound at least the target; no
reported K failed.  The expected ``K_min`` (3 with jsq-tokens, 4 with
random) is printed beside the measured one, not checked.
"""

from __future__ import annotations

import math
from concurrent.futures import Executor
from typing import Any, Dict, List, Mapping, Optional

from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result, Summary
from llmqueue.experiments.base import Check, Experiment, Param, Rows, engine_params, register
from llmqueue.experiments.goodput import BMAX, PLAN_PARAMS, engine, slo, traffic
from llmqueue.network.routers import router_names
from llmqueue.planning import EnginesResult, plan_engines
from llmqueue.planning.probe import BOUNDARY, FAIL, PASS

RATE = 39.0              # requests/s offered to the pool
ROUTERS = ("jsq-tokens", "random")
REPS = 3                 # replications per round
REQUESTS = 3600          # measured requests per replication
#: docs/model.md §7.10, E8.6's expected K_min by router.
EXPECTED = {"jsq-tokens": 3, "random": 4}


def searches(p: Mapping[str, Any], seed: int = 0, executor: Optional[Executor] = None,
             progress: Optional[bool] = False) -> Dict[str, EnginesResult]:
    """One :func:`~llmqueue.planning.plan_engines` per router of ``p`` (only
    ``p["router"]`` when set, else the two of :data:`ROUTERS`)."""
    if p["bmax"] is None:
        raise ValueError("bmax must be an integer >= 1 here (plan_engines needs a budget); "
                         "got none")
    names = ROUTERS if p["router"] is None else (str(p["router"]),)
    return {name: plan_engines(p["rate"], traffic(p), engine(p, p["scheduler"]), slo(p),
                               p["target"], name, p["goodput1"], reps=p["reps"],
                               max_reps=p["max_reps"], n_requests=p["requests"], seed=seed,
                               executor=executor, progress=progress, price=p["price"])
            for name in names}


def row(name: str, r: EnginesResult) -> Dict[str, Any]:
    """One router's figures: ``K_min``, its probe, the Ks by decision, the cost."""
    by_k = {q.engines: q for q in r.probes}
    best = by_k.get(r.k_min) if r.k_min is not None else None
    simulated = [q for q in r.probes if q.reps]
    lower = None if best is None or best.mean is None or best.hw is None \
        else best.mean - best.hw
    cost = r.cost

    def ks(decision: str) -> List[int]:
        return sorted(k for k, q in by_k.items() if q.decision == decision)
    return {"router": name, "rate": r.rate, "k_min": r.k_min, "k_lb": r.k_lb,
            "lambda_tok": r.bounds.lambda_tok, "load": r.load,
            "decision": None if best is None else best.decision,
            "attainment": None if best is None else best.mean,
            "hw": None if best is None else best.hw, "lower": lower,
            "reps_at_k_min": None if best is None else best.reps,
            "passed_k": ks(PASS), "failed_k": ks(FAIL), "boundary_k": ks(BOUNDARY),
            "probes": len(simulated), "replications": sum(q.reps for q in simulated),
            "stopped_early": sum(q.stopped for q in simulated),
            "non_monotone": r.non_monotone, "target": r.target, "notes": list(r.notes),
            "per_hour": None if cost is None else cost.per_hour,
            "per_million_output": None if cost is None else cost.per_million_output,
            "expected": EXPECTED.get(name), "wall_s": r.seconds}


def rows_of(results: Mapping[str, EnginesResult]) -> Rows:
    """The table's rows, one per router."""
    return [(name, Result(Summary.from_mapping(row(name, r)))) for name, r in results.items()]


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """Search each router (seed ``options.seed``, default 0)."""
    return rows_of(searches(params, options.seed or 0))


def checks(rows: Rows) -> List[Check]:
    """docs/model.md §7.10, E8.6's hard items, on the routers present."""
    found = {label: result.summary for label, result in rows}
    first = next(iter(found.values()))
    rate, bound = first["rate"], first["lambda_tok"]
    k_lb = math.floor(rate / bound) + 1
    out = [Check(f"K_lb = floor({rate:g} / {bound:.2f}) + 1 = {k_lb}",
                 all(s["k_lb"] == k_lb for s in found.values()),
                 ", ".join(f"{k}: {s['k_lb']}" for k, s in found.items()))]
    if "jsq-tokens" in found and "random" in found:
        a, b = found["jsq-tokens"]["k_min"], found["random"]["k_min"]
        out.append(Check("K_min(jsq-tokens) <= K_min(random)",
                         a is not None and (b is None or a <= b),
                         f"{a} vs {b}" + (" (none: no K passed)" if None in (a, b) else "")))
    out.append(Check("every reported K passes with lower CI >= target",
                     all(s["k_min"] is not None and s["decision"] == PASS
                         and s["lower"] >= s["target"] for s in found.values()),
                     ", ".join(f"{k}: K = {s['k_min']}, {s['decision']}, "
                               + ("-" if s["lower"] is None else
                                  f"{s['attainment']:.3f} - {s['hw']:.3f} = {s['lower']:.3f}")
                               for k, s in found.items())))
    out.append(Check("no reported K failed (every smaller K probed did not pass)",
                     all(s["k_min"] is not None
                         and s["k_min"] not in s["failed_k"] + s["boundary_k"]
                         and all(k > s["k_min"] for k in s["passed_k"] if k != s["k_min"])
                         for s in found.values()),
                     "; ".join(f"{k}: passed {s['passed_k']}, failed {s['failed_k']}, "
                               f"boundary {s['boundary_k']}" for k, s in found.items())))
    return out


def notes(rows: Rows, params: Dict[str, Any]) -> List[str]:
    """Measured ``K_min`` against the expected one, and the search's own notes."""
    out = []
    for label, result in rows:
        s = result.summary
        spec = "" if s["expected"] is None else f"; expected {s['expected']} (model §7.10)"
        out.append(f"{label}: K_min = {s['k_min']} (K_lb = {s['k_lb']}){spec}")
        out.extend(f"  {note}" for note in s["notes"])
    return out


#: The table: K_min, its probe, the Ks by decision, the cost.
COLUMNS = [("k_min", "K_min", "{}"), ("k_lb", "K_lb", "{}"), ("load", "load", "{:.3f}"),
           ("attainment", "A at K_min", "{:.3f}"), ("hw", "+- hw", "{:.3f}"),
           ("reps_at_k_min", "reps", "{}"), ("passed_k", "passed K", "{}"),
           ("failed_k", "failed K", "{}"), ("boundary_k", "boundary K", "{}"),
           ("per_hour", "$/h", "{:.2f}"), ("per_million_output", "$/M out", "{:.3f}"),
           ("wall_s", "wall s", "{:.1f}")]


EXPERIMENT = register(Experiment(
    options=frozenset({"seed"}),  # each replication runs its requests until they finish
    name="engines",
    summary="model §7.10, E8.6: fewest engines for 39 req/s under the E8.5 SLO, jsq-tokens "
            "against random (plan_engines)",
    run=run,
    seeded=True,
    checks=checks,
    columns=COLUMNS,
    notes=notes,
    network=True,
    params={**engine_params(memory=False, bmax=BMAX, kmax=None), **PLAN_PARAMS,
            "router": Param("str", None, "only this router (default: jsq-tokens and random)",
                            tuple(router_names())),
            "rate": Param("float", RATE, "requests/s offered to the pool", above=0.0),
            "goodput1": Param("float-or-none", None, "a single engine's goodput (req/s): "
                              "the first guess K = ceil(rate / goodput1) after K_lb fails",
                              above=0.0),
            "reps": Param("int", REPS, "replications per round of a probe", low=2),
            "requests": Param("int", REQUESTS, "measured requests per replication", low=2)},
))
