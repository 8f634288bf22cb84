"""The queue blow-up demo: the paper's Fig. 1 workload under the four schedulers.

Poisson arrivals; prompt and output lengths are geometric on {1, 2, ...} with
means 129 and 112 tokens (the paper gives only the means; geometric lengths
have the long right tail of real traces).  bmax = 512, no kmax, the
CodeLlama-34B staircase: the token capacity is 512 / 0.15316 s = 3342.9
tokens/s, so lambda* = 3342.9 / 241 = 13.87 req/s.  At 0.95 of it the
work-conserving schedulers (Sarathi, Orca) hold the queue; vLLM and
FasterTransformer leave budget unused and their queues grow without bound.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Tuple, Union

from llmqueue.common import validation
from llmqueue.engine.options import RunOptions
from llmqueue.experiments.base import (Experiment, Param, Rows, each_scheduler, engine_kwargs,
                                       engine_params, register)
from llmqueue.models.arrivals import Poisson
from llmqueue.models.latency import tokens_time
from llmqueue.experiments.traffic import mean_sizes, read_size, size_law
from llmqueue.models.sizes import SIZE_FORMS, Geometric, SizeLaw
from llmqueue.models.workload import Workload, compose
from llmqueue.theory import capacity as theory
from llmqueue.theory.shapes import at_mean_context

MEAN_PREFILL = 129       # tokens per prompt, on average
MEAN_DECODE = 112        # tokens per output, on average
BMAX = 512               # token budget
LOAD = 0.95              # arrival rate as a fraction of lambda*
HORIZON = 600.0          # seconds
SCHEDULERS = ("sarathi", "orca", "vllm", "fastertransformer")
#: What ``vp`` and ``vd`` take here.
MEAN_OR_LAW = f"a geometric mean (a number) or a size law: {SIZE_FORMS}"

#: When each scheduler leaves budget unused, in words.
WHY: Dict[str, str] = {
    "sarathi": "decodes first, then prompt chunks fill the rest of every batch",
    "orca": "prompt chunks first, then decodes fill the rest of every batch",
    "vllm": "while any prompt waits it runs prompt-only batches: the few new prompts "
            "fill part of the budget while every decoder stalls",
    "fastertransformer": "while any request decodes it runs decode-only batches: new "
                         "prompts wait until the decoding group has finished, so batches "
                         "hold a handful of decoders",
}


def geometric_workload(rate: float, mean_prefill: Union[float, SizeLaw],
                       mean_decode: Union[float, SizeLaw], seed: int = 0) -> Workload:
    """Poisson arrivals at ``rate`` per second with geometric prompt and output
    lengths on {1, 2, ...} of the given means (:func:`~llmqueue.workload.compose`);
    a size law in place of a mean is used as it is."""
    return compose(Poisson(rate), _law(mean_prefill), _law(mean_decode), seed=seed)


def _law(size: Union[float, SizeLaw]) -> SizeLaw:
    return size if isinstance(size, SizeLaw) else Geometric(size)


def read_mean_or_law(name: str, text: str) -> Union[float, str]:
    """``vp``/``vd`` here: a plain number is the mean of a geometric law (as
    always in this demo), any other size law is its text (``uniform:LO:HI``, ...)."""
    try:
        value = float(text)
    except ValueError:
        return read_size(name, text)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite mean or a size law; got {text!r}")
    return value


def sizes(params: Dict[str, Any]) -> Tuple[SizeLaw, SizeLaw]:
    """The prompt and output size laws of ``params`` (numbers: geometric means)."""
    vp, vd = params["vp"], params["vd"]
    return (_law(vp) if isinstance(vp, float) else size_law("vp", vp),
            _law(vd) if isinstance(vd, float) else size_law("vd", vd))


def mean_tokens(params: Dict[str, Any]) -> Tuple[float, float]:
    """The mean prompt and output sizes (tokens) of ``params``."""
    prefill, decode = sizes(params)
    return mean_sizes({"vp": prefill, "vd": decode})


def rate_of(params: Dict[str, Any]) -> float:
    """Arrivals per second: ``load`` times lambda* of the engine and mean sizes."""
    if params["bmax"] is None:
        raise ValueError("bmax must be an integer >= 1 here (capacity needs a budget); "
                         "got none")
    validation.positive_number("load", params["load"])
    star = theory.lambda_star(params["bmax"], *mean_tokens(params),
                              engine_kwargs(params)["latency"])
    return params["load"] * star


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """The four schedulers on one arrival stream (or one, if a scheduler is given)."""
    workload = geometric_workload(rate_of(params), *sizes(params), seed=options.seed or 0)
    return each_scheduler(params, SCHEDULERS, workload, options, HORIZON)


def explain(rows: Rows, params: Dict[str, Any]) -> List[str]:
    """A few lines on what happened and why, from the runs' own figures."""
    bmax, rate = params["bmax"], rate_of(params)
    # a context model (the roofline) at the mean contexts, as lambda* reads it
    latency = at_mean_context(engine_kwargs(params)["latency"], *mean_tokens(params))
    tokens = sum(mean_tokens(params))
    offered = rate * tokens
    capacity = theory.token_capacity(bmax, latency)
    lines = [f"Offered: {rate:.2f} req/s x {tokens:g} tokens = "
             f"{offered:.0f} tokens/s, {offered / capacity:.0%} of the token capacity "
             f"{capacity:.0f} tokens/s ({bmax} tokens per {tokens_time(latency, bmax):.4f} s "
             f"batch)."]
    for name, result in rows:
        s = result.summary
        if not s["batches"] or s["backlog_slope"] is None:
            lines.append(f"- {name}: too short a run to say ({s['batches']} batches)")
            continue
        batches = s["batches"]
        mean_batch = s["throughput_tokens_per_s"] * s["duration"] / batches
        unused = s["non_work_conserving_batches"] / batches
        lines.append(
            f"- {name}: {WHY.get(name, 'its own rule')} (batches: "
            f"{s['prefill_only_fraction']:.0%} prompt-only, {s['decode_only_fraction']:.0%} "
            f"decode-only, {s['mixed_fraction']:.0%} mixed). {unused:.0%} of its batches leave "
            f"budget unused (mean batch {mean_batch:.0f} of {bmax} tokens); backlog slope "
            f"{s['backlog_slope']:+.0f} +- {s['backlog_slope_se']:.0f} tokens/s: "
            f"{s['verdict']} (theory: {s['predicted']}).")
    lines.append("A scheduler that never leaves budget unused while work waits serves full "
                 "batches whenever the queue is long, at the capacity above, so any load "
                 "below it drains; one that idles budget serves less than what arrives.")
    return lines


EXPERIMENT = register(Experiment(
    name="blowup",
    summary="teaching demo: Fig. 1 workload (Poisson, geometric 129+112 tokens) at 0.95 of "
            "lambda*, four schedulers",
    params={**engine_params(bmax=BMAX, kmax=None),
            "scheduler": Param("str", None, "run only this scheduler (default: all four)"),
            "load": Param("float", LOAD, "arrival rate as a fraction of lambda*"),
            "vp": Param("custom", float(MEAN_PREFILL), "prompt tokens: a number is the mean "
                        "of a geometric law", reader=read_mean_or_law, forms=MEAN_OR_LAW),
            "vd": Param("custom", float(MEAN_DECODE), "output tokens: a number is the mean "
                        "of a geometric law", reader=read_mean_or_law, forms=MEAN_OR_LAW)},
    run=run,
    horizon=HORIZON,
    seeded=True,
    notes=explain,
))
