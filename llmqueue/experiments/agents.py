"""An agent workflow with a fork-join over three engines (docs/model.md §9.4).

Each job asks a *planner* for a plan, fans out to three *workers* that run in
parallel (the job waits for the slowest), may send the result back to the
planner for a review (a random branch), and ends with an *aggregator* call.
Jobs arrive as Poisson.  Work-conserving engines stay stable while every
engine's offered load is below its capacity ``bmax / t_bmax``; the workers'
engine, which gets three calls per job, is the bottleneck.
"""

from __future__ import annotations

from typing import Any, Dict, Generator, List, Tuple

import simpy

from llmqueue.engine.options import NETWORK_OPTIONS, RunOptions
from llmqueue.experiments.base import (Experiment, Param, Rows, engine_kwargs, engine_params,
                                       register)
from llmqueue.network.network import Network, NetworkResult, capacity
from llmqueue.network.workflows import JobContext, JobRecord, job_summary, start_jobs

PLANNER = (300, 50)       # prefill, decode tokens of the planning call
WORKER = (500, 200)       # of each worker call
WORKERS = 3               # parallel worker calls per job
REVIEW = (400, 30)        # of the optional review call, at the planner
AGGREGATOR = (800, 100)   # of the final call
RATE = 1.2                # jobs per second
REVIEW_P = 0.25           # chance a job asks for a review
BMAX = 512
HORIZON = 600.0
ENGINES = ("planner", "worker", "aggregator")


def workflow(review_p: float = REVIEW_P):
    """The job as a generator function of its context."""
    def job(ctx: JobContext) -> Generator[simpy.Event, object, None]:
        yield ctx.call("planner", *PLANNER)
        yield ctx.all(ctx.call("worker", *WORKER) for _ in range(WORKERS))
        if ctx.rng.random() < review_p:
            yield ctx.call("planner", *REVIEW)
        yield ctx.call("aggregator", *AGGREGATOR)
    return job


def expected_tokens_per_job(review_p: float = REVIEW_P) -> Dict[str, float]:
    """Mean tokens each engine receives per job."""
    return {"planner": sum(PLANNER) + review_p * sum(REVIEW),
            "worker": WORKERS * sum(WORKER),
            "aggregator": sum(AGGREGATOR)}


def simulate_agents(params: Dict[str, Any], horizon: float, seed: int,
                    batches: bool = False) -> Tuple[NetworkResult, List[JobRecord]]:
    """Run the jobs; the total row carries the job figures and each engine's
    row its expected load ``load_expected`` beside the measured ``load``.
    Returns the network's results and the job records."""
    kw = engine_kwargs(params)
    net = Network(seed=seed, batches=batches)
    for name in ENGINES:
        net.add_engine(name, kw["policy"], bmax=kw["bmax"], kmax=kw["kmax"],
                       chunked=kw["chunked"], latency=kw["latency"], kv=kw["kv"])
    jobs = start_jobs(net, workflow(params["review"]), params["rate"], seed=seed)
    result = net.run(horizon)
    per_job = expected_tokens_per_job(params["review"])
    for name, engine in net.engines.items():
        cap = capacity(engine)
        result.engines[name].add_figures(
            load_expected=params["rate"] * per_job[name] / cap if cap else None)
    result.total.add_figures(**job_summary(jobs))
    return result, jobs


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """A row per engine (load against capacity) and a total row (job latency)."""
    if not params["rate"] > 0:
        raise ValueError(f"rate must be a number > 0, got {params['rate']!r}")
    if not 0 <= params["review"] <= 1:
        raise ValueError(f"review must be a number in [0, 1], got {params['review']!r}")
    result, _ = simulate_agents(params, options.horizon or HORIZON, options.seed or 0,
                                options.batches)
    return result.rows()


EXPERIMENT = register(Experiment(
    name="agents",
    summary="model §9.4: planner -> 3 parallel workers -> aggregator over three engines",
    params={**engine_params(bmax=BMAX),
            "rate": Param("float", RATE, "jobs per second (Poisson)"),
            "review": Param("float", REVIEW_P, "chance a job asks the planner for a review")},
    run=run,
    network=True,
    options=NETWORK_OPTIONS,
    horizon=HORIZON,
    seeded=True,
))
