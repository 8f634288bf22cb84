"""One engine where every parameter can be set from the command line."""

from __future__ import annotations

from typing import Any, Dict

from llmqueue.common import validation
from llmqueue.engine.options import RunOptions
from llmqueue.engine.simulate import simulate
from llmqueue.experiments import point_c
from llmqueue.experiments.base import (ENGINE_PARAMS, Experiment, Param, Rows, engine_kwargs,
                                       register)
from llmqueue.experiments.capacity import add_memory_capacity, decoded
from llmqueue.experiments.presets import SERVING_PARAMS
from llmqueue.experiments.traffic import (PREFIX_PARAMS, WORKLOAD_PARAMS, sessions_of,
                                          size_param, workload_of)


def arrival_rate(params: Dict[str, Any]) -> float:
    """Requests per second: ``rate`` where given, else ``1 / gap`` (either law)."""
    if params["rate"] is not None:
        return validation.arrival_rate("rate", params["rate"])
    return 1.0 / validation.gap_seconds("gap", params["gap"])


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """One row labelled by its scheduler."""
    p = params
    rate = arrival_rate(p)
    if p["sessions"] is not None:  # closed loops: their own rate
        workload: Any = sessions_of(p, options.seed or 0)
        rate = workload.request_rate
    else:
        workload = workload_of(p, options.seed or 0, rate=rate)
    kwargs = engine_kwargs(p)
    result = simulate(workload, horizon=options.horizon or point_c.HORIZON, **kwargs,
                      **options.logs(), first_token=p["first_token"])
    add_memory_capacity(result, decoded(p), kwargs["latency"], rate)
    return [(str(p["scheduler"]), result)]


EXPERIMENT = register(Experiment(
    name="single",
    summary="one engine, every parameter settable (defaults: point C with sarathi-128)",
    params={**ENGINE_PARAMS,
            "arrival": WORKLOAD_PARAMS["arrival"],
            "gap": Param("float", point_c.GAP, "seconds between arrivals (the mean gap unless "
                         "renewal)"),
            "rate": Param("float-or-none", None, "arrivals per second; overrides gap"),
            "vp": size_param(point_c.PREFILL, "prefill tokens per request"),
            "vd": size_param(point_c.DECODE, "decode tokens per request"),
            "initial": WORKLOAD_PARAMS["initial"], **PREFIX_PARAMS, **SERVING_PARAMS},
    run=run,
    horizon=point_c.HORIZON,
    seeded=True,
))
