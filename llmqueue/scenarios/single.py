"""One engine where every parameter can be set from the command line."""

from __future__ import annotations

from typing import Dict, Optional

from ..simulate import simulate
from ..workload import poisson, renewal
from .base import ENGINE_PARAMS, Param, Rows, Scenario, engine_kwargs, register
from . import point_c


def run(params: Dict[str, object], horizon: Optional[float], seed: Optional[int],
        **logs: bool) -> Rows:
    """One row labelled by its scheduler."""
    p = params
    if p["arrival"] == "poisson":
        rate = p["rate"] if p["rate"] is not None else 1.0 / p["gap"]
        workload = poisson(rate, p["vp"], p["vd"], seed=seed or 0)
    else:
        workload = renewal(p["gap"], p["vp"], p["vd"])
    result = simulate(workload, horizon=horizon or point_c.HORIZON, **engine_kwargs(p), **logs)
    return [(str(p["scheduler"]), result)]


SCENARIO = register(Scenario(
    name="single",
    summary="one engine, every parameter settable (defaults: point C with sarathi-128)",
    params={**ENGINE_PARAMS,
            "arrival": Param("str", "renewal", "arrival law", ("renewal", "poisson")),
            "gap": Param("float", point_c.GAP, "seconds between renewal arrivals"),
            "rate": Param("float-or-none", None, "Poisson arrivals per second (default 1/gap)"),
            "vp": Param("int", point_c.PREFILL, "prefill tokens per request"),
            "vd": Param("int", point_c.DECODE, "decode tokens per request")},
    run=run,
    horizon=point_c.HORIZON,
    seeded=True,
))
