"""MLPerf Inference's Llama-2-70B benchmark, simulated (``llmqueue mlperf``).

A system of ``gpus`` GPUs runs ``gpus / tp`` independent engine copies, and
the benchmark's harness spreads the samples over them.  Its three scenarios:

* **Offline**: every sample available at once; the result is output tokens/s.
  Each copy runs its share, ``samples`` per copy (default 24,576, one pass
  through the dataset: NVIDIA's v4.1 runs issued 50,000 and 25,000 per copy),
  from time 0 to its last sample's end; the system's figure is ``copies``
  times the copy's (:func:`offline`).
* **Server** and **Interactive**: Poisson arrivals; the result is the largest
  rate whose p99 TTFT and p99 TPOT (a sample's time after its first token over
  the tokens after it) stay within 2 s / 200 ms (Server) or 450 ms / 40 ms
  (Interactive), reported as output tokens/s and samples/s.  Under the
  harness's random split each copy sees a Poisson stream of its share of the
  rate, independent of the others, so one copy at ``rate / copies`` answers
  for all of them exactly; a round-robin split gives each copy every
  ``copies``-th arrival, gaps of an Erlang law of ``copies`` phases, which
  gamma gaps of coefficient of variation ``1 / sqrt(copies)`` are exactly.
  The rate is searched by :func:`~llmqueue.planning.plan.plan` in quantile
  mode at 0.99 (replications with common random numbers, a bracket), each
  replication measuring at least ``seconds`` (600 s, the benchmark's
  minimum) of arrivals at the Offline rate (:func:`capacity`).

:func:`calibrate_speed` fits one factor to a measured Offline figure: every
efficiency of the roofline times ``f`` and every fixed overhead over ``f``
(the same engine, ``f`` times as fast), so that the simulated Offline equals
it, and refuses an ``f`` that takes an efficiency above 1 (weights read faster
than HBM allows).  An Offline run's schedule does not depend on the iteration
times, so one simulation prices every ``f``
(:mod:`~llmqueue.experiments.calibration`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Dict, Mapping, Optional

from llmqueue.common import validation
from llmqueue.common.params import Param
from llmqueue.engine.simulate import simulate
from llmqueue.experiments.base import (Experiment, engine_kwargs, engine_params, latency_of)
from llmqueue.experiments.calibration import IterationLog
from llmqueue.experiments.presets import SERVING_PARAMS
from llmqueue.hardware.efficiency import FRACTIONS, TIMES, Efficiency
from llmqueue.hardware.roofline import Roofline
from llmqueue.models.mlperf import OUTPUTS, SAMPLES, mlperf_lengths, mlperf_offline
from llmqueue.planning.plan import PlanResult, plan
from llmqueue.planning.spec import EngineSpec, Traffic
from llmqueue.theory.slo import SLO

#: The scenarios, as ``llmqueue mlperf`` names them.
SCENARIOS = ("offline", "server", "interactive")
#: The latency limits of the scenarios with arrivals (p99 TTFT, p99 TPOT; seconds).
LIMITS: Dict[str, SLO] = {"server": SLO(ttft=2.0, tpot=0.2),
                          "interactive": SLO(ttft=0.45, tpot=0.04)}
#: The percentile the limits hold at.
QUANTILE = 0.99
#: How the harness spreads samples over the copies.
SPLITS = ("random", "round-robin")
#: The calibration's answer is this close to the measured Offline figure.
TOLERANCE = 1e-4

#: The settings of one engine copy and of the system (``--set KEY=VALUE``).
PARAMS: Dict[str, Param] = {
    **engine_params(latency="roofline", gpu="H100-SXM-80GB", model="llama-2-70b", tp=2,
                    precision="fp8", kv_cache_dtype="fp8", kv="auto", efficiency="trtllm"),
    **{**SERVING_PARAMS, "engine": replace(SERVING_PARAMS["engine"], default="trtllm")},
    "gpus": Param("int", 8, "GPUs of the system; copies = gpus / tp", low=1),
    "samples": Param("int", SAMPLES, "Offline samples per engine copy", low=1),
    "outputs": Param("str", "scaled", "generated lengths: scaled (the reference answers "
                     "scaled to the runs' 290 tokens a sample, capped at 1,024) or raw",
                     OUTPUTS),
    "split": Param("str", "random", "how the harness spreads samples over copies", SPLITS),
    "seconds": Param("float", 600.0, "Server/Interactive: seconds of arrivals each "
                     "replication measures at least", low=1.0),
    "seed": Param("int", 0, "seed of the sample order and the arrivals", low=0),
    "reps": Param("int", 3, "Server/Interactive: replications per probe (more when "
                  "undecided)", low=2),
}


def _unused(params: Dict[str, Any], options: Any) -> Any:
    raise NotImplementedError("llmqueue mlperf runs these settings")


#: The settings resolved as every experiment's are (engine presets included).
SETTINGS = Experiment(name="mlperf", summary="MLPerf Llama-2-70B settings", params=PARAMS,
                      run=_unused, seeded=True)


@dataclass(frozen=True)
class System:
    """One engine copy (its resolved settings and roofline) and how many run."""

    params: Dict[str, Any]
    roofline: Roofline
    copies: int

    @property
    def efficiency(self) -> Efficiency:
        """The copy's efficiency."""
        return self.roofline.efficiency


