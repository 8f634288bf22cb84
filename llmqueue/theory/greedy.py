"""Greedy admission under KV memory in closed form (docs/model.md §6.8.3 and §6.8.4).

A greedy scheduler (``sarathi`` with lazy admission, as vLLM v1) starts every
waiting prompt that fits.  Two of its regimes have simple closed forms for
one request type of ``vp`` prompt and ``vd`` decode tokens with whole
prompts:

* **below capacity, the fluid point** [I]: in steady state each iteration
  starts the ``n = lambda t`` requests that arrived during it, and ``n (vd + 1)``
  residents hold ``n g`` KV tokens (``g`` = :func:`~llmqueue.theory.memory.kv_area`).
  On a linear time ``t = c + (a / b0) b`` with ``b = n (vp + vd)`` tokens per
  iteration, ``n = lambda c / (1 - lambda (a / b0) (vp + vd))``;
* **the worst-case limit cycle** (Ao, Dong, Luo and Simchi-Levi) with
  ``restart="scratch"`` and a constant iteration time: the residents grow in
  step until the cache is full at their peak, so a cohort of
  ``M / (vp + vd)`` requests finishes every ``vd + 1`` iterations, and greedy
  completes ``M / ((vd + 1) (vp + vd))`` requests per iteration instead of the
  fixed point ``M / g``: a share ``(vp + vd / 2) / (vp + vd)`` of it.

Pure functions of tokens and seconds; a bad argument is a ``ValueError``
naming it.
"""

from __future__ import annotations

from typing import NamedTuple

from llmqueue.common import validation
from llmqueue.models.latency import Staircase
from llmqueue.theory.memory import kv_area


class FluidPoint(NamedTuple):
    """Greedy admission's steady state below capacity (:func:`fluid_point`)."""

    starts: float
    """Requests started (and finished) per iteration, ``n``."""
    iteration: float
    """Iteration time ``c + (a / b0) n (vp + vd)`` (s)."""
    kv_tokens: float
    """KV tokens held on average, ``n g``."""


def fluid_point(rate: float, vp: int, vd: int, latency: Staircase) -> FluidPoint:
    """Greedy admission's fluid point at ``rate`` requests/s for requests of
    ``vp`` + ``vd`` tokens with whole prompts, on the linear envelope
    ``c + (a / b0) b`` of ``latency`` (s per iteration of ``b`` tokens):
    ``n = rate c / (1 - rate (a / b0) (vp + vd))`` starts per iteration
    (docs/model.md §6.8.3; 3.265 at 95 req/s with c = 0.02 s, a = 2e-5 s, b0 = 1,
    (20, 200) tokens).  The KV it holds ignores the cache size: compare it with
    ``M`` to see whether the point fits.  A rate the compute cannot serve
    (``rate (a / b0) (vp + vd) >= 1``) is a ``ValueError``."""
    validation.positive_number("rate", rate)
    validation.token_count("vp", vp)
    validation.positive_int("vd", vd)
    if not isinstance(latency, Staircase):
        raise ValueError(f"latency must be a Staircase (its linear envelope c + (a/b0) b); "
                         f"got {latency!r}")
    per_token = latency.a / latency.b0
    load = rate * per_token * (vp + vd)
    if load >= 1:
        raise ValueError(f"rate must be below the compute capacity b0 / (a (vp + vd)) = "
                         f"{1 / (per_token * (vp + vd)):.4g} req/s; got {rate!r}")
    starts = rate * latency.c / (1 - load)
    return FluidPoint(starts, latency.c + per_token * starts * (vp + vd),
                      starts * kv_area(vp, vd))


def limit_cycle_rate(M: int, vp: int, vd: int) -> float:
    """Greedy admission's completions per iteration in the worst-case limit
    cycle (restart from scratch, constant iteration time, saturated):
    ``M / ((vd + 1) (vp + vd))`` (docs/model.md §6.8.4; 2.261 for M = 100,000 and
    (20, 200) tokens, against the fixed point ``M / g`` = 4.146)."""
    validation.positive_int("M", M)
    validation.token_count("vp", vp)
    validation.positive_int("vd", vd)
    return M / ((vd + 1) * (vp + vd))


def limit_cycle_share(vp: int, vd: int) -> float:
    """The limit cycle's completions as a share of the fixed point ``M / g``:
    ``g / ((vd + 1) (vp + vd)) = (vp + vd / 2) / (vp + vd)`` (0.545 for (20, 200);
    the paper's "up to 50 %" loss as vp / vd goes to 0)."""
    validation.token_count("vp", vp)
    validation.positive_int("vd", vd)
    return kv_area(vp, vd) / ((vd + 1) * (vp + vd))
