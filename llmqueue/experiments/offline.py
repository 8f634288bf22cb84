"""An offline batch: N requests present at time 0, run until every one has
finished (no horizon), reporting the throughput of the whole run, as engines'
offline benchmarks (``trtllm-bench throughput``, vLLM's ``benchmark_throughput``)
state theirs: ``output_tokens_per_s`` (their figure), ``prefill_tokens_per_s``,
``throughput_tokens_per_s`` (every token processed) and
``throughput_requests_per_s``; ``duration`` is the batch's makespan.

``run single --set initial=N`` puts the same requests in the system at time 0
(with the same seed) but keeps the arrival stream and stops at the horizon.

``rate=R`` (default ``inf``: the batch at time 0) sends the same requests as
vLLM's ``benchmark_serving --request-rate R`` does: the first at time 0, each
next one after an exponential gap of mean ``1/R`` (Poisson arrivals), still run
until the last one finishes, so ``output_tokens_per_s`` is the output tokens
over the last finish, as vLLM's ``output_throughput``.  ``lengths`` lists each
request's prompt and output tokens in arrival order instead of ``requests``,
``vp`` and ``vd`` (a benchmark's per-request lengths)."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Tuple

from llmqueue.common import validation
from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result
from llmqueue.engine.simulate import simulate
from llmqueue.experiments import point_c
from llmqueue.experiments.base import (ENGINE_PARAMS, Column, Experiment, Param, Rows,
                                       engine_kwargs, register)
from llmqueue.experiments.presets import SERVING_PARAMS
from llmqueue.experiments.traffic import size_law, size_param
from llmqueue.models.arrivals import Poisson
from llmqueue.models.latency import LatencyModel
from llmqueue.models.workload import Workload, compose, from_list, offline

#: Requests in the batch when none is given.
REQUESTS = 1000


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """One row labelled by its scheduler: the batch run to its last request."""
    return [(str(params["scheduler"]), batch(params, options))]


def batch(p: Mapping[str, Any], options: RunOptions,
          latency: Optional[LatencyModel] = None) -> Result:
    """The offline batch ``p`` describes, run to its last request; ``latency``
    (default: the one ``p``'s keys name) prices its iterations."""
    workload = workload_of(p, options.seed or 0)
    kwargs = engine_kwargs(p)
    if latency is not None:
        kwargs["latency"] = latency
    result = simulate(workload, horizon=None, **kwargs, **options.logs(),
                      first_token=p["first_token"])
    s = result.summary
    if "throughput_requests_per_s" not in s:  # with a KV cache the memory figures have it
        result.add_figures(throughput_requests_per_s=s["completed"] / s["duration"]
                           if s["duration"] else None)
    return result


#: The table an offline batch prints (KV columns show "-" without a cache).
COLUMNS: List[Column] = [
    ("completed", "done", "{:d}"),
    ("duration", "makespan s", "{:.3f}"),
    ("output_tokens_per_s", "output tok/s", "{:.0f}"),
    ("prefill_tokens_per_s", "prefill tok/s", "{:.0f}"),
    ("throughput_tokens_per_s", "all tok/s", "{:.0f}"),
    ("ttft_p50", "TTFT p50 s", "{:.3f}"),
    ("tpot_p50", "TPOT p50 s", "{:.4f}"),
    ("preemptions", "preempted", "{:d}"),
    ("recompute_fraction", "recomputed", "{:.1%}"),
]


def notes(rows: Rows, params: Mapping[str, Any]) -> List[str]:
    """A line per row: the batch, its makespan and when first tokens came; the
    requests a KV cache could never hold."""
    out = []
    for label, result in rows:
        s = result.summary
        asked = len(lengths_of(params["lengths"])) if params.get("lengths") else \
            params["requests"]
        out.append(f"{label}: {s['completed']} of {asked} requests done in "
                   f"{s['duration']:.3f} s, first tokens with the {params['first_token']}")
        if s.get("ignored"):
            out.append(f"{label}: {s['ignored']} requests ignored: they can never fit the KV "
                       "cache")
    return out


def workload_of(p: Mapping[str, Any], seed: int) -> Workload:
    """The requests of ``p``: ``requests`` of sizes ``vp`` and ``vd`` (or those
    ``lengths`` lists), all at time 0 when ``rate`` is inf (exactly the batch of
    :func:`~llmqueue.models.workload.offline`), else the first at time 0 and each
    next after an exponential gap of mean ``1/rate`` (vLLM's
    ``benchmark_serving``): the same sizes as the batch of that seed, only the
    times differ.  ``lengths`` with ``requests``, ``vp`` or ``vd`` set away from
    their defaults is an error (never ignored)."""
    rate, lengths = p.get("rate", math.inf), p.get("lengths")
    law = None if math.isinf(rate) else Poisson(rate)
    if lengths is None:
        vp, vd = size_law("vp", p["vp"]), size_law("vd", p["vd"])
        if law is None:
            return offline(p["requests"], vp, vd, seed=seed)
        return compose(law, vp, vd, count=p["requests"], seed=seed, initial=1)
    defaults = {"requests": REQUESTS, "vp": point_c.PREFILL, "vd": point_c.DECODE}
    changed = [key for key, value in defaults.items() if p.get(key, value) != value]
    if changed:
        raise ValueError(f"lengths lists every request's prompt and output tokens, so "
                         f"{', '.join(changed)} cannot be set with it")
    pairs = lengths_of(lengths)
    times = [0.0] * len(pairs) if law is None else \
        [a.time for a in compose(law, 0, 1, count=len(pairs), seed=seed, initial=1)]
    return from_list([(t, prompt, output) for t, (prompt, output) in zip(times, pairs)])


def read_rate(name: str, text: str) -> float:
    """The ``rate`` key: ``inf`` (every request at time 0) or Poisson arrivals
    per second (a finite number > 0), else a one-line ValueError."""
    try:
        value = float(str(text).strip())
    except ValueError:
        value = math.nan
    if value == math.inf:
        return value
    try:
        return validation.arrival_rate(name, value)
    except ValueError:
        raise ValueError(f"{name} must be inf (every request at time 0) or requests per "
                         f"second, a number >= 1e-12 (Poisson arrivals from time 0); got "
                         f"{validation.shown(text)}") from None


def read_lengths(name: str, text: str) -> Optional[str]:
    """The ``lengths`` key: ``none``, or ``PROMPT:OUTPUT`` tokens per request,
    comma-separated, in arrival order, checked by :func:`lengths_of` and kept
    as text."""
    value = str(text).strip()
    if value.lower() in ("", "none"):
        return None
    lengths_of(value, name)
    return value


def lengths_of(text: str, name: str = "lengths") -> List[Tuple[int, int]]:
    """``(prompt, output)`` tokens of each ``PROMPT:OUTPUT`` of ``text``
    (``128:16,2048:7``; an output of at least 1 token), or a one-line
    ValueError naming ``name`` and the request."""
    pairs = []
    for i, item in enumerate(text.split(","), 1):
        prompt, colon, output = item.partition(":")
        if not colon:
            raise ValueError(f"{name}: request {i} must be PROMPT:OUTPUT tokens (e.g. "
                             f"128:16); got {validation.shown(item)}")
        pairs.append((validation.token_text(f"{name}: request {i}'s prompt", prompt),
                      validation.token_count(f"{name}: request {i}'s output",
                                             validation.token_text(
                                                 f"{name}: request {i}'s output", output),
                                             minimum=1)))
    return pairs


EXPERIMENT = register(Experiment(
    name="offline",
    summary="an offline batch: N requests at time 0 run to the last one's end (output "
            "tokens/s of the whole run)",
    params={**ENGINE_PARAMS,
            "requests": Param("int", REQUESTS, "requests in the batch, all present at time 0 "
                              "(unless rate is set)", low=1),
            "vp": size_param(point_c.PREFILL, "prefill tokens per request"),
            "vd": size_param(point_c.DECODE, "output tokens per request"),
            "rate": Param("custom", math.inf, "requests per second, Poisson from time 0 as "
                          "vLLM's benchmark_serving sends them (inf: all at time 0)",
                          reader=read_rate, forms="inf or a number > 0", quiet_default=True),
            "lengths": Param("custom", None, "each request's PROMPT:OUTPUT tokens, "
                             "comma-separated, in arrival order, instead of requests, vp and "
                             "vd (none: those)", reader=read_lengths,
                             forms="none or PROMPT:OUTPUT,PROMPT:OUTPUT,...",
                             quiet_default=True),
            **SERVING_PARAMS},
    run=run,
    seeded=True,
    options=frozenset({"seed", "batches", "requests", "timeseries"}),
    columns=COLUMNS,
    notes=notes,
))
