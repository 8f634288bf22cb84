"""Prefill and decode on separate engine pools (the DistServe idea).

Disaggregated: a request's prefill and its first token run on a *prefill*
engine; its KV cache (``vp + 1`` tokens) then travels to a *decode* engine (a
fixed transfer delay), which produces the remaining ``vd - 1`` tokens with no
prompt to prefill: the decode hop arrives prefilled (``Engine.call(...,
prefilled=True)``), so it holds the transferred KV from its start (with
``kv=``) and its iterations read it (with ``latency=roofline``).  Colocated:
the same number of GPUs, each doing both, behind JSQ by tokens.  Both get the
same jobs (Poisson times, geometric sizes, one seed).

Decode-only batches are small and fast on the staircase, so disaggregation
cuts the time per output token; the prefill pool, with fewer GPUs than the
whole fleet, is the first to saturate, which bounds the load the split holds.
"""

from __future__ import annotations

from typing import Any, Dict, Generator, List, Tuple

import simpy

from llmqueue.common.percentiles import named_percentiles
from llmqueue.common.units import MAX_SECONDS, to_seconds
from llmqueue.engine.options import NETWORK_OPTIONS, RunOptions
from llmqueue.engine.results import Result
from llmqueue.experiments.base import (Experiment, Param, Rows, engine_kwargs, engine_params,
                                       register)
from llmqueue.models.sizes import Geometric
from llmqueue.network.network import Network
from llmqueue.network.workflows import JobContext, JobRecord, start_jobs
from llmqueue.theory import capacity as theory

GPUS = 4
PREFILL_GPUS = 3
TRANSFER = 0.01          # seconds to move a request's KV cache
LOAD = 0.6               # fraction of the colocated lambda*
PREFILL = 1000           # mean prefill tokens
DECODE = 100             # mean decode tokens
BMAX = 512
HORIZON = 600.0


def sizes(ctx: JobContext, params: Dict[str, Any]) -> Tuple[int, int]:
    """A request's (prefill, decode) tokens: geometric with the given means."""
    return Geometric(params["vp"]).draw(ctx.rng), Geometric(params["vd"]).draw(ctx.rng)


def colocated(params: Dict[str, Any]):
    """The whole request on one engine of the colocated pool."""
    def job(ctx: JobContext) -> Generator[simpy.Event, object, None]:
        vp, vd = sizes(ctx, params)
        yield ctx.call("colocated", vp, vd)
    return job


def disaggregated(params: Dict[str, Any]):
    """Prefill and first token on the prefill pool, transfer, the rest on the decode pool."""
    def job(ctx: JobContext) -> Generator[simpy.Event, object, None]:
        vp, vd = sizes(ctx, params)
        yield ctx.call("prefill", vp, 1)
        if vd > 1:
            yield ctx.delay(params["transfer"])
            yield ctx.call("decode", vp + 1, vd - 1, prefilled=True)
    return job


def request_figures(jobs: List[JobRecord]) -> Dict[str, Any]:
    """TTFT and TPOT of whole requests from their calls (seconds): TTFT from
    arrival to the first output token, TPOT over the remaining tokens
    (transfer included); requests that failed (a hop that can never fit its
    engine's KV cache) are counted apart."""
    ttft, tpot, e2e = [], [], []
    for job in jobs:
        first = job.calls[0].resident
        if first is None:
            continue
        assert first.first_token is not None  # a finished request has its first token
        ttft.append(to_seconds(first.first_token - job.start))
        if job.end is not None:
            e2e.append(to_seconds(job.end - job.start))
            last = job.calls[-1].resident
            assert last is not None  # the job ended after its last call finished
            vd = first.vd - 1 + (last.vd if len(job.calls) > 1 else 1)
            if vd > 1:
                tpot.append(to_seconds(job.end - first.first_token) / (vd - 1))
    out: Dict[str, Any] = {"requests": len(jobs), "requests_completed": len(e2e),
                           "requests_failed": sum(job.failed is not None for job in jobs)}
    for name, values in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
        out.update(named_percentiles(name, values))
    return out


