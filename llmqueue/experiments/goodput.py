"""Goodput of one engine, by scheduler (docs/model.md §7.10, E8.5).

The paper's GPU: the CodeLlama-34B staircase on one A100-80GB, ``bmax = 512``,
no ``kmax``; Poisson arrivals, geometric prompts (mean 129 tokens) and outputs
(mean 112), the means of the paper's Fig. 1; an SLO of TTFT <= 1 s and
TPOT <= 0.15 s, joint, met by at least 90 % of requests.  For each of
sarathi, orca, vllm and fastertransformer, :func:`~llmqueue.planning.plan`
(5 replications a round, 3000 measured requests each) bisects on the arrival
rate below Theorem 2's token bound ``lambda_tok = 13.87`` req/s.

A row reports the goodput ``lo`` with ``[lo, hi]``, the crossing estimate,
``A_0``, the attainment and latencies at ``lo``, and the cost of one A100 at
$2.21 per hour.  The checks are docs/model.md's hard items: every goodput at most
``lambda_tok``; sarathi > orca > vllm > fastertransformer; ``A_0 = 1`` for
sarathi.  The expected values (about 12.5, 11.2, 8.5 and below 0.25
req/s) are printed beside the measured ones, not checked.
"""

from __future__ import annotations

import math
from concurrent.futures import Executor
from typing import Any, Dict, List, Mapping, Optional

from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result, Summary
from llmqueue.experiments.base import (Check, Experiment, Param, Rows, engine_kwargs,
                                       engine_params, register)
from llmqueue.models.sizes import Geometric
from llmqueue.planning import EngineSpec, PlanResult, Traffic, plan
from llmqueue.theory.slo import SLO

#: The paper's four schedulers, best first as docs/model.md §7.10 expects.
SCHEDULERS = ("sarathi", "orca", "vllm", "fastertransformer")
BMAX = 512
PREFILL = 129.0          # mean prompt tokens (geometric)
DECODE = 112.0           # mean output tokens (geometric)
TTFT = 1.0               # seconds
TPOT = 0.15              # seconds
TARGET = 0.9
REPS = 5                 # replications per round
MAX_REPS = 20
REQUESTS = 3000          # measured requests per replication
PRICE = 2.21             # $ per A100-hour (CoreWeave, Feb 2024, Vidur's example)
#: docs/model.md §7.10, E8.5's expected goodputs (req/s; fastertransformer: an upper bound).
EXPECTED = {"sarathi": 12.5, "orca": 11.2, "vllm": 8.5, "fastertransformer": 0.25}

#: Workload and SLO parameters shared with the ``engines`` experiment (E8.6).
PLAN_PARAMS: Dict[str, Param] = {
    "vp": Param("float", PREFILL, "mean prompt tokens (geometric)", low=1.0),
    "vd": Param("float", DECODE, "mean output tokens (geometric)", low=1.0),
    "ttft": Param("float", TTFT, "TTFT threshold (s)", above=0.0),
    "tpot": Param("float", TPOT, "TPOT threshold (s)", above=0.0),
    "target": Param("float", TARGET, "attainment target, in (0, 1)", above=0.0),
    "max_reps": Param("int", MAX_REPS, "most replications of one probe", low=2),
    "price": Param("float", PRICE, "dollars per GPU-hour", low=0.0),
}


def traffic(p: Mapping[str, Any]) -> Traffic:
    """Poisson arrivals of unit rate, geometric prompts and outputs of means
    ``p["vp"]`` and ``p["vd"]``."""
    return Traffic(Geometric(p["vp"]), Geometric(p["vd"]))


def slo(p: Mapping[str, Any]) -> SLO:
    """TTFT and TPOT thresholds, joint."""
    return SLO(ttft=p["ttft"], tpot=p["tpot"])


def engine(p: Mapping[str, Any], scheduler: str) -> EngineSpec:
    """The engine of ``p`` (budget, slots, staircase, chunking) under ``scheduler``."""
    kw = engine_kwargs({**p, "scheduler": scheduler})
    return EngineSpec(scheduler, kw["bmax"], kw["kmax"], kw["latency"], kw["chunked"])


def plans(p: Mapping[str, Any], seed: int = 0, executor: Optional[Executor] = None,
          progress: Optional[bool] = False) -> Dict[str, PlanResult]:
    """One :func:`~llmqueue.planning.plan` per scheduler of ``p`` (only
    ``p["scheduler"]`` when set, else the four of :data:`SCHEDULERS`)."""
    if p["bmax"] is None:
        raise ValueError("bmax must be an integer >= 1 here (plan needs a budget); got none")
    names = SCHEDULERS if p["scheduler"] is None else (str(p["scheduler"]),)
    return {name: plan(traffic(p), engine(p, name), slo(p), p["target"], reps=p["reps"],
                       max_reps=p["max_reps"], n_requests=p["requests"], seed=seed,
                       executor=executor, progress=progress, price=p["price"])
            for name in names}


