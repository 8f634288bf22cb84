"""Replay a real trace (Azure LLM inference 2023 by default) against the four
paper schedulers on the staircase, until every request has finished.

The Azure traces sample a whole service: at their own rate (5.5 requests/s of
1155 + 211 tokens on average for the conversation trace, about 7500 tokens/s)
they are 2.8 times what one CodeLlama-34B A100 (the staircase) serves at
bmax = 128 (2738 tokens/s).  ``speedup`` rescales the trace's times (0.25, the
default: a quarter of the original rate, 69% of that capacity on average;
1: as recorded); ``limit`` replays only the first requests.  The replay line
under the table says which (:func:`~llmqueue.experiments.trace.replay_line`).
A full replay takes seconds.

The trace is not shipped with llmqueue: :data:`SOURCE` publishes it (CC-BY
4.0); the default path is :data:`DEFAULT_TRACE`, and :func:`absent_note`
says where to put it when it is not there.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Dict, Optional

from llmqueue.engine.options import RunOptions
from llmqueue.experiments.base import (ENGINE_PARAMS, Experiment, Param, Rows, each_scheduler,
                                       register)
from llmqueue.experiments.trace import replay_info, replayed
from llmqueue.models.traces import read_trace

SCHEDULERS = ("sarathi", "orca", "vllm", "fastertransformer")
SPEEDUP = 0.25
#: ``../shared/traces`` beside the repository, where the team keeps the Azure files.
TRACES = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                       "shared", "traces"))
DEFAULT_TRACE = os.path.join(TRACES, "AzureLLMInferenceTrace_conv.csv")
#: Where the Azure LLM inference trace 2023 is published, and its licence.
SOURCE = ("https://github.com/Azure/AzurePublicDataset (AzureLLMInferenceDataset2023.md; "
          "licence CC-BY 4.0)")


def absent_note() -> Optional[str]:
    """Why the default trace cannot be replayed here, with where to get it
    and where to put it; ``None`` when :data:`DEFAULT_TRACE` is there."""
    if os.path.exists(DEFAULT_TRACE):
        return None
    return (f"the Azure LLM inference trace 2023 is not at {DEFAULT_TRACE}: download "
            f"{os.path.basename(DEFAULT_TRACE)} from {SOURCE} into "
            f"{os.path.dirname(DEFAULT_TRACE)}")


def trace_path(path: str) -> str:
    """``path``, or the default Azure conversation trace when ``path`` is empty."""
    if path:
        return path
    absent = absent_note()
    if absent is None:
        return DEFAULT_TRACE
    raise ValueError(f"{absent}, or give a trace file (arrival,prefill,decode or Azure 2023 "
                     f"TIMESTAMP,ContextTokens,GeneratedTokens) with --set path=FILE")


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """One row per scheduler (all four, or the one given), same requests."""
    trace = read_trace(trace_path(str(params["path"])))
    workload = trace.workload(limit=params["limit"], speedup=params["speedup"])
    info = replay_info(trace, params["limit"], params["speedup"])
    names = SCHEDULERS if params["scheduler"] is None else (params["scheduler"],)
    with_series = replace(options, timeseries=True)  # for each replay's drift
    rows = [(label, replayed(result, info, options)) for name in names
            for label, result in each_scheduler({**params, "scheduler": name}, SCHEDULERS,
                                                workload, with_series)]
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
            "speedup": Param("float", SPEEDUP, "divide the trace's arrival times by this "
                             "(0.25: a quarter of its rate; 1: as recorded)"),
            "limit": Param("int-or-none", None, "replay only the first N requests"),
            "cdf": Param("str", "", "also write TTFT/TPOT CDFs to this PNG")},
    run=run,
))