def load_limit(params: Dict[str, Any], mode: str) -> float:
    """The highest load (fraction of the colocated lambda*) the mode holds when
    each pool's token rate must stay below its capacity (docs/model.md §9.2 per pool):
    colocated 1; disaggregated, the tighter of the prefill pool (``vp + 1``
    tokens per request) and the decode pool (``vd - 1`` tokens per request)."""
    if mode == "colocated":
        return 1.0
    gpus, prefill_gpus = params["gpus"], params["prefill_gpus"]
    tokens = params["vp"] + params["vd"]
    return min(prefill_gpus / gpus * tokens / (params["vp"] + 1),
               (gpus - prefill_gpus) / gpus * tokens / (params["vd"] - 1))


def simulate_mode(params: Dict[str, Any], mode: str, horizon: float, seed: int,
                  batches: bool = False
                  ) -> List[Tuple[str, Result]]:
    """One mode's rows: each pool, then ``total`` with whole-request figures."""
    kw = engine_kwargs(params)
    engine = dict(policy=kw["policy"], bmax=kw["bmax"], kmax=kw["kmax"],
                  chunked=kw["chunked"], latency=kw["latency"], kv=kw["kv"])
    gpus, prefill_gpus = params["gpus"], params["prefill_gpus"]
    if not 1 <= prefill_gpus < gpus:
        raise ValueError(f"prefill_gpus must be an integer in 1..gpus-1={gpus - 1}, "
                         f"got {prefill_gpus!r}")
    net = Network(seed=seed, batches=batches)
    if mode == "colocated":
        net.add_replicas("colocated", gpus, **engine)
        pools = ["colocated"]
        workflow = colocated(params)
    else:
        net.add_replicas("prefill", prefill_gpus, **engine)
        net.add_replicas("decode", gpus - prefill_gpus, **engine)
        pools = ["prefill", "decode"]
        workflow = disaggregated(params)
    rate = params["load"] * gpus * theory.lambda_star(kw["bmax"], params["vp"], params["vd"],
                                                      kw["latency"])
    jobs = start_jobs(net, workflow, rate, seed=seed)
    result = net.run(horizon)
    rows = [(f"{mode}/{pool}", net.combine([pool])) for pool in pools] if mode != "colocated" \
        else []
    total = result.total
    total.add_figures(**request_figures(jobs), arrival_rate=rate,
                      load_limit=load_limit(params, mode))
    rows.append((f"{mode}/total", total))
    return rows


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """Colocated then disaggregated rows at the same load on the same GPUs."""
    if params["bmax"] is None:
        raise ValueError("bmax must be an integer >= 1 here (lambda* needs a budget), got None")
    if not params["load"] > 0:
        raise ValueError(f"load must be a number > 0, got {params['load']!r}")
    if params["vp"] < 1 or params["vd"] < 2:
        raise ValueError(f"vp must be >= 1 and vd >= 2 (a decode hop needs a token left); "
                         f"got vp={params['vp']!r}, vd={params['vd']!r}")
    rows: Rows = []
    for mode in ("colocated", "disaggregated"):
        rows.extend(simulate_mode(params, mode, options.horizon or HORIZON, options.seed or 0,
                                  options.batches))
    return rows


EXPERIMENT = register(Experiment(
    name="disaggregated",
    summary="prefill and decode on separate pools against the same GPUs colocated",
    params={**engine_params(bmax=BMAX, kmax=None),
            "gpus": Param("int", GPUS, "engines in all, in both modes"),
            "prefill_gpus": Param("int", PREFILL_GPUS, "of them, prefill engines (disaggregated)"),
            "transfer": Param("float", TRANSFER, "KV-cache transfer delay (s)", low=0.0,
                              high=MAX_SECONDS),
            "load": Param("float", LOAD, "arrival rate as a fraction of the colocated lambda*"),
            "vp": Param("int", PREFILL, "mean prefill tokens (geometric)"),
            "vd": Param("int", DECODE, "mean decode tokens (geometric)")},
    run=run,
    network=True,
    options=NETWORK_OPTIONS,
    horizon=HORIZON,
    seeded=True,
))
