"""Replay a trace of requests on one engine until every request has finished
(or until ``--horizon``): a CSV (``arrival,prefill,decode``, or Azure's 2023
columns) or a Mooncake JSON Lines file (``.jsonl``: with each prompt's hash
ids, which a prefix cache reads: ``--set prefix=on`` with ``kv``)."""

from __future__ import annotations

from typing import Any, Dict

from llmqueue.engine.options import RunOptions
from llmqueue.engine.simulate import simulate
from llmqueue.experiments.base import (ENGINE_PARAMS, Experiment, Param, Rows, engine_kwargs,
                                       register)
from llmqueue.experiments.presets import SERVING_PARAMS
from llmqueue.experiments.traffic import PREFIX_PARAMS
from llmqueue.models.traces import read_trace


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """One row labelled by its scheduler."""
    if not params["path"]:
        raise ValueError("path must name a trace file (a CSV of arrival,prefill,decode, or a "
                         "Mooncake .jsonl); give it with --set path=FILE")
    workload = read_trace(str(params["path"]), hash_block=params["hash_block"]).workload()
    if not params["prefix"]:  # a trace's ids mean nothing to an engine without the cache
        workload = workload.without_ids()
    result = simulate(workload, horizon=options.horizon, **engine_kwargs(params),
                      **options.logs(), first_token=params["first_token"])
    return [(str(params["scheduler"]), result)]


EXPERIMENT = register(Experiment(
    name="trace",
    summary="replay a trace (CSV, or Mooncake .jsonl with prefix ids) until all finish",
    params={**ENGINE_PARAMS, "path": Param("str", "", "the trace file to replay (.csv or "
                                           ".jsonl)"),
            "hash_block": PREFIX_PARAMS["hash_block"], **SERVING_PARAMS},
    run=run,
))
