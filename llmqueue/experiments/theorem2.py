"""Theorem 2 (docs/model.md §9.2): the measured backlog slope against the fluid slope.

Poisson arrivals, every request 100 prefill + 100 decode tokens, bmax = 512, no
kmax, the CodeLlama-34B staircase: t_512 = 0.15316 s, a token capacity of
512 / 0.15316 = 3342.9 tokens/s and lambda* = 16.71 req/s.  At each load (a
fraction of lambda*) several seeds run, as a sweep of the ``single`` scenario
over the arrival rate (:mod:`llmqueue.sweep`); a row gives the mean backlog
slope over the seeds, its standard error, and the fluid slope
``max(0, lambda * 200 - 512 / t_512)``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Dict, List, Mapping, Sequence

import numpy as np

from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result, Summary
from llmqueue.experiments import single
from llmqueue.experiments.base import (ENGINE_PARAMS, Experiment, Param, Rows, engine_kwargs,
                                       engine_params, register)
from llmqueue.experiments.traffic import mean_sizes, size_param
from llmqueue.theory import capacity as theory

PREFILL = 100          # tokens per prompt
DECODE = 100           # tokens per output
BMAX = 512             # token budget
LOADS = (0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4)  # fractions of lambda*
SEEDS = 6              # runs per load
HORIZON = 400.0        # seconds per run

#: Columns of the text table (summary key, title, format).
COLUMNS = [("load", "load", "{:.2f}"), ("rate", "req/s", "{:.2f}"),
           ("slope", "slope tokens/s", "{:.1f}"), ("slope_se", "+- se", "{:.1f}"),
           ("fluid_slope", "fluid slope", "{:.1f}"), ("z", "z", "{:+.2f}"),
           ("stable_runs", "stable runs", "{:d}"), ("unstable_runs", "unstable runs", "{:d}"),
           ("pending_mean", "pending mean", "{:.1f}")]


def parse_loads(text: str) -> List[float]:
    """``"0.6,0.9,1.1"`` as fractions of lambda*, each a number > 0."""
    try:
        loads = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        loads = []
    if not loads or not all(np.isfinite(x) and x > 0 for x in loads):
        raise ValueError(f"loads must be comma-separated numbers > 0 (fractions of "
                         f"lambda*); got {text!r}")
    return loads


def load_row(fraction: float, runs: Sequence[Mapping[str, Any]], rate: float, fluid: float
             ) -> Dict[str, Any]:
    """One load's figures over its seeds (the sweep's rows of its runs): the
    mean slope and its standard error."""
    slopes = np.array([r["backlog_slope"] for r in runs], dtype=float)
    se = float(slopes.std(ddof=1) / np.sqrt(len(slopes))) if len(slopes) > 1 else None
    mean = float(slopes.mean())
    verdicts = [r["verdict"] for r in runs]
    return {"load": fraction, "rate": rate, "seeds": len(runs), "slope": mean, "slope_se": se,
            "fluid_slope": fluid, "z": (mean - fluid) / se if se else None,
            "slopes": slopes.tolist(), "slope_se_runs": [r["backlog_slope_se"] for r in runs],
            "stable_runs": verdicts.count("stable"),
            "unstable_runs": verdicts.count("unstable"),
            "predicted": runs[0]["predicted"],
            "pending_mean": float(np.mean([r["pending_mean"] for r in runs])),
            "backlog_final": float(np.mean([r["backlog_final"] for r in runs]))}


def check_seeds(p: Mapping[str, Any]) -> int:
    """``p["seeds"]``, an integer >= 2, and a budget ``p["bmax"]`` (Theorem 2 needs one)."""
    seeds = p["seeds"]
    if not isinstance(seeds, int) or seeds < 2:
        raise ValueError(f"seeds must be an integer >= 2 (a standard error needs two "
                         f"runs); got {seeds!r}")
    if p["bmax"] is None:
        raise ValueError("bmax must be an integer >= 1 here (Theorem 2 needs a budget); "
                         "got none")
    return seeds


def measure(p: Mapping[str, Any], options: RunOptions, star: float,
            fluid: Callable[[float], float], horizon: float, warmup: float = 0.0) -> Rows:
    """One row per load of ``p["loads"]`` (fractions of ``star`` requests/s),
    from a sweep of the ``single`` scenario over the arrival rate (Poisson,
    ``p["seeds"]`` replicates per rate, seeded from ``options.seed``, each run
    until ``options.horizon`` (else ``horizon``) with ``warmup`` seconds left
    out); ``fluid(rate)`` is a row's fluid slope.  Logs, when asked for, are
    those of each load's first replicate (run again with the same seed)."""
    from llmqueue import sweeps  # the sweep machinery imports the scenarios

    seeds = check_seeds(p)
    fractions = parse_loads(str(p["loads"]))
    rates = [fraction * star for fraction in fractions]
    fixed = {**{k: p[k] for k in ENGINE_PARAMS}, "arrival": "poisson", "vp": p["vp"],
             "vd": p["vd"]}
    tasks = sweeps.plan(single.EXPERIMENT, {"rate": rates}, seeds, fixed=fixed,
                        horizon=options.horizon or horizon, warmup=warmup,
                        base_seed=options.seed or 0)
    runs = [row for rows in sweeps.execute(tasks, progress=False) for row in rows]
    out: Rows = []
    for i, (fraction, rate) in enumerate(zip(fractions, rates)):
        summary = Summary.from_mapping(load_row(fraction, runs[i * seeds:(i + 1) * seeds],
                                                rate, fluid(rate)))
        result = Result(summary)
        if options.asked() & {"batches", "requests", "timeseries"}:
            task = tasks[i * seeds]
            again = replace(options, horizon=task.horizon, seed=task.seed, warmup=task.warmup)
            _, first = task.experiment.execute(task.params, again)[0]
            result = Result(summary, first.params, first.batch_log, first.request_log,
                            first.series)
        out.append((f"{fraction:.2f} lambda*", result))
    return out


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """One row per load, as fractions of Theorem 2's lambda* (:func:`measure`),
    beside the fluid slope ``max(0, lambda (m_p + m_d) - bmax / t_bmax)``."""
    p = params
    check_seeds(p)
    latency = engine_kwargs(p)["latency"]
    vp, vd = mean_sizes(p)
    star = theory.lambda_star(p["bmax"], vp, vd, latency)
    return measure(p, options, star,
                   lambda rate: theory.fluid_slope(rate, p["bmax"], vp, vd, latency), HORIZON)


EXPERIMENT = register(Experiment(
    options=frozenset({"horizon", "seed", "batches", "requests", "timeseries"}),
    name="theorem2",
    summary="model §9.2: backlog slope against the fluid slope at 0.6..1.4 of lambda* "
            "(Poisson, 100+100 tokens, bmax 512)",
    run=run,
    horizon=HORIZON,
    seeded=True,
    columns=COLUMNS,
    params={**engine_params(bmax=BMAX, kmax=None),
            "vp": size_param(PREFILL, "prefill tokens per request"),
            "vd": size_param(DECODE, "decode tokens per request"),
            "loads": Param("str", ",".join(f"{x:g}" for x in LOADS),
                           "comma-separated loads, as fractions of lambda*"),
            "seeds": Param("int", SEEDS, "runs per load (run seeds drawn by the sweep from seed)")},
))