def system(overrides: Mapping[str, str]) -> System:
    """The system the ``--set`` keys describe (a ValueError names a bad one)."""
    p = SETTINGS.resolve(overrides)
    if p["latency"] != "roofline":
        raise ValueError(f"latency must be roofline for mlperf (a GPU and a model); got "
                         f"{p['latency']}")
    if p["gpus"] % p["tp"]:
        raise ValueError(f"gpus must be a multiple of tp: {p['gpus']} GPUs do not split into "
                         f"copies of tp={p['tp']}")
    model = latency_of(p)
    assert isinstance(model, Roofline)
    return System(p, model, p["gpus"] // p["tp"])


def faster(eff: Efficiency, factor: float) -> Efficiency:
    """``eff`` run ``factor`` times as fast: every efficiency times ``factor``,
    every fixed time over it; a ValueError names an efficiency it takes above 1."""
    validation.positive_number("factor", factor)
    values: Dict[str, Any] = {}
    for name in FRACTIONS:
        value = getattr(eff, name)
        if value is not None:
            if value * factor > 1:
                raise ValueError(
                    f"a speed factor of {factor:.4g} leaves physics: {name} = {value:.3g} x "
                    f"{factor:.4g} = {value * factor:.3g} > 1 ("
                    + ("weights or KV read faster than HBM allows" if name.startswith("mbu")
                       else "beyond the hardware's peak") + ")")
            values[name] = value * factor
    for name in TIMES:
        values[name] = getattr(eff, name) / factor
    return replace(eff, **values)


@dataclass(frozen=True)
class OfflineRun:
    """One copy's Offline run: its output tokens and samples, the makespan, and
    its iterations reduced (any efficiency of the same hardware prices them:
    :meth:`tokens_per_s`)."""

    system: System
    output_tokens: int
    samples: int
    makespan: float
    totals: Any
    preemptions: int

    def tokens_per_s(self, eff: Optional[Efficiency] = None) -> float:
        """The system's Offline output tokens/s at ``eff`` (default: the copy's own)."""
        model = self.system.roofline if eff is None else self.system.roofline.with_efficiency(eff)
        return self.system.copies * self.output_tokens / model.run_seconds(self.totals)

    def samples_per_s(self, eff: Optional[Efficiency] = None) -> float:
        """The system's Offline samples/s at ``eff``."""
        return self.tokens_per_s(eff) * self.samples / self.output_tokens


def offline(s: System) -> OfflineRun:
    """Run one copy's Offline query (``samples`` at time 0) and keep its iterations."""
    p = s.params
    log = IterationLog(s.roofline)
    kwargs = {**engine_kwargs(p), "latency": log}
    result = simulate(mlperf_offline(p["samples"], p["outputs"], p["seed"]), horizon=None,
                      first_token=p["first_token"], **kwargs)
    summary = result.summary
    tokens = int(round(summary["output_tokens_per_s"] * summary["duration"]))
    return OfflineRun(s, tokens, int(summary["completed"]), float(summary["duration"]),
                      s.roofline.run_totals(log.iterations()),
                      int(summary.get("preemptions") or 0))


def calibrate_speed(run: OfflineRun, measured: float) -> float:
    """The speed factor ``f`` (:func:`faster`) at which ``run``'s system makes
    ``measured`` Offline output tokens/s; a ValueError when even the fastest
    physical ``f`` (an efficiency at 1) falls short."""
    validation.positive_number("offline tokens per second", measured)
    eff = run.system.efficiency
    top = min(1 / getattr(eff, n) for n in FRACTIONS if getattr(eff, n) is not None)
    best = run.tokens_per_s(faster(eff, top))
    if best < measured * (1 - TOLERANCE):
        raise ValueError(
            f"no physical speed reaches {measured:,.0f} output tokens/s: at a factor of "
            f"{top:.4g} an efficiency reaches 1 (weights read at the full HBM bandwidth or "
            f"GEMMs at peak) and the system makes {best:,.0f}; check the settings (gpu, "
            f"precision, tp, kmax, bmax)")
    lo, hi = 1e-3, top
    while run.tokens_per_s(faster(eff, lo)) > measured:
        lo /= 10
    for _ in range(200):  # bisection on log f: the throughput grows with f
        mid = math.sqrt(lo * hi)
        if run.tokens_per_s(faster(eff, mid)) < measured:
            lo = mid
        else:
            hi = mid
        if hi / lo - 1 < 1e-12:
            break
    return hi


def traffic(s: System) -> Traffic:
    """One copy's arrivals, at unit rate: the dataset's (prompt, output) pairs,
    Poisson under a random split, Erlang gaps under round-robin."""
    prompts, outputs = mlperf_lengths(s.params["outputs"])
    cv = None if s.params["split"] == "random" or s.copies == 1 else 1 / math.sqrt(s.copies)
    return Traffic.samples(prompts.tolist(), outputs.tolist(), cv)


def engine_spec(s: System, eff: Optional[Efficiency] = None) -> EngineSpec:
    """One copy as :func:`~llmqueue.planning.plan.plan` takes it, at ``eff``."""
    kwargs = engine_kwargs(s.params)
    model = s.roofline if eff is None else s.roofline.with_efficiency(eff)
    return EngineSpec(kwargs["policy"], kwargs["bmax"], kwargs["kmax"], model,
                      kwargs["chunked"], kwargs["kv"], s.params["first_token"])


def capacity(s: System, scenario: str, offline_run: OfflineRun,
             eff: Optional[Efficiency] = None, progress: Optional[bool] = None) -> PlanResult:
    """The largest Poisson rate per copy that keeps ``scenario``'s p99s inside
    its limits (:data:`LIMITS`), at ``eff``; each replication measures at
    least ``seconds`` of arrivals at the Offline rate."""
    validation.choice("scenario", scenario, tuple(LIMITS))
    per_copy = offline_run.samples_per_s(eff) / s.copies
    requests = max(1000, math.ceil(per_copy * s.params["seconds"]))
    return plan(traffic(s), engine_spec(s, eff), LIMITS[scenario], QUANTILE, mode="quantile",
                reps=s.params["reps"], max_reps=4 * s.params["reps"], n_requests=requests,
                seed=s.params["seed"], progress=progress)


def figures(s: System, result: PlanResult) -> Dict[str, Any]:
    """A Server/Interactive search's answer for the whole system: the rate that
    passed (samples/s, and output tokens/s at the dataset's mean output), the
    bracket per copy, and the p99s there (mean over replications)."""
    mean_output = float(mlperf_lengths(s.params["outputs"])[1].mean())
    rate = result.lo * s.copies
    at = result.at_lo
    return {"samples_per_s": rate, "tokens_per_s": rate * mean_output,
            "rate_per_copy": result.lo,
            "bracket_per_copy": [result.lo, result.hi if math.isfinite(result.hi) else None],
            "ttft_p99_s": at["ttft_target"][0] if at else None,
            "tpot_p99_s": at["tpot_target"][0] if at else None,
            "reason": result.reason}
