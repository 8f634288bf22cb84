"""An offline batch: N requests present at time 0, run until every one has
finished (no horizon), reporting the throughput of the whole run, as engines'
offline benchmarks (``trtllm-bench throughput``, vLLM's ``benchmark_throughput``)
state theirs: ``output_tokens_per_s`` (their figure), ``prefill_tokens_per_s``,
``throughput_tokens_per_s`` (every token processed) and
``throughput_requests_per_s``; ``duration`` is the batch's makespan.

``run single --set initial=N`` puts the same requests in the system at time 0
(with the same seed) but keeps the arrival stream and stops at the horizon."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping

from llmqueue.engine.options import RunOptions
from llmqueue.engine.simulate import simulate
from llmqueue.experiments import point_c
from llmqueue.experiments.base import (ENGINE_PARAMS, Column, Experiment, Param, Rows,
                                       engine_kwargs, register)
from llmqueue.experiments.presets import SERVING_PARAMS
from llmqueue.experiments.traffic import size_law, size_param
from llmqueue.models.workload import offline

#: Requests in the batch when none is given.
REQUESTS = 1000


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """One row labelled by its scheduler: the batch run to its last request."""
    p = params
    workload = offline(p["requests"], size_law("vp", p["vp"]), size_law("vd", p["vd"]),
                       seed=options.seed or 0)
    result = simulate(workload, horizon=None, **engine_kwargs(p), **options.logs(),
                      first_token=p["first_token"])
    s = result.summary
    if "throughput_requests_per_s" not in s:  # with a KV cache the memory figures have it
        result.add_figures(throughput_requests_per_s=s["completed"] / s["duration"]
                           if s["duration"] else None)
    return [(str(p["scheduler"]), result)]


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
        out.append(f"{label}: {s['completed']} of {params['requests']} requests done in "
                   f"{s['duration']:.3f} s, first tokens with the {params['first_token']}")
        if s.get("ignored"):
            out.append(f"{label}: {s['ignored']} requests ignored: they can never fit the KV "
                       "cache")
    return out


EXPERIMENT = register(Experiment(
    name="offline",
    summary="an offline batch: N requests at time 0 run to the last one's end (output "
            "tokens/s of the whole run)",
    params={**ENGINE_PARAMS,
            "requests": Param("int", REQUESTS, "requests in the batch, all present at time 0",
                              low=1),
            "vp": size_param(point_c.PREFILL, "prefill tokens per request"),
            "vd": size_param(point_c.DECODE, "output tokens per request"),
            **SERVING_PARAMS},
    run=run,
    seeded=True,
    options=frozenset({"seed", "batches", "requests", "timeseries"}),
    columns=COLUMNS,
    notes=notes,
))
