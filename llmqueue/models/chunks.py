"""The mean number of prefill chunks a size law's prompts take,
``E[ceil(X / chunk)]``, which the capacity figures of docs/model.md §6.6 count a
request's iterations with: in closed form for the laws that have one, else
summed from the law's survival function in a few thousand terms however heavy
its tail."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from llmqueue.common import validation
from llmqueue.models.sizes import Empirical, Fixed, Geometric, Mixture, SizeLaw, UniformInt


#: Tail below which :func:`mean_chunks` stops summing an unbounded law.
TAIL = 1e-12
#: Terms :func:`mean_chunks` sums one by one before it sums blocks of terms.
HEAD = 4096
#: Growth of those blocks: each is this share of the terms before it.
BLOCK = 0.01


def mean_chunks(law: SizeLaw, chunk: int) -> float:
    """``E[ceil(X / chunk)]``: the mean number of prefill chunks of ``chunk``
    tokens a prompt of this law takes.  Exact for Fixed, UniformInt,
    Geometric and Empirical laws (closed forms) and their mixtures; for the
    others (LogNormal), ``ceil(X / c) = sum over k >= 0 of 1[X > k c]``, so the
    mean is ``sum over k >= 0 of P(X > k c)``: :data:`HEAD` terms one by one,
    then blocks of :data:`BLOCK` times as many terms as came before, each
    priced by the trapezoid rule, up to :data:`~llmqueue.common.validation.MAX_TOKENS`
    tokens (where draws are clipped) or until the terms left are under
    :data:`TAIL` of the sum.  At most a few thousand evaluations of the
    survival function, however heavy the tail (a lognormal of cv 1000 reaches
    10^11 tokens before its tail falls under 10^-12)."""
    validation.positive_int("chunk", chunk)
    exact = _exact_chunks(law, chunk)
    if exact is not None:
        return exact
    total, k = 0.0, 0
    last = validation.MAX_TOKENS // chunk  # the largest k with k * chunk a size
    term = law.survival(0)
    while term > 0.0 and k <= last:
        width = 1 if k < HEAD else max(1, min(int(k * BLOCK), last - k))
        after = law.survival((k + width) * chunk) if k + width <= last else 0.0
        # the terms k .. k + width - 1: the trapezoid from k to k + width, plus half its
        # first term, less half its last (Euler-Maclaurin)
        total += term if width == 1 else width * (term + after) / 2 + (term - after) / 2
        k += width
        if after * k < TAIL * total and k * chunk > law.mean:
            break
        term = after
    return total


def _exact_chunks(law: SizeLaw, chunk: int) -> Optional[float]:
    """:func:`mean_chunks` in closed form for the laws that have one, else ``None``."""
    if isinstance(law, Fixed):
        return float(-(-law.value // chunk))
    if isinstance(law, Empirical):
        return float(np.mean(-(-law.values // chunk)))
    if isinstance(law, UniformInt):  # sum of ceil(x / c) over low .. high - 1, over the count
        return (_ceil_sum(law.high - 1, chunk) - _ceil_sum(law.low - 1, chunk)) \
            / (law.high - law.low)
    if isinstance(law, Geometric):  # sum over k of q^(k c) = 1 / (1 - q^c), q = 1 - 1/mean
        return 1.0 if law.mean == 1 else 1.0 / -math.expm1(chunk * math.log1p(-1.0 / law.mean))
    if isinstance(law, Mixture):
        parts = [mean_chunks(part, chunk) for part in law.laws]
        return float(np.dot(law.weights, parts))
    return None


def _ceil_sum(m: int, c: int) -> int:
    """``sum of ceil(x / c) for x = 0 .. m`` (0 for ``m < 0``), in whole numbers."""
    if m <= 0:
        return 0
    top = -(-m // c)  # ceil(m / c): the last group, cut at m
    return c * (top - 1) * top // 2 + top * (m - (top - 1) * c)
