"""The Rybko-Stolyar network of LLM engines (docs/model.md §9.4, the paper's section 5.4).

Two engines, both Sarathi with ``bmax = 768`` and a constant batch time of one
time unit (here one second).  Jobs of type A make a short hop at engine 1
(Poisson(32) prefill, Poisson(32) decode) and then a long hop at engine 2
(Poisson(512) prefill, Poisson(32) decode); type B makes the mirror route.
Each type arrives as Poisson at ``0.9 * 768 / 608`` per unit time, so each
engine is offered 90% of its 768 tokens per unit.  Each engine ranks the two
classes it serves: ``exiting`` favours the class that leaves the network
through it (unstable: the backlog grows in waves), ``entering`` the class that
enters there (stable).
"""

from __future__ import annotations

from typing import Any, Dict, Generator, List, Optional, Tuple

import simpy

from llmqueue.engine.options import NETWORK_OPTIONS, RunOptions
from llmqueue.engine.kv import KV
from llmqueue.experiments.base import MEMORY_PARAMS, Experiment, Param, Rows, kv_of, register
from llmqueue.models.latency import Constant
from llmqueue.models.sizes import PoissonSize, SizeLaw, decode_sizes
from llmqueue.network.network import Network, NetworkResult
from llmqueue.network.workflows import JobContext, job_summary, start_jobs
from llmqueue.policies.builtin import ClassPriority, Sarathi

BMAX = 768
SHORT = (PoissonSize(32), PoissonSize(32))               # prefill, decode of a short hop
LONG = (PoissonSize(512), PoissonSize(32))               # prefill, decode of a long hop
HOP_TOKENS = 32 + 32 + 512 + 32                          # 608 mean tokens per job
LOAD = 0.9
RATE = LOAD * BMAX / HOP_TOKENS                          # jobs of each type per unit time
HORIZON = 12000.0
#: route of each job type: (first engine, second engine)
ROUTES: Dict[str, Tuple[str, str]] = {"A": ("engine-1", "engine-2"),
                                      "B": ("engine-2", "engine-1")}


def ranking(priority: str, engine: str) -> List[str]:
    """Classes in priority order at ``engine``: ``exiting`` puts first the type
    whose last hop is here, ``entering`` the type whose first hop is here."""
    entering = [t for t, route in ROUTES.items() if route[0] == engine]
    exiting = [t for t, route in ROUTES.items() if route[1] == engine]
    return exiting + entering if priority == "exiting" else entering + exiting


def hop(ctx: JobContext, engine: str, laws: Tuple[SizeLaw, SizeLaw]) -> simpy.Event:
    """A call at ``engine`` with prefill and decode sizes drawn from ``laws``
    (a decode draw of 0 gives 1)."""
    prefill, decode = laws
    return ctx.call(engine, prefill.draw(ctx.rng), int(decode_sizes(decode, ctx.rng, 1)[0]))


def route(ctx: JobContext) -> Generator[simpy.Event, object, None]:
    """A job: the short hop at its first engine, then the long hop at its second."""
    klass = ctx.klass
    assert isinstance(klass, str)  # build starts each job with its ROUTES key as class
    first, second = ROUTES[klass]
    yield hop(ctx, first, SHORT)
    yield hop(ctx, second, LONG)


def build(priority: str, load: float = LOAD, seed: int = 0, batches: bool = False,
          kv: Optional[KV] = None) -> Tuple[Network, Dict[str, list]]:
    """The two engines with the given priority and both job sources (each
    engine with a KV cache of its own when ``kv`` is given)."""
    if priority not in ("exiting", "entering"):
        raise ValueError(f"priority must be one of exiting, entering; got {priority!r}")
    net = Network(seed=seed, batches=batches)
    for name in ("engine-1", "engine-2"):
        net.add_engine(name, ClassPriority(Sarathi(), ranking(priority, name)), bmax=BMAX,
                       kmax=None, latency=Constant(1.0), kv=kv)
    rate = load * BMAX / HOP_TOKENS
    jobs = {t: start_jobs(net, route, rate, klass=t, seed=seed * 2 + i)
            for i, t in enumerate(ROUTES)}
    return net, jobs


def simulate_priority(priority: str, horizon: float = HORIZON, load: float = LOAD,
                      seed: int = 0, batches: bool = False, kv: Optional[KV] = None
                      ) -> Tuple[NetworkResult, Dict]:
    """Run one priority rule; the network's results and the job records."""
    net, jobs = build(priority, load, seed, batches, kv)
    result = net.run(horizon)
    return result, jobs


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """Per-engine and total rows for each priority asked for; the total row
    carries the job figures of :func:`~llmqueue.workflows.job_summary`."""
    priorities = ["exiting", "entering"] if params["priority"] == "both" else [params["priority"]]
    rows: Rows = []
    for priority in priorities:
        result, jobs = simulate_priority(priority, options.horizon or HORIZON, params["load"],
                                         options.seed or 0, options.batches, kv_of(params))
        result.total.add_figures(**job_summary(jobs["A"] + jobs["B"]),
                                 classes={str(k): v for k, v in result.by_class().items()})
        rows.extend(result.rows(prefix=f"{priority}/"))
    return rows


EXPERIMENT = register(Experiment(
    name="rybko-stolyar",
    summary="model §9.4: two engines, cyclic routes; exiting-class priority is unstable",
    params={"priority": Param("str", "both", "which class each engine favours",
                              ("exiting", "entering", "both")),
            "load": Param("float", LOAD, "offered load of each engine (fraction of 768/unit)"),
            **MEMORY_PARAMS},
    run=run,
    network=True,
    options=NETWORK_OPTIONS,
    horizon=HORIZON,
    seeded=True,
))
