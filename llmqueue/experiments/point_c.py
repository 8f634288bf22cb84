"""Operating point C (docs/model.md §9.1, the paper's section 6.2).

Every request brings 290 prefill and 990 decode tokens, one arrives every
0.4675 s, and at most 100 are resident.  The token load is 1280 / 0.4675 =
2738 tokens/s, exactly 128 / t_128 on the CodeLlama-34B staircase: the edge
of Theorem 2 at a budget of 128.  Only Sarathi at bmax = 128 keeps up, by
settling into batches of 29 prefill + 99 decode tokens.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from llmqueue.engine.options import RunOptions
from llmqueue.engine.simulate import simulate
from llmqueue.experiments.base import (Experiment, Param, Rows, engine_kwargs, engine_params,
                                       register)
from llmqueue.experiments.capacity import add_memory_capacity
from llmqueue.experiments.traffic import size_param, workload_of

GAP = 0.4675          # seconds between arrivals
PREFILL = 290         # tokens per prompt
DECODE = 990          # tokens per output
KMAX = 100            # resident requests
HORIZON = 500.0       # seconds

#: The token budget of docs/model.md §9.1 (a row's budget when only a scheduler is named).
BMAX = 128
#: The paper's four schedulers (the rows when a bmax is given).
SCHEDULERS = ("sarathi", "orca", "vllm", "fastertransformer")

#: The six rows of the reference table: (scheduler, bmax, chunked).
ROWS: List[Tuple[str, int, bool]] = [
    ("sarathi", 128, True),
    ("orca", 128, True),
    ("vllm", 128, True),
    ("fastertransformer", 128, True),
    ("fastertransformer", 1024, True),
    ("fastertransformer", 10**6, False),
]


def label(scheduler: str, bmax: int, chunked: bool) -> str:
    """Row label such as ``sarathi-128`` or ``fastertransformer-whole``."""
    return f"{scheduler}-{'whole' if not chunked else bmax}"


def rows_of(params: Dict[str, Any]) -> List[Tuple[str, int, bool]]:
    """The ``(scheduler, bmax, chunked)`` rows the parameters ask for: the six
    reference rows by default; with ``bmax``, the four paper schedulers at that
    budget; with ``scheduler``, that one row (at ``bmax``, else 128)."""
    scheduler, bmax, chunked = params["scheduler"], params["bmax"], params["chunked"]
    if scheduler is not None:
        return [(str(scheduler), BMAX if bmax is None else int(bmax), bool(chunked))]
    if bmax is not None:
        return [(name, int(bmax), bool(chunked)) for name in SCHEDULERS]
    if not chunked:
        raise ValueError("chunked=false needs a scheduler or a bmax: the six reference rows "
                         "set their own (fastertransformer-whole is the unchunked one)")
    return ROWS


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """One run per row of :func:`rows_of`."""
    out: Rows = []
    for name, bmax, chunked in rows_of(params):
        p = {**params, "scheduler": name, "bmax": bmax, "chunked": chunked}
        kwargs = engine_kwargs(p)
        result = simulate(workload_of(p, 0, gap=p["gap"]),
                          horizon=options.horizon or HORIZON, **kwargs, **options.logs())
        add_memory_capacity(result, p, kwargs["latency"], 1 / p["gap"])
        out.append((label(name, bmax, chunked), result))
    return out


EXPERIMENT = register(Experiment(
    name="point-c",
    summary="model §9.1: the six schedulers at the Theorem 2 boundary "
            "(290+990 tokens every 0.4675 s)",
    params={**engine_params(kmax=KMAX),
            "scheduler": Param("str", None, "run only this scheduler's row (default: all six)"),
            "bmax": Param("int-or-none", None, "token budget of every row (default: each "
                          "reference row's own: 128, 1024 or whole prompts)", low=1),
            "gap": Param("float", GAP, "seconds between arrivals"),
            "vp": size_param(PREFILL, "prefill tokens per request (laws drawn with seed 0)"),
            "vd": size_param(DECODE, "decode tokens per request (laws drawn with seed 0)")},
    run=run,
    horizon=HORIZON,
))
