"""The batch-size limit (docs/model.md §9.5, Theorem 10): where each scheduler holds.

With at most ``kmax`` requests per batch the sustainable load is a region in
the plane of prefill and decode token rates.  ``kmax-point`` runs one engine at
given rates ``(lambda_p, lambda_d)``: renewal arrivals every ``gap`` seconds of
requests sized ``lambda_p * gap`` + ``lambda_d * gap`` tokens (rounded), so it
can be swept.  ``kmax-region`` sweeps a grid of such points for Sarathi at
bmax 128 and 1024 and for step-fill at 1024, and draws the measured verdicts
over the region's polygons.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from llmqueue.common import validation
from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result, Summary
from llmqueue.engine.simulate import simulate
from llmqueue.experiments import point_c
from llmqueue.experiments.base import (ENGINE_PARAMS, Experiment, Param, Rows, engine_kwargs,
                                       engine_params, register)
from llmqueue.models.workload import renewal

KMAX = 100
HORIZON = 3000.0
#: The runs of the region figure: (scheduler, bmax).
PANELS: List[Tuple[str, int]] = [("sarathi", 128), ("sarathi", 1024), ("step-fill", 1024)]
#: Grid of the region figure, tokens per second.
LAMBDA_P = (200, 700, 1200, 1700, 2200, 2700, 3200)
LAMBDA_D = (100, 500, 900, 1300, 1700, 2100)


def sizes(lambda_p: float, lambda_d: float, gap: float) -> Tuple[int, int]:
    """Request sizes that give these token rates at one arrival per ``gap``."""
    validation.gap_seconds("gap", gap)
    if lambda_p < 0 or lambda_d <= 0:
        raise ValueError(f"lambda_p must be >= 0 and lambda_d > 0 tokens/s; got "
                         f"{lambda_p} and {lambda_d}")
    return round(lambda_p * gap), max(1, round(lambda_d * gap))


def run_point(params: Dict[str, Any], options: RunOptions) -> Rows:
    """One run at the rates ``(lambda_p, lambda_d)``."""
    vp, vd = sizes(params["lambda_p"], params["lambda_d"], params["gap"])
    result = simulate(renewal(params["gap"], vp, vd), horizon=options.horizon or HORIZON,
                      **engine_kwargs(params), **options.logs())
    return [(f"{params['scheduler']}-{params['bmax']}", result)]


POINT = register(Experiment(
    name="kmax-point",
    summary="one engine at prefill/decode token rates (lambda_p, lambda_d); sweep it",
    params={**engine_params(kmax=KMAX),
            "lambda_p": Param("float", 290 / point_c.GAP, "prefill tokens per second"),
            "lambda_d": Param("float", 990 / point_c.GAP, "decode tokens per second"),
            "gap": Param("float", point_c.GAP, "seconds between arrivals")},
    run=run_point,
    horizon=HORIZON,
))


def run_region(params: Dict[str, Any], options: RunOptions) -> Rows:
    """Every grid point for every panel, on the sweep machinery; draws the figure."""
    from llmqueue.sweeps.runner import sweep
    validation.gap_seconds("gap", params["gap"])  # before any run
    rows: Rows = []
    for scheduler, bmax in PANELS:
        runs = sweep(POINT, {"lambda_p": list(LAMBDA_P), "lambda_d": list(LAMBDA_D)},
                     schedulers=[scheduler],
                     fixed={"bmax": bmax, "kmax": params["kmax"], "gap": params["gap"]},
                     horizon=options.horizon or HORIZON, progress=False)
        for run in runs:
            label = f"{scheduler}-{bmax} ({run['lambda_p']:g}, {run['lambda_d']:g})"
            rows.append((label, Result(Summary.from_mapping(run))))
    if params["figure"]:
        from llmqueue.plotting import plot_region, save
        save(plot_region(rows, params["kmax"]), str(params["figure"]))
    return rows


REGION = register(Experiment(
    options=frozenset({"horizon"}),  # a sweep of kmax-point runs; no logs, no warm-up
    name="kmax-region",
    summary="model §9.5: Theorem 10's region at bmax 128 and 1024 (kmax 100) with "
            "simulated verdicts",
    params={"kmax": Param("int-or-none", KMAX, ENGINE_PARAMS["kmax"].help),
            "gap": Param("float", point_c.GAP, "seconds between arrivals"),
            "figure": Param("str", "", "also draw the region figure to this PNG")},
    run=run_region,
    horizon=HORIZON,
    columns=[("lambda_p", "prefill tok/s", "{:g}"),
                       ("lambda_d", "decode tok/s", "{:g}"),
                       ("verdict", "verdict", "{}"), ("backlog_slope", "slope", "{:.1f}"),
                       ("pending_mean", "pending mean", "{:.1f}")],
))
