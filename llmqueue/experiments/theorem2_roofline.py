"""Theorem 2 with a hardware model (docs/model.md §7.10, E8.4): the backlog slope of
Sarathi on Llama-3-8B, one H100, the ``default`` roofline.

Poisson arrivals, every request 512 prefill + 256 decode tokens, bmax = 2048,
no kmax.  The roofline's batch time depends on the contexts, so Theorem 2's
``t_bmax`` becomes ``t_mix``, the time of the full batch at the workload's mix
(:func:`~llmqueue.theory.shapes.at_mean_context`: 1365 prefill tokens in one chunk
at context 256 and 683 decodes at their mean context, 82.4 ms), and lambda* is
``lambda_mix = bmax / t_mix / (vp + vd)`` = 32.35 req/s.  Each load (a fraction
of lambda_mix) runs several seeds through :func:`theorem2.measure`; a row's
fluid slope is ``max(0, lambda (vp + vd) - bmax / t_mix)``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Tuple

from llmqueue.engine.options import RunOptions
from llmqueue.experiments import theorem2
from llmqueue.experiments.base import (Check, Experiment, Param, Rows, engine_kwargs,
                                       engine_params, register)
from llmqueue.experiments.traffic import mean_sizes, size_param
from llmqueue.models.latency import tokens_time
from llmqueue.theory.capacity import lambda_star
from llmqueue.theory.shapes import at_mean_context

GPU = "H100"
MODEL = "llama-3-8b"
PREFILL = 512          # tokens per prompt
DECODE = 256           # tokens per output
BMAX = 2048            # token budget
LOADS = (0.6, 0.8, 0.9, 1.0, 1.1, 1.2, 1.4)  # fractions of lambda_mix
SEEDS = 6              # runs per load
HORIZON = 300.0        # seconds per run
WARMUP_SHARE = 0.1     # warm-up left out, as a share of the horizon (30 s of 300 s)
STABLE_BELOW = 0.9     # loads at or below: every run stable
UNSTABLE_ABOVE = 1.1   # loads at or above: every run unstable
FLUID_LOADS = (1.2, 1.4)  # loads whose slope must be near the fluid slope
FLUID_TOLERANCE = 0.20    # relative


def mix(p: Mapping[str, Any]) -> Tuple[float, float]:
    """``(t_mix, lambda_mix)`` of the engine of ``p``: the full batch at the
    workload's mix and mean contexts (:func:`~llmqueue.theory.shapes.at_mean_context`),
    its seconds, and ``bmax / t_mix / (m_p + m_d)`` requests/s (Theorem 2's
    lambda*, as ``llmqueue capacity`` gives it)."""
    vp, vd = mean_sizes(p)
    seen = at_mean_context(engine_kwargs(p)["latency"], vp, vd)
    return tokens_time(seen, p["bmax"]), lambda_star(p["bmax"], vp, vd, seen)


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """One row per load, as fractions of ``lambda_mix`` (:func:`theorem2.measure`),
    each run until ``options.horizon`` (else 300 s) with ``options.warmup``
    (else a tenth of the horizon) left out."""
    p = params
    theorem2.check_seeds(p)
    t_mix, star = mix(p)
    vp, vd = mean_sizes(p)
    horizon = options.horizon or HORIZON
    warmup = options.warmup or WARMUP_SHARE * horizon
    return theorem2.measure(p, options, star,
                            lambda rate: max(0.0, rate * (vp + vd) - p["bmax"] / t_mix),
                            horizon, warmup)


def checks(rows: Rows) -> List[Check]:
    """docs/model.md §7.10, E8.4: every run stable at loads <= 0.9, unstable at >= 1.1, and the
    mean slope within 20 % of the fluid slope at 1.2 and 1.4 (loads present)."""
    out = []
    for _, result in rows:
        s = result.summary
        load, seeds = s["load"], s["seeds"]
        if load <= STABLE_BELOW + 1e-9:
            out.append(Check(f"{load:.2f} lambda_mix: every run stable",
                             s["stable_runs"] == seeds, f"{s['stable_runs']} of {seeds}"))
        if load >= UNSTABLE_ABOVE - 1e-9:
            out.append(Check(f"{load:.2f} lambda_mix: every run unstable",
                             s["unstable_runs"] == seeds, f"{s['unstable_runs']} of {seeds}"))
        if any(abs(load - x) < 1e-9 for x in FLUID_LOADS):
            fluid = s["fluid_slope"]
            out.append(Check(f"{load:.2f} lambda_mix: slope within {FLUID_TOLERANCE:.0%} of "
                             f"the fluid slope",
                             abs(s["slope"] - fluid) <= FLUID_TOLERANCE * fluid,
                             f"{s['slope']:.0f} against {fluid:.0f} tokens/s "
                             f"({s['slope'] / fluid - 1:+.1%})"))
    return out


EXPERIMENT = register(Experiment(
    options=frozenset({"horizon", "warmup", "seed", "batches", "requests", "timeseries"}),
    name="theorem2-roofline",
    summary="model §7.10, E8.4: Theorem 2 on Llama-3-8B / H100 (default roofline): backlog slope "
            "at 0.6..1.4 of lambda_mix (Poisson, 512+256 tokens, bmax 2048)",
    run=run,
    horizon=HORIZON,
    seeded=True,
    checks=checks,
    columns=theorem2.COLUMNS,
    params={**engine_params(bmax=BMAX, kmax=None, latency="roofline", gpu=GPU, model=MODEL),
            "vp": size_param(PREFILL, "prefill tokens per request"),
            "vd": size_param(DECODE, "decode tokens per request"),
            "loads": Param("str", ",".join(f"{x:g}" for x in LOADS),
                           "comma-separated loads, as fractions of lambda_mix"),
            "seeds": Param("int", SEEDS, "runs per load (run seeds drawn by the sweep from seed)")},
))
