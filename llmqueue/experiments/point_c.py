"""Operating point C (SPEC 6.1, the paper's section 6.2).

Every request brings 290 prefill and 990 decode tokens, one arrives every
0.4675 s, and at most 100 are resident.  The token load is 1280 / 0.4675 =
2738 tokens/s, exactly 128 / t_128 on the CodeLlama-34B staircase: the edge
of Theorem 2 at a budget of 128.  Only Sarathi at bmax = 128 keeps up, by
settling into batches of 29 prefill + 99 decode tokens.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from llmqueue.engine.simulate import simulate
from llmqueue.models.workload import renewal
from llmqueue.experiments.base import Param, Rows, Scenario, engine_kwargs, engine_params, register

GAP = 0.4675          # seconds between arrivals
PREFILL = 290         # tokens per prompt
DECODE = 990          # tokens per output
KMAX = 100            # resident requests
HORIZON = 500.0       # seconds

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


def run(params: Dict[str, object], horizon: Optional[float], seed: Optional[int],
        **logs: bool) -> Rows:
    """The six rows, or one row if a scheduler is given."""
    if params["scheduler"] is None:
        rows = ROWS
    else:
        rows = [(params["scheduler"], params["bmax"], params["chunked"])]
    out: Rows = []
    for name, bmax, chunked in rows:
        p = {**params, "scheduler": name, "bmax": bmax, "chunked": chunked}
        result = simulate(renewal(p["gap"], p["vp"], p["vd"]), horizon=horizon or HORIZON,
                          **engine_kwargs(p), **logs)
        out.append((label(name, bmax, chunked), result))
    return out


SCENARIO = register(Scenario(
    name="point-c",
    summary="SPEC 6.1: the six schedulers at the Theorem 2 boundary (290+990 tokens every 0.4675 s)",
    params={**engine_params(kmax=KMAX),
            "scheduler": Param("str", None, "run only this scheduler's row (default: all six)"),
            "gap": Param("float", GAP, "seconds between arrivals"),
            "vp": Param("int", PREFILL, "prefill tokens per request"),
            "vd": Param("int", DECODE, "decode tokens per request")},
    run=run,
    horizon=HORIZON,
))
