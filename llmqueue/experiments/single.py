"""One engine where every parameter can be set from the command line."""

from __future__ import annotations

from typing import Any, Dict

from llmqueue.common import validation
from llmqueue.engine.options import RunOptions
from llmqueue.engine.simulate import simulate
from llmqueue.experiments import point_c
from llmqueue.experiments.base import (ENGINE_PARAMS, Experiment, Param, Rows, engine_kwargs,
                                       memory_capacity, register)
from llmqueue.models.workload import poisson, renewal


def arrival_rate(params: Dict[str, Any]) -> float:
    """Requests per second: ``rate`` where given, else ``1 / gap`` (either law)."""
    if params["rate"] is not None:
        return validation.positive_number("rate", params["rate"])
    return 1.0 / validation.positive_number("gap", params["gap"])


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """One row labelled by its scheduler."""
    p = params
    rate = arrival_rate(p)
    if p["arrival"] == "poisson":
        workload = poisson(rate, p["vp"], p["vd"], seed=options.seed or 0)
    else:
        workload = renewal(1.0 / rate, p["vp"], p["vd"])
    kwargs = engine_kwargs(p)
    result = simulate(workload, horizon=options.horizon or point_c.HORIZON, **kwargs,
                      **options.logs())
    result.add_figures(**memory_capacity(p, p["vp"], p["vd"], kwargs["latency"]))
    return [(str(p["scheduler"]), result)]


EXPERIMENT = register(Experiment(
    name="single",
    summary="one engine, every parameter settable (defaults: point C with sarathi-128)",
    params={**ENGINE_PARAMS,
            "arrival": Param("str", "renewal", "arrival law", ("renewal", "poisson")),
            "gap": Param("float", point_c.GAP, "seconds between arrivals (mean gap for poisson)"),
            "rate": Param("float-or-none", None, "arrivals per second; overrides gap"),
            "vp": Param("int", point_c.PREFILL, "prefill tokens per request"),
            "vd": Param("int", point_c.DECODE, "decode tokens per request")},
    run=run,
    horizon=point_c.HORIZON,
    seeded=True,
))
