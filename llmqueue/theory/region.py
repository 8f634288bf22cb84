"""Theorem 10's stability region with a cap on requests per batch (docs/model.md §9.5).

With at most ``kmax`` requests in a batch, the long-run (prefill, decode) token
rates an engine can sustain are those that time-sharing among feasible batch
shapes reaches: the convex hull of the origin and the points
``(p / t(p + d), d / t(p + d))`` over shapes of ``p`` prefill tokens and ``d``
decodes with ``p + d <= bmax`` and at most ``kmax`` requests (a prefill chunk
belongs to at least one request, so ``d <= kmax - 1`` when ``p > 0``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from llmqueue.common import validation
from llmqueue.models.latency import LatencyModel, Staircase

Point = Tuple[float, float]

#: Largest budget whose every shape is enumerated; beyond it only staircase
#: models are supported (their best shapes sit at the top of each step).
ENUMERATION_LIMIT = 4096
#: Most staircase steps listed beyond it.
MAX_STEPS = 100_000


@dataclass(frozen=True)
class Region:
    """A convex polygon of (prefill, decode) token rates, tokens per second."""

    vertices: Tuple[Point, ...]  # counter-clockwise, starting at the origin

    def is_inside(self, lambda_p: float, lambda_d: float, tolerance: float = 1e-9) -> bool:
        """True if the rates ``(lambda_p, lambda_d)`` lie in the region (boundary included)."""
        if lambda_p < -tolerance or lambda_d < -tolerance:
            return False
        v = self.vertices
        for (x1, y1), (x2, y2) in zip(v, v[1:] + v[:1]):
            cross = (x2 - x1) * (lambda_d - y1) - (y2 - y1) * (lambda_p - x1)
            if cross < -tolerance * max(1.0, abs(x2 - x1) + abs(y2 - y1)):
                return False
        return True


def shape_rate(p: int, d: int, latency: LatencyModel) -> Point:
    """Token rates of a batch of ``p`` prefill tokens and ``d`` decodes served back to back."""
    t = latency.batch_time(d, p, d + (1 if p else 0))
    return (p / t, d / t)


def _totals(bmax: int, cap: int, latency: LatencyModel) -> Sequence[int]:
    """Batch totals whose shapes can be vertices.  Up to the enumeration limit
    all of them; beyond it (staircase only) the top of each step, ``bmax``, and
    the largest decode-only batch ``min(cap, bmax)``: within one step the time is
    the same, so the largest total of the step dominates its other shapes."""
    if bmax <= ENUMERATION_LIMIT:
        return range(1, bmax + 1)
    if isinstance(latency, Staircase):
        if bmax // latency.b0 > MAX_STEPS:
            raise ValueError(f"bmax must be at most {MAX_STEPS} steps of b0={latency.b0} "
                             f"tokens for a region; got {bmax}")
        return sorted({*range(latency.b0, bmax + 1, latency.b0), bmax, min(cap, bmax)})
    raise ValueError(f"bmax must be <= {ENUMERATION_LIMIT} for a {type(latency).__name__} "
                     f"model (only staircase regions are computed beyond); got {bmax}")


def feasible_rates(bmax: int, kmax: Optional[int], latency: LatencyModel) -> List[Point]:
    """Rate points of the feasible shapes worth considering.

    On a staircase a batch's time depends on its total only, so for each total
    the shapes lie on a segment and its two ends suffice; other models get
    every split.
    """
    cap = bmax if kmax is None else kmax
    staircase = isinstance(latency, Staircase)
    points: List[Point] = []
    for b in _totals(bmax, cap, latency):
        most = min(cap - 1, b - 1)  # decodes beside a prefill chunk
        splits = (0, most) if staircase else range(most + 1)
        points.extend(shape_rate(b - d, d, latency) for d in splits)
        if b <= cap:
            points.append(shape_rate(0, b, latency))
    return points


def stability_region(bmax: int, kmax: Optional[int] = None,
                     latency: Optional[LatencyModel] = None) -> Region:
    """The polygon of sustainable (prefill, decode) token rates (docs/model.md §9.5)."""
    validation.positive_int("bmax", bmax)
    validation.optional_positive_int("kmax", kmax)
    points = feasible_rates(bmax, kmax, latency or Staircase()) + [(0.0, 0.0)]
    return Region(tuple(convex_hull(points)))


def vertex_c(kmax: int, latency: Staircase) -> Point:
    """The vertex ``((b0 - kmax + 1) / t_b0, (kmax - 1) / t_b0)`` (needs kmax <= b0)."""
    t = latency.tokens_time(latency.b0)
    return ((latency.b0 - kmax + 1) / t, (kmax - 1) / t)


def convex_hull(points: Sequence[Point]) -> List[Point]:
    """Convex hull (Andrew's monotone chain), counter-clockwise from the lowest-left point."""
    pts = sorted(set(points))

    def turn(o: Point, a: Point, b: Point) -> float:
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    lower: List[Point] = []
    upper: List[Point] = []
    for p in pts:
        while len(lower) >= 2 and turn(lower[-2], lower[-1], p) <= 0:
            lower.pop()
        lower.append(p)
    for p in reversed(pts):
        while len(upper) >= 2 and turn(upper[-2], upper[-1], p) <= 0:
            upper.pop()
        upper.append(p)
    return lower[:-1] + upper[:-1]
