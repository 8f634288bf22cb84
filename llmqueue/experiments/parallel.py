"""K identical engines behind a router (docs/model.md §9.3, Prop. 3).

Poisson arrivals at a fraction ``load`` of the K-engine capacity
``lambda* = K * (bmax / t_bmax) / (m_p + m_d)``, ``bmax = 512`` and no kmax (as
in docs/model.md §9.2's check case).  Sizes are geometric (the discrete exponential) with
means 1000 prefill + 100 decode tokens by default, or fixed (``sizes=fixed``):
with fixed sizes round-robin is as good as any router, with variable ones only
the state-aware routers are.
Join-the-shortest-queue by unprocessed tokens keeps every engine busy whenever
any has work; random routing leaves some idle while others queue.
"""

from __future__ import annotations

from typing import Any, Dict

from llmqueue.common import validation
from llmqueue.engine.options import NETWORK_OPTIONS, RunOptions
from llmqueue.experiments.base import (Experiment, Param, Rows, engine_kwargs, engine_params,
                                       register)
from llmqueue.models.sizes import Geometric
from llmqueue.models.workload import Workload, poisson
from llmqueue.network.classes import RequestClass, class_stream
from llmqueue.network.network import Network, NetworkResult
from llmqueue.network.routers import check_traffic, router_names
from llmqueue.theory import capacity as theory

ENGINES = 4
LOAD = 0.95
PREFILL = 1000
DECODE = 100
BMAX = 512
HORIZON = 600.0


def arrival_rate(params: Dict[str, Any]) -> float:
    """Requests per second: ``load`` times the K-engine ``lambda*``."""
    latency = engine_kwargs(params)["latency"]
    if params["bmax"] is None:
        raise ValueError("bmax must be an integer >= 1 here (lambda* needs a budget), got None")
    engines = validation.positive_int("engines", params["engines"])
    return params["load"] * engines * theory.lambda_star(params["bmax"], params["vp"],
                                                         params["vd"], latency)


def workload(params: Dict[str, Any], seed: int) -> Workload:
    """Poisson arrivals at :func:`arrival_rate`, sizes fixed or geometric."""
    geometric = params["sizes"] == "geometric"  # sizes 1, 2, ...: a mean of at least 1
    validation.token_count("vp", params["vp"], minimum=1 if geometric else 0)
    validation.token_count("vd", params["vd"], minimum=1)
    rate = arrival_rate(params)
    if params["sizes"] == "fixed":
        return poisson(rate, params["vp"], params["vd"], seed=seed)
    return class_stream([RequestClass("request", rate, Geometric(params["vp"]),
                                      Geometric(params["vd"]))], seed=seed)


def simulate_router(params: Dict[str, Any], router: str, horizon: float, seed: int,
                    batches: bool = False) -> NetworkResult:
    """One run of ``engines`` replicas behind ``router``."""
    kw = engine_kwargs(params)
    net = Network(seed=seed, batches=batches)
    net.add_replicas("engine", params["engines"], router, policy=kw["policy"],
                     bmax=kw["bmax"], kmax=kw["kmax"], chunked=kw["chunked"],
                     latency=kw["latency"], kv=kw["kv"])
    net.feed("engine", workload(params, seed))
    return net.run(horizon)


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """One router: a row per engine and a ``total`` row.  ``router=all``: the
    ``total`` row of each router of docs/model.md §9.3, labelled by the router (the
    cache-aware ones of docs/model.md §8.6 route this workload, without ids, as
    jsq-tokens does)."""
    if params["load"] <= 0:
        raise ValueError(f"load must be a number > 0, got {params['load']!r}")
    routers = router_names(cache_aware=False) if params["router"] == "all" else [params["router"]]
    check_traffic(routers[0], ids=False)  # its workload carries no prefix ids
    rows: Rows = []
    for router in routers:
        result = simulate_router(params, router, options.horizon or HORIZON, options.seed or 0,
                                 options.batches)
        for _, r in result.rows():
            r.add_figures(router=router)
        rows.extend(result.rows() if len(routers) == 1 else [(router, result.total)])
    return rows


EXPERIMENT = register(Experiment(
    name="parallel",
    summary="model §9.3: K engines behind a router at a fraction of the K-engine lambda*",
    params={**engine_params(bmax=BMAX, kmax=None),
            "engines": Param("int", ENGINES, "number of identical engines K"),
            "router": Param("str", "jsq-tokens",
                            "router (all: one total row per router that reads no cache)",
                            tuple(router_names()) + ("all",)),
            "load": Param("float", LOAD, "arrival rate as a fraction of the K-engine lambda*"),
            "sizes": Param("str", "geometric", "size law", ("geometric", "fixed")),
            "vp": Param("int", PREFILL, "prefill tokens per request (mean)"),
            "vd": Param("int", DECODE, "decode tokens per request (mean)")},
    run=run,
    network=True,
    options=NETWORK_OPTIONS,
    horizon=HORIZON,
    seeded=True,
))
