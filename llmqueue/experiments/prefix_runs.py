"""The engine the prefix-caching reference experiments share: sarathi,
bmax = 512, no kmax, the CodeLlama-34B staircase, and a KV cache of M tokens
in blocks of 16 whose hash blocks are 16 tokens too, prefix caching on unless
asked otherwise.  ``prefix-capacity``, ``prefix-che``, ``prefix-sessions`` and
``prefix-collapse`` run on it.
"""

from __future__ import annotations

from typing import Any, Optional

from llmqueue.engine.kv import KV
from llmqueue.engine.results import Result
from llmqueue.engine.simulate import simulate
from llmqueue.models.latency import Staircase

BMAX = 512
#: B = H: tokens per KV block and per prefix id.
KV_BLOCK = 16
LATENCY = Staircase()


def serve(work: Any, M: int, prefix: bool = True, *, horizon: Optional[float] = None,
          warmup: float = 0.0, batches: bool = False, requests: bool = False,
          timeseries: bool = False) -> Result:
    """``work`` (a workload, or sessions) on the shared engine with a KV cache
    of ``M`` tokens, prefix caching on or off, until ``horizon`` (``None``:
    until every request has finished), the first ``warmup`` seconds left out
    of the figures; ``batches``, ``requests`` and ``timeseries`` keep those logs."""
    return simulate(work, "sarathi", bmax=BMAX, kmax=None, latency=LATENCY,
                    kv=KV(capacity_tokens=M, block_size=KV_BLOCK, prefix=prefix),
                    horizon=horizon, warmup=warmup, batches=batches, requests=requests,
                    timeseries=timeseries)
