"""Capacity and stability in closed form (docs/model.md §3 and §9.2, the paper's Theorem 2).

An engine with token budget ``bmax`` whose batches of ``b`` tokens last ``t_b``
seconds:

* a work-conserving policy in overload fills every batch to ``bmax``, so it
  serves ``bmax / t_bmax`` tokens per second: the **token capacity**.  It is
  stable when the offered tokens ``lambda * (m_p + m_d)`` stay below it, and
  above it the backlog grows at the **fluid slope**
  ``lambda * (m_p + m_d) - bmax / t_bmax`` tokens per second;
* no policy at all serves faster than the **peak token rate**
  ``max over b <= bmax of b / t_b``.  docs/model.md §9.2 says ``bmax / t_bmax`` is that
  bound, which holds when the best batch is the full one (on the staircase:
  when ``bmax`` is a multiple of ``b0``).  Otherwise a smaller batch can be
  faster per token: with ``b0 = 128, bmax = 200``, ``128 / t_128 > 200 / t_200``.

Every function takes any latency model (``llmqueue.models.latency.tokens_time``
prices a batch of ``b`` tokens); those that know the workload's mean sizes
read a context model (the roofline) at its mean contexts
(:mod:`~llmqueue.theory.shapes`: the full batch at the workload's mix,
docs/model.md §7.10, E8.4's ``t_mix``), which makes their figures approximate.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Mapping, Optional

import numpy as np

from llmqueue.common import validation
from llmqueue.common.units import ceil_div
from llmqueue.models.latency import Constant, LatencyModel, Staircase, tokens_time
from llmqueue.theory.shapes import at_mean_context


def _model(latency: Optional[LatencyModel]) -> LatencyModel:
    return Staircase() if latency is None else latency


def token_capacity(bmax: int, latency: Optional[LatencyModel] = None) -> float:
    """Tokens per second of full batches, ``bmax / t_bmax``: what a
    work-conserving policy serves in overload (default: the paper's staircase)."""
    validation.positive_int("bmax", bmax)
    return bmax / tokens_time(_model(latency), bmax)


#: Largest batch size tried one by one for a model of unknown shape.
SEARCH_LIMIT = 1 << 16


def _candidates(bmax: int, latency: LatencyModel) -> Iterable[int]:
    """Batch sizes where ``b / t_b`` can peak.  On a staircase ``t_b`` is flat
    between multiples of ``b0``, so ``b / t_b`` peaks at their right ends; a
    constant time peaks at ``bmax``; other models are tried at every size."""
    if isinstance(latency, Staircase):
        # k * b0 / (c + k * a) grows with k: the last full step, and bmax itself
        return sorted({bmax // latency.b0 * latency.b0, bmax} - {0})
    if isinstance(latency, Constant):
        return [bmax]
    return [*range(1, min(bmax, SEARCH_LIMIT) + 1), bmax]


def peak_token_rate(bmax: int, latency: Optional[LatencyModel] = None) -> float:
    """``max over 1 <= b <= bmax of b / t_b``: no policy serves tokens faster."""
    validation.positive_int("bmax", bmax)
    model = _model(latency)
    sizes = _candidates(bmax, model)
    many = getattr(model, "tokens_times", None)  # the roofline prices all sizes at once
    if many is not None:
        counts = np.array(list(sizes), dtype=np.int64)
        return float(np.max(counts / many(counts)))
    return max(b / tokens_time(model, b) for b in sizes)


def lambda_star(bmax: int, mean_prefill: float, mean_decode: float,
                latency: Optional[LatencyModel] = None) -> float:
    """Requests per second at which the offered tokens equal the token capacity,
    ``(bmax / t_bmax) / (m_p + m_d)``: the stability boundary of Theorem 2
    (a context model at the workload's mean contexts: :func:`_workload_capacity`).

    Examples:
        Point C (docs/model.md §9.1): 128 tokens per 0.04675 s over 290 + 990 tokens, i.e.
        one request every 0.4675 s.

        >>> round(lambda_star(128, 290, 990), 3)
        2.139
    """
    tokens = _tokens_per_request(mean_prefill, mean_decode)
    return _workload_capacity(bmax, mean_prefill, mean_decode, latency) / tokens


def load(rate: float, bmax: int, mean_prefill: float, mean_decode: float,
         latency: Optional[LatencyModel] = None) -> float:
    """Offered tokens over token capacity, ``lambda * (m_p + m_d) / (bmax / t_bmax)``."""
    validation.positive_number("rate", rate)
    tokens = _tokens_per_request(mean_prefill, mean_decode)
    return rate * tokens / _workload_capacity(bmax, mean_prefill, mean_decode, latency)


def fluid_slope(rate: float, bmax: int, mean_prefill: float, mean_decode: float,
                latency: Optional[LatencyModel] = None) -> float:
    """Backlog growth (tokens/s) of a work-conserving policy in the fluid limit,
    ``max(0, lambda * (m_p + m_d) - bmax / t_bmax)``."""
    validation.positive_number("rate", rate)
    offered = rate * _tokens_per_request(mean_prefill, mean_decode)
    return max(0.0, offered - _workload_capacity(bmax, mean_prefill, mean_decode, latency))


def _workload_capacity(bmax: int, mean_prefill: float, mean_decode: float,
                       latency: Optional[LatencyModel]) -> float:
    """:func:`token_capacity` for requests of these mean sizes: a model not of
    the batch size alone (the roofline, docs/model.md §4's step model) read at their mix
    and mean contexts (:func:`~llmqueue.theory.shapes.at_mean_context`,
    approximate), any other exactly."""
    return token_capacity(bmax, at_mean_context(latency, mean_prefill, mean_decode))


def _tokens_per_request(mean_prefill: float, mean_decode: float) -> float:
    validation.nonnegative_number("mean_prefill", mean_prefill)
    validation.positive_number("mean_decode", mean_decode)
    return float(mean_prefill) + float(mean_decode)


def batch_demand(prefill_left: Iterable[int], decoding: int) -> int:
    """docs/model.md §3's demand: the residents' remaining prefill plus one token for
    each resident that is decoding."""
    return sum(prefill_left) + decoding


def is_work_conserving(batch_tokens: int, demand: int, bmax: int) -> bool:
    """docs/model.md §3 (the paper's (8)-(9)): a batch is work-conserving when its size
    is ``min(bmax, demand)``."""
    validation.nonnegative_int("batch_tokens", batch_tokens)
    validation.nonnegative_int("demand", demand)
    validation.positive_int("bmax", bmax)
    return batch_tokens == min(bmax, demand)


def violations(i0: int, n: int, b: int, bmax: int, demand: int, prefill: int) -> int:
    """Batches among iterations ``i0 .. i0+n-1`` of a run of ``b`` tokens each
    that are not work-conserving (:func:`is_work_conserving`): ``b`` below
    ``min(bmax, demand_i)``, where ``demand_i = demand - i * prefill`` (the
    run's prefill drains the demand); the recorder counts them in O(1) a run."""
    if b >= bmax or demand <= b:
        return 0
    if prefill == 0:
        return n
    limit = ceil_div(demand - b, prefill)  # first i with demand_i <= b
    return max(0, min(i0 + n, limit) - i0)


def littles_law(summary: Mapping[str, Any]) -> Dict[str, Optional[float]]:
    """Little's law ``L = lambda * W`` on a finished run's summary.

    ``L`` is the time-average of pending, ``lambda`` the arrivals per second and
    ``W`` the mean time in system of the completed requests.  When every request
    has finished the two sides agree exactly (both are the total time spent in
    the system over the run's duration); with requests still in the system at
    the horizon ``lambda * W`` undercounts by their share.  Returns ``L``,
    ``lambda``, ``W``, ``lambda_W`` and ``relative_error = |L - lambda W| / L``
    (``None`` where undefined).
    """
    duration = summary.get("duration")
    pending_mean = summary.get("pending_mean")
    w = summary.get("e2e_mean")
    if not duration or pending_mean is None or w is None:
        return {"L": pending_mean, "lambda": None, "W": w, "lambda_W": None,
                "relative_error": None}
    rate = float(summary["arrivals"]) / float(duration)
    lam_w = rate * float(w)
    error = abs(pending_mean - lam_w) / pending_mean if pending_mean else None
    return {"L": float(pending_mean), "lambda": rate, "W": float(w), "lambda_W": lam_w,
            "relative_error": error}
