"""Replay a real trace (Azure LLM inference 2023 by default) against the four
paper schedulers on the staircase, until every request has finished.

The Azure traces sample a whole service: at their own rate (5.5 requests/s of
1155 + 211 tokens on average for the conversation trace, about 7500 tokens/s)
they are 2.8 times what one CodeLlama-34B A100 (the staircase) serves at
bmax = 128 (2738 tokens/s).  ``speedup`` rescales the trace's times (0.25: a
quarter of the original rate, 69% of that capacity on average); ``limit``
replays only the first requests.  A full replay takes seconds.
"""

from __future__ import annotations

import os
from typing import Any, Dict

from llmqueue.engine.options import RunOptions
from llmqueue.experiments.base import (ENGINE_PARAMS, Experiment, Param, Rows, each_scheduler,
                                       register)
from llmqueue.models.traces import read_trace

SCHEDULERS = ("sarathi", "orca", "vllm", "fastertransformer")
SPEEDUP = 0.25
#: ``../shared/traces`` beside the repository, where the team keeps the Azure files.
TRACES = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                       "shared", "traces"))
DEFAULT_TRACE = os.path.join(TRACES, "AzureLLMInferenceTrace_conv.csv")


def trace_path(path: str) -> str:
    """``path``, or the default Azure conversation trace when ``path`` is empty."""
    if path:
        return path
    if os.path.exists(DEFAULT_TRACE):
        return DEFAULT_TRACE
    raise ValueError(f"path must name a trace file (arrival,prefill,decode or Azure 2023 "
                     f"TIMESTAMP,ContextTokens,GeneratedTokens): the default {DEFAULT_TRACE} "
                     f"is absent; give it with --set path=FILE")


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """One row per scheduler (all four, or the one given), same requests."""
    trace = read_trace(trace_path(str(params["path"])))
    workload = trace.workload(limit=params["limit"], speedup=params["speedup"])
    rows = each_scheduler(params, SCHEDULERS, workload, options)
    if params["cdf"]:
        from llmqueue.plotting import plot_latency_cdfs, save
        save(plot_latency_cdfs(rows, f"{workload.description}: latency CDFs"),
             str(params["cdf"]))
    return rows


EXPERIMENT = register(Experiment(
    name="azure",
    summary="replay a real trace (default: Azure 2023 conversation) against the four schedulers",
    params={**ENGINE_PARAMS,
            "scheduler": Param("str", None, "run only this scheduler (default: all four)"),
            "path": Param("str", "", "trace file (default: ../shared/traces Azure conv file)"),
            "speedup": Param("float", SPEEDUP, "multiply the trace's arrival rate by this"),
            "limit": Param("int-or-none", None, "replay only the first N requests"),
            "cdf": Param("str", "", "also write TTFT/TPOT CDFs to this PNG")},
    run=run,
))
