"""Replay a CSV of requests (``arrival,prefill,decode``) on one engine until
every request has finished (or until ``--horizon``)."""

from __future__ import annotations

from typing import Any, Dict

from llmqueue.engine.options import RunOptions
from llmqueue.engine.simulate import simulate
from llmqueue.experiments.base import (ENGINE_PARAMS, Experiment, Param, Rows, engine_kwargs,
                                       register)
from llmqueue.models.traces import read_csv


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """One row labelled by its scheduler."""
    if not params["path"]:
        raise ValueError("path must name a CSV file (arrival,prefill,decode); "
                         "give it with --set path=FILE")
    result = simulate(read_csv(str(params["path"])), horizon=options.horizon,
                      **engine_kwargs(params), **options.logs())
    return [(str(params["scheduler"]), result)]


EXPERIMENT = register(Experiment(
    name="trace",
    summary="replay a CSV of requests (arrival,prefill,decode) until all finish",
    params={**ENGINE_PARAMS, "path": Param("str", "", "the CSV file to replay")},
    run=run,
))
