"""What docs/model.md §6.8.3 (``storms``) and §6.8.4 (``limit-cycle``) share: one
request type of (20, 200) tokens, a KV cache of M = 100,000 tokens, greedy
admission against WAIT(4), docs/model.md §6.8's engine and the figures read from a run.

docs/model.md §6.8's engine (``memory_runs``): no kmax, a token budget that never binds
(10**6), whole prompts, ``KV(capacity_tokens=M, block_size=1,
admission="lazy", preemption="recompute", restart=...)``; every summary
covers the second half of the run (the first half is a warm-up), and the
pending slope is ``memory_runs.pending_slope``.  "Greedy" is ``sarathi``
with lazy admission: it starts every prompt that fits now (vLLM v1).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from llmqueue.engine.results import Result
from llmqueue.experiments import memory_runs as mr
from llmqueue.models.latency import LatencyModel, Staircase
from llmqueue.models.workload import Workload
from llmqueue.policies.wait import Wait
from llmqueue.theory.memory import kv_area, lambda_joint
from llmqueue.theory.wait import lambda_wait, wait_thresholds

VP, VD = 20, 200                 # tokens per prompt, per output
M = 100_000                      # KV cache (tokens)
C, A = 0.02, 2e-5                # docs/model.md §6.8.3's iteration time c + a b (s, s per token)
LINEAR = Staircase(c=C, a=A, b0=1)
QUOTA = 4                        # WAIT's n (wait_thresholds gives it too)
INITIAL = 3_000                  # requests waiting at t = 0 in a full start
SATURATION = mr.SATURATION       # saturated arrivals, a multiple of the capacity
POLICIES = ("greedy", "wait")


def theory(latency: LatencyModel = LINEAR) -> Dict[str, Any]:
    """docs/model.md §6.8.3's closed forms on ``latency``: ``g`` (token-iterations), the
    fixed point ``M / g`` (requests per iteration), ``b_star`` (tokens),
    ``mu_mem`` and ``lambda_joint`` (req/s) with the ``binding`` resource,
    WAIT's quota ``wait_n``, its iteration ``wait_tau`` (s), its KV
    ``wait_kv`` (tokens) and ``lambda_wait`` (req/s)."""
    g = kv_area(VP, VD)
    joint = lambda_joint(M, VP, VD, g, mr.BMAX, latency)
    n = wait_thresholds([(VP, VD, 1)], M)[0]
    rate = lambda_wait([(VP, VD, 1)], [n], latency)
    return {"g": g, "fixed_point": M / g, "b_star": joint.b_star, "mu_mem": joint.memory,
            "lambda_joint": joint.rate, "binding": joint.binding, "wait_n": n,
            "wait_tau": n / rate, "wait_kv": n * g, "lambda_wait": rate}


def policy(name: str) -> object:
    """``greedy`` is ``sarathi`` (lazy admission does the rest); ``wait`` is
    ``Wait(n=4, gate="all", idle="strict")``, the paper's code."""
    if name not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}; got {name!r}")
    return "sarathi" if name == "greedy" else Wait(n=QUOTA, gate="all", idle="strict")


def label(name: str) -> str:
    """A policy's name in row labels: ``greedy`` or ``wait(4)``."""
    return "greedy" if name == "greedy" else f"wait({QUOTA})"


def serve(workload: Workload, scheduler: object, horizon: float, *,
          latency: LatencyModel = LINEAR, restart: str = "keep",
          watermark: Optional[float] = None, batches: bool = True, timeseries: bool = True,
          requests: bool = False) -> Result:
    """One run of docs/model.md §6.8.3's setup (cache of ``M`` tokens, ``latency`` by
    default linear) on docs/model.md §6.8's engine (:func:`memory_runs.serve
    <llmqueue.experiments.memory_runs.serve>`) until ``horizon`` s, its
    summary over the second half; batches and the pending series kept by
    default."""
    return mr.serve(workload, scheduler, latency, M, horizon, warmup=horizon / 2,
                    restart=restart, watermark=watermark, batches=batches,
                    timeseries=timeseries, requests=requests)
