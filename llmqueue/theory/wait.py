"""WAIT and Nested WAIT in numbers (docs/model.md §6.5): the stage quotas that keep the
KV cache at a fixed point below its size, and the capacity they give.

A request *type* is a ``(vp, vd, p)`` triple: its prompt and output tokens
and its weight in the mix.  :func:`wait_thresholds` sizes each type's quota
from the whole-prompt areas of :mod:`llmqueue.theory.memory`,
:func:`nested_wait_quotas` the per-segment quotas for unknown output lengths,
and :func:`lambda_wait` the throughput WAIT then reaches.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Callable, List, Optional, Sequence, Tuple

from llmqueue.common import validation
from llmqueue.models.context import BatchContext
from llmqueue.models.latency import LatencyModel, Staircase
from llmqueue.theory.memory import ceil_sum, kv_area_blocks
from llmqueue.theory.shapes import needs_context

#: One request type of WAIT: ``(vp, vd, p)``, prompt and output tokens and weight.
RequestType = Tuple[int, int, float]


def _types(types: Sequence[RequestType]) -> List[RequestType]:
    types = list(types)
    if not types:
        raise ValueError("types must hold at least one (vp, vd, p) triple, got none")
    checked: List[RequestType] = []
    for item in types:
        if not isinstance(item, (tuple, list)) or len(item) != 3:
            raise ValueError(f"types must hold (vp, vd, p) triples, got {item!r}")
        vp, vd, p = item
        validation.token_count("vp", vp)
        validation.token_count("vd", vd)
        validation.positive_number("p", p)
        checked.append((vp, vd, p))
    return checked


def wait_thresholds(types: Sequence[RequestType], M: int, headroom: int = 0,
                    block_size: int = 1) -> List[int]:
    """WAIT's stage quotas ``n_j`` (docs/model.md §6.5), one per ``(vp, vd, p)`` type.

    ``n_j = max(1, floor((M' - headroom) p_j / sum_k p_k g_k))`` where ``p``
    is the type mix (any positive weights), ``g_k`` the whole-prompt area
    counted in blocks (:func:`kv_area_blocks`), and ``M' = floor(M/B) B`` the
    cache in whole blocks of ``B = block_size`` tokens.  Then the steady-state
    KV ``sum n_j g_j <= M' - headroom`` (unless a quota is raised to 1).

    Examples:
        docs/model.md §6.8.3: one type of area 24,120 in 100,000 tokens, floor(4.146) = 4.

        >>> wait_thresholds([(20, 200, 1.0)], 100_000)
        [4]
    """
    checked = _types(types)
    validation.positive_int("M", M)
    validation.nonnegative_int("headroom", headroom)
    validation.positive_int("block_size", block_size)
    usable = M // block_size * block_size - headroom
    if usable <= 0:
        raise ValueError(f"headroom must be below the cache in whole blocks "
                         f"({M // block_size * block_size} tokens), got {headroom!r}")
    total = sum(Fraction(p) * kv_area_blocks(vp, vd, block_size) for vp, vd, p in checked)
    if total == 0:
        raise ValueError("types must not all have vp = vd = 0 (no memory area)")
    return [max(1, math.floor(usable * Fraction(p) / total)) for _, _, p in checked]


def nested_wait_quotas(vp: int, lengths: Sequence[int], probs: Sequence[float], M: int,
                       headroom: int = 0, block_size: int = 1) -> List[int]:
    """Nested WAIT's stage quotas ``n^(1..K)`` (docs/model.md §6.5) for prompts of ``vp``
    tokens and output lengths ``l_1 < ... < l_K`` (``lengths``) drawn with
    weights ``probs``.

    Segment ``k`` holds decode positions ``(l_{k-1}, l_k]`` (segment 1 also the
    prefill), so its area is the sum of the KV ``vp + d`` over its positions
    ``d`` (counted in blocks of ``block_size`` as :func:`kv_area_blocks`).
    With survival weights ``P_k = sum_{i >= k} p_i`` (normalised),
    ``sum_k P_k area_k = E[g]``, and ``n^(k) = max(1, floor((M' - headroom)
    P_k / E[g]))`` with ``M'`` the cache in whole blocks: then
    ``sum_k n^(k) area_k <= M' - headroom`` (unless a quota is raised to 1).
    ``headroom`` is the paper's buffer ``H`` (tokens).
    """
    validation.token_count("vp", vp)
    validation.positive_int("M", M)
    validation.nonnegative_int("headroom", headroom)
    validation.positive_int("block_size", block_size)
    ls = [validation.positive_int("lengths", x) for x in lengths]
    ps = [Fraction(validation.positive_number("probs", p)) for p in probs]
    if not ls or any(b <= a for a, b in zip(ls, ls[1:])):
        raise ValueError(f"lengths must be increasing integers >= 1; got {ls!r}")
    if len(ps) != len(ls):
        raise ValueError(f"probs must give one weight per length ({len(ls)}); got {len(ps)}")
    usable = M // block_size * block_size - headroom
    if usable <= 0:
        raise ValueError(f"headroom must be below the cache in whole blocks "
                         f"({M // block_size * block_size} tokens), got {headroom!r}")
    total = sum(ps)
    survival = [sum(ps[k:]) / total for k in range(len(ps))]
    # KV vp + d over the segment's positions d: from vp (the prefill) or vp + l_{k-1} + 1
    starts = [vp - 1] + [vp + x for x in ls[:-1]]
    areas = [block_size * (ceil_sum(vp + x, block_size) - ceil_sum(a, block_size))
             for a, x in zip(starts, ls)]
    mean_g = sum(P * area for P, area in zip(survival, areas))
    return [max(1, math.floor(usable * P / mean_g)) for P in survival]


def lambda_wait(types: Sequence[RequestType], n: Sequence[int],
                latency: Optional[LatencyModel] = None) -> float:
    """WAIT's capacity ``sum n_j / t(sum n_j (vp_j + vd_j))`` in requests/s
    (docs/model.md §6.5).

    In steady state each iteration starts ``n_j`` whole type-``j`` prompts and
    decodes the ``n_j vd_j`` started ones, so it is priced as
    ``latency.batch_time(sum n_j vd_j, sum n_j vp_j, sum n_j (vd_j + 1))``
    (default latency: the paper's staircase).  ``p`` is not used.  A context
    model (the roofline) is told that batch's context, which is known exactly:
    ``n_j`` decoders at each of a type's ``vd_j`` stages, holding ``vp_j`` to
    ``vp_j + vd_j - 1`` tokens, and ``n_j`` whole prompts of ``vp_j`` tokens
    from context 0.
    """
    checked = _types(types)
    counts = list(n)
    if len(counts) != len(checked):
        raise ValueError(f"n must give one quota per type ({len(checked)}), "
                         f"got {len(counts)}")
    for count in counts:
        validation.positive_int("n", count)
    model = Staircase() if latency is None else latency
    decode = sum(k * vd for k, (_, vd, _) in zip(counts, checked))
    prefill = sum(k * vp for k, (vp, _, _) in zip(counts, checked))
    requests = sum(k * (vd + 1) for k, (_, vd, _) in zip(counts, checked))
    if not needs_context(model):
        return sum(counts) / model.batch_time(decode, prefill, requests)
    prompts = sum(k for k, (vp, _, _) in zip(counts, checked) if vp)
    held = sum(k * (vd * vp + vd * (vd - 1) // 2) for k, (vp, vd, _) in zip(counts, checked))
    squares = sum(k * vp * vp for k, (vp, _, _) in zip(counts, checked))
    context = BatchContext(decode_ctx=held, chunks=prompts, chunk_sq=squares)
    batch_time: Callable[..., float] = model.batch_time
    return sum(counts) / batch_time(decode, prefill, requests, context=context)