def row(name: str, r: PlanResult) -> Dict[str, Any]:
    """One scheduler's figures (rates req/s, times s, dollars per GPU-hour and
    per million output tokens at the goodput)."""
    at = r.at_lo
    simulated = [q for q in r.probes if q.reps]
    cost = r.cost

    def first(key: str) -> Optional[float]:
        value = at.get(key)
        return None if value is None else value[0]
    return {"scheduler": name, "goodput": r.goodput, "lo": r.lo,
            "hi": r.hi if math.isfinite(r.hi) else None, "crossing": r.crossing,
            "lambda_tok": r.bounds.lambda_tok, "attainment_zero_load": r.attainment_zero_load,
            "attainment": at.get("attainment"), "hw": at.get("hw"),
            "ttft_p90": first("ttft_p90"), "tpot_p90": first("tpot_p90"),
            "busy_fraction": first("busy_fraction"), "probes": len(simulated),
            "replications": sum(q.reps for q in simulated),
            "stopped_early": sum(q.stopped for q in simulated), "reason": r.reason,
            "per_hour": None if cost is None else cost.per_hour,
            "per_million_output": None if cost is None else cost.per_million_output,
            "per_million_good_output": None if cost is None else cost.per_million_good_output,
            "expected": EXPECTED.get(name), "wall_s": r.seconds}


def rows_of(results: Mapping[str, PlanResult]) -> Rows:
    """The table's rows, one per scheduler."""
    return [(name, Result(Summary.from_mapping(row(name, r)))) for name, r in results.items()]


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """Plan each scheduler (seed ``options.seed``, default 0)."""
    return rows_of(plans(params, options.seed or 0))


def checks(rows: Rows) -> List[Check]:
    """docs/model.md §7.10, E8.5's hard items, on the schedulers present."""
    found = {label: result.summary for label, result in rows}
    out = [Check("every goodput <= lambda_tok",
                 all(s["goodput"] <= s["lambda_tok"] for s in found.values()),
                 ", ".join(f"{k} {s['goodput']:.3f}" for k, s in found.items())
                 + f" vs lambda_tok {next(iter(found.values()))['lambda_tok']:.3f} req/s")]
    order = [name for name in SCHEDULERS if name in found]
    if len(order) > 1:
        values = [found[name]["goodput"] for name in order]
        out.append(Check(" > ".join(order), all(a > b for a, b in zip(values, values[1:])),
                         " > ".join(f"{v:.3f}" for v in values) + " req/s"))
    if "sarathi" in found:
        a0 = found["sarathi"]["attainment_zero_load"]
        out.append(Check("A_0 = 1 for sarathi", a0 == 1.0, f"A_0 = {a0}"))
    return out


def notes(rows: Rows, params: Dict[str, Any]) -> List[str]:
    """Measured against the expected goodput, and the boundary notes."""
    out = []
    for label, result in rows:
        s = result.summary
        expected = s["expected"]
        spec = "" if expected is None else (
            f"; expected below {expected:g} (model §7.10)" if label == "fastertransformer"
            else f"; expected about {expected:g} (model §7.10)")
        hi = "inf" if s["hi"] is None else f"{s['hi']:.3f}"
        crossing = "-" if s["crossing"] is None else f"{s['crossing']:.3f}"
        out.append(f"{label}: goodput {s['goodput']:.3f} req/s in [{s['lo']:.3f}, {hi}], "
                   f"crossing {crossing}{spec}"
                   + (f" ({s['reason']})" if s["reason"] else ""))
    return out


#: The table: goodput, bounds, figures at lo, cost.
COLUMNS = [("goodput", "goodput", "{:.3f}"), ("hi", "hi", "{:.3f}"),
           ("crossing", "crossing", "{:.3f}"), ("lambda_tok", "lambda_tok", "{:.2f}"),
           ("attainment_zero_load", "A_0", "{:.3f}"), ("attainment", "A at lo", "{:.3f}"),
           ("hw", "+- hw", "{:.3f}"), ("ttft_p90", "TTFT p90 s", "{:.3f}"),
           ("tpot_p90", "TPOT p90 s", "{:.3f}"), ("probes", "probes", "{:d}"),
           ("replications", "reps", "{:d}"), ("per_hour", "$/h", "{:.2f}"),
           ("per_million_output", "$/M out", "{:.3f}"), ("wall_s", "wall s", "{:.1f}")]


EXPERIMENT = register(Experiment(
    options=frozenset({"seed"}),  # each replication runs its requests until they finish
    name="goodput",
    summary="model §7.10, E8.5: goodput of one engine under a TTFT/TPOT SLO, by scheduler "
            "(plan; staircase, bmax 512, geometric 129/112)",
    run=run,
    seeded=True,
    checks=checks,
    columns=COLUMNS,
    notes=notes,
    params={**engine_params(memory=False, scheduler=None, bmax=BMAX, kmax=None),
            **PLAN_PARAMS,
            "reps": Param("int", REPS, "replications per round of a probe", low=2),
            "requests": Param("int", REQUESTS, "measured requests per replication", low=2)},
))
