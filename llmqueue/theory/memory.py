"""KV-cache memory in closed form (docs/model.md §6.1, §6.5 and §6.6).

A request of ``vp`` prompt and ``vd`` decode tokens holds ``vp`` KV tokens
after its prefill and one more after each decode, so over its life it holds
the **memory area** ``g`` (token-iterations): with whole prompts
``g = (vd + 1) vp + vd (vd + 1) / 2``.  A cache of ``M`` tokens then finishes
at most ``M / E[g]`` requests per iteration, which gives

* ``mu_mem = M / (b_bar E[g])`` requests/s (Nie et al.), where ``b_bar`` is the
  iteration time at the memory-limited batch ``b* = M E[vp + vd] / E[g]``;
* ``lambda_joint``: the smallest of the compute (Theorem 2), memory and slot
  (``kmax``) capacities, and which of them binds;
* WAIT's stage quotas ``n_j`` (``wait_thresholds``), Nested WAIT's
  (``nested_wait_quotas``) and WAIT's capacity ``lambda_wait``;
* the sizing helpers of docs/model.md §6.1: KV bytes per token and the tokens a GPU holds.

Every function is pure, takes tokens, seconds and bytes, and raises
:class:`ValueError` naming the parameter when an argument is out of range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from llmqueue.common import validation
from llmqueue.common.units import ceil_div
from llmqueue.models.latency import Constant, LatencyModel, Linear, Staircase, tokens_time
from llmqueue.models.sizes import Fixed, SizeLike, as_law, decode_mean, decode_variance
from llmqueue.theory.bounds import smallest_iteration
from llmqueue.theory.capacity import lambda_star
from llmqueue.theory.shapes import MeanContext, at_mean_context

#: One request type for WAIT: (prompt tokens, decode tokens, share of arrivals).


def kv_area(vp: int, vd: int, chunk: Optional[int] = None) -> float:
    """Memory area ``g`` of one request, in token-iterations (docs/model.md §6.6).

    Whole prompt (``chunk=None``): ``(vd + 1) vp + vd (vd + 1) / 2``.  With
    prefill chunks of ``chunk`` tokens, Nie et al.'s closed form
    ``[(1 + vp/chunk) vp + 2 vd vp + (1 + vd) vd] / 2`` (exact when ``chunk``
    divides ``vp``).

    Examples:
        docs/model.md §6.8.3's request: 201 x 20 + 200 x 201 / 2 = 4020 + 20100.

        >>> kv_area(20, 200)
        24120
    """
    validation.token_count("vp", vp)
    validation.token_count("vd", vd)
    if chunk is None:
        return (vd + 1) * vp + vd * (vd + 1) // 2
    validation.positive_int("chunk", chunk)
    return ((1 + vp / chunk) * vp + 2 * vd * vp + (1 + vd) * vd) / 2


def kv_area_min(vp: int, vd: int, chunk: int) -> int:
    """Smallest memory area with chunks of ``chunk`` tokens, the remainder
    chunk first (docs/model.md §6.6's ``g_min``), in token-iterations.

    Prefill part ``q r + chunk q (q - 1) / 2`` with ``q = ceil(vp / chunk)``
    and ``r = vp - (q - 1) chunk``; decode part ``vd vp + vd (vd + 1) / 2``.
    """
    validation.token_count("vp", vp)
    validation.token_count("vd", vd)
    validation.positive_int("chunk", chunk)
    q = ceil_div(vp, chunk)
    r = vp - (q - 1) * chunk
    return q * r + chunk * q * (q - 1) // 2 + vd * vp + vd * (vd + 1) // 2


def ceil_sum(n: int, block: int) -> int:
    """``sum over 0 <= x <= n of ceil(x / block)`` (0 for ``n < 0``)."""
    if n <= 0:
        return 0
    q, r = divmod(n, block)
    return block * q * (q + 1) // 2 + r * (q + 1)


def kv_area_blocks(vp: int, vd: int, block_size: int) -> int:
    """Whole-prompt memory area counted in blocks (docs/model.md §6.5), in tokens x
    iterations: ``sum over k = 0..vd of ceil((vp + k) / B) B``, the KV the
    request holds in each of its ``vd + 1`` iterations rounded up to whole
    blocks of ``B = block_size`` tokens.  ``block_size=1`` gives ``kv_area``.
    """
    validation.token_count("vp", vp)
    validation.token_count("vd", vd)
    validation.positive_int("block_size", block_size)
    blocks = ceil_sum(vp + vd, block_size) - ceil_sum(vp - 1, block_size)
    return blocks * block_size


def mean_kv_area(mean_vp: float, mean_vd: float, var_vp: float = 0.0, var_vd: float = 0.0,
                 chunk: Optional[int] = None) -> float:
    """``E[g]`` (token-iterations) for independent prompt and decode lengths
    with the given means and variances (tokens, tokens^2); ``chunk`` as in
    :func:`kv_area`.  ``g`` is linear in ``vp, vd, vp^2, vd^2, vp vd``, so the
    first two moments give ``E[g]`` exactly."""
    mp = validation.nonnegative_number("mean_vp", mean_vp)
    md = validation.nonnegative_number("mean_vd", mean_vd)
    mp2 = validation.nonnegative_number("var_vp", var_vp) + mp * mp
    md2 = validation.nonnegative_number("var_vd", var_vd) + md * md
    if chunk is None:
        return (md + 1) * mp + (md2 + md) / 2
    validation.positive_int("chunk", chunk)
    return (mp + mp2 / chunk + 2 * mp * md + md + md2) / 2


def law_kv_area(prefill: SizeLike, decode: SizeLike, chunk: Optional[int] = None) -> float:
    """``E[g]`` (token-iterations) for independent prompt and decode size laws
    (plain integers are fixed sizes).  Fixed sizes give :func:`kv_area` itself;
    other laws give :func:`mean_kv_area` of their means and variances, the decode
    law's draws of 0 counted as 1 (as in every workload).  With ``chunk``, this is
    Nie et al.'s closed form in expectation, as exact as that form is: where
    ``chunk`` divides every prompt (elsewhere an approximation, as for fixed
    sizes).  Lognormal moments ignore the rounding to whole tokens."""
    p, d = as_law("prefill", prefill), as_law("decode", decode)
    if isinstance(p, Fixed) and isinstance(d, Fixed):
        return kv_area(p.value, max(d.value, 1), chunk)
    variance = decode_variance(d)
    mean = decode_mean(d)
    assert mean is not None  # decode_variance raised otherwise
    return mean_kv_area(p.mean, mean, p.variance, max(variance, 0.0), chunk)


def mu_mem(M: float, mean_g: float, b_bar: float) -> float:
    """Memory capacity ``M / (b_bar E[g])`` in requests/s (docs/model.md §6.6).

    ``M`` KV capacity (tokens), ``mean_g`` = ``E[g]`` (token-iterations),
    ``b_bar`` mean iteration time (s).

    Examples:
        1000 tokens of cache, requests of area 100, 0.01 s iterations:
        10 requests per iteration, 100 iterations per second.

        >>> mu_mem(1000, 100, 0.01)
        1000.0
    """
    validation.positive_number("M", M)
    validation.positive_number("mean_g", mean_g)
    validation.positive_number("b_bar", b_bar)
    return M / (b_bar * mean_g)


def delta(max_tokens: float, M: float) -> float:
    """``max(vp + vd) / M``, the largest request's share of the cache; the
    stable side of Nie et al.'s boundary is ``mu_mem (1 - delta)``."""
    validation.positive_number("max_tokens", max_tokens)
    validation.positive_number("M", M)
    return max_tokens / M


def b_star(M: float, mean_tokens: float, mean_g: float) -> float:
    """Memory-limited batch ``M E[vp + vd] / E[g]`` in tokens per iteration:
    ``M / E[g]`` requests finish per iteration, each ``E[vp + vd]`` tokens."""
    validation.positive_number("M", M)
    validation.positive_number("mean_tokens", mean_tokens)
    validation.positive_number("mean_g", mean_g)
    return M * mean_tokens / mean_g


def envelope_time(latency: LatencyModel, tokens: float) -> float:
    """Iteration time (s) of a batch of ``tokens`` tokens on the latency's
    linear envelope, without the staircase's ceiling.

    :class:`Staircase`: ``c + (a / b0) tokens``; :class:`Linear`:
    ``c + per_token tokens``; :class:`Constant`: its time.  Any other model is
    priced by :func:`~llmqueue.models.latency.tokens_time` at
    ``ceil(tokens)`` (a batch of whole prefill tokens).
    """
    validation.nonnegative_number("tokens", tokens)
    if isinstance(latency, Staircase):
        return latency.c + latency.a * tokens / latency.b0
    if isinstance(latency, Linear):
        return latency.c + latency.per_token * tokens
    if isinstance(latency, Constant):
        return latency.seconds
    return tokens_time(latency, math.ceil(tokens))


def lambda_kmax(kmax: int, t_bar: float, mean_iterations: float) -> float:
    """Slot capacity ``kmax / (t_bar E[ceil(vp/chunk) + vd])`` in requests/s
    (docs/model.md §6.6): each request holds one of ``kmax`` slots for
    ``mean_iterations`` iterations of ``t_bar`` seconds (whole prompts:
    ``1 + E[vd]``)."""
    validation.positive_int("kmax", kmax)
    validation.positive_number("t_bar", t_bar)
    validation.positive_number("mean_iterations", mean_iterations)
    return kmax / (t_bar * mean_iterations)


def slot_capacity(kmax: int, mean_prefill: float, mean_decode: float,
                  mean_iterations: float, latency: Optional[LatencyModel] = None) -> float:
    """The rate ``kmax`` slots allow (requests/s): :func:`lambda_kmax` with
    ``t_bar = max(t_1, c + (a/b0) kmax m / E[iters])``.

    Each request holds a slot for at least ``mean_iterations`` iterations
    (``E[ceil(vp/chunk) + vd]``), an iteration serves at most ``kmax``
    requests, and every iteration lasts at least ``t_1``, the smallest one
    (one token at context 0: on the staircase ``c + a``, its step included),
    and at least the linear envelope of its tokens; over ``N`` iterations
    carrying ``lambda T m`` tokens both give a lower bound on ``T``, so
    ``lambda <= kmax / (t_bar E[iters])``.  Pricing by the envelope alone
    left out the staircase's step: with a few slots, 2-4 times the rate the
    runs saturate at (within 2% of docs/model.md §7.6's ``kmax / (t_1 m_d)``).

    Examples:
        Point C (290 + 990 tokens, chunks of 128: 3 + 990 iterations) with 4
        slots on the paper's staircase: every iteration lasts at least
        ``t_1 = 0.04675`` s.

        >>> round(slot_capacity(4, 290, 990, 993), 5)
        0.08616
    """
    validation.positive_int("kmax", kmax)
    validation.positive_number("mean_iterations", mean_iterations)
    model = Staircase() if latency is None else latency
    seen = at_mean_context(model, mean_prefill, mean_decode)
    raw = model.latency if isinstance(model, MeanContext) else model  # t_1 at context 0
    mean_tokens = float(mean_prefill) + float(mean_decode)
    t_bar = max(smallest_iteration(raw),
                envelope_time(seen, kmax * mean_tokens / mean_iterations))
    return lambda_kmax(kmax, t_bar, mean_iterations)


@dataclass(frozen=True)
class JointCapacity:
    """What :func:`lambda_joint` returns (rates in requests/s)."""

    rate: float
    """The joint capacity: the smallest of ``compute``, ``memory``, ``slots``."""
    binding: str
    """The resource that gives ``rate``: ``compute``, ``memory`` or ``slots``
    (ties go to the first in that order)."""
    compute: float
    """Theorem 2's ``bmax / t(bmax) / (m_p + m_d)``."""
    memory: float
    """``mu_mem`` with ``b_bar`` = the envelope time at ``b_star``."""
    slots: Optional[float]
    """``lambda_kmax`` (None without ``kmax``)."""
    b_star: float
    """Memory-limited batch ``M E[vp + vd] / E[g]`` (tokens per iteration)."""
    b_bar: float
    """Iteration time (s) at ``b_star`` on the latency's linear envelope."""


BINDINGS = ("compute", "memory", "slots")


def lambda_joint(M: float, mean_prefill: float, mean_decode: float, mean_g: float,
                 bmax: int, latency: Optional[LatencyModel] = None, *,
                 kmax: Optional[int] = None,
                 mean_iterations: Optional[float] = None) -> JointCapacity:
    """Joint compute / memory / slot capacity of one engine (docs/model.md §6.6).

    ``M`` KV capacity (tokens); ``mean_prefill``, ``mean_decode`` mean tokens
    per request; ``mean_g`` = ``E[g]`` (token-iterations); ``bmax`` token
    budget; ``latency`` the batch-time model (default: the paper's staircase);
    ``kmax`` slots (None: unlimited); ``mean_iterations`` =
    ``E[ceil(vp/chunk) + vd]`` (default ``1 + mean_decode``, whole prompts).
    A model not priced by its batch size alone (the roofline) is read at the
    workload's mix and mean contexts (:func:`~llmqueue.theory.shapes.at_mean_context`).

    Over a long run every iteration holds at most ``M`` KV tokens, ``bmax``
    tokens and ``kmax`` requests, and lasts at least ``c + (a/b0) b`` for ``b``
    tokens, so ``lambda [c max(E[g]/M, m/bmax, E[iters]/kmax) + (a/b0) m] <= 1``
    with ``m = mean_prefill + mean_decode``.  Memory is priced at ``b_star``
    (``b_bar = envelope_time(latency, b_star)``) and slots at their own limited
    batch ``kmax m / E[iters]``, and no faster than the smallest iteration
    (:func:`slot_capacity`).  Without ``kmax``, memory binds iff
    ``b_star < bmax`` whenever ``t(bmax)`` lies on the envelope (a linear or
    constant time, or ``bmax`` a multiple of ``b0``); otherwise the ceiling
    can let compute bind slightly earlier.  With ``b_star >= bmax`` memory
    never binds: the iterations the budget needs, ``lambda m / bmax`` a
    second, already give the KV its ``lambda E[g] / M``.  On a linear
    envelope ``mu_mem`` is then at least the compute capacity anyway; a
    model whose time grows faster than its tokens (a prompt's attention on
    the roofline, priced at ``b_star`` tokens in one batch) would otherwise
    call memory binding below the compute capacity.

    Examples:
        docs/model.md §6.8.3: ``(vp, vd) = (20, 200)``, ``M = 100,000``, ``t = 0.02 + 2e-5 b``;
        ``b* = 912.1`` tokens and memory binds at 108.41 req/s.

        >>> from llmqueue.models import Linear
        >>> j = lambda_joint(100_000, 20, 200, kv_area(20, 200), bmax=2048,
        ...                  latency=Linear(c=0.02, per_token=2e-5))
        >>> round(j.rate, 2), j.binding, round(j.b_star, 1)
        (108.41, 'memory', 912.1)
    """
    # a model not priced by its batch size alone: at the workload's mix and mean contexts
    model = at_mean_context(Staircase() if latency is None else latency, mean_prefill,
                            mean_decode)
    compute = lambda_star(bmax, mean_prefill, mean_decode, model)
    mean_tokens = float(mean_prefill) + float(mean_decode)
    b_mem = b_star(M, mean_tokens, mean_g)
    b_bar = envelope_time(model, b_mem)
    memory = mu_mem(M, mean_g, b_bar)
    slots: Optional[float] = None
    if kmax is None:
        if mean_iterations is not None:
            validation.positive_number("mean_iterations", mean_iterations)
    else:
        validation.positive_int("kmax", kmax)
        iterations = (1.0 + mean_decode if mean_iterations is None
                      else validation.positive_number("mean_iterations", mean_iterations))
        slots = slot_capacity(kmax, mean_prefill, mean_decode, iterations,
                              Staircase() if latency is None else latency)
    candidates = [(rate, name) for name, rate in zip(BINDINGS, (compute, memory, slots))
                  if rate is not None and not (name == "memory" and b_mem >= bmax)]
    rate, binding = min(candidates, key=lambda item: (item[0], BINDINGS.index(item[1])))
    return JointCapacity(rate=rate, binding=binding, compute=compute,
                         memory=memory, slots=slots, b_star=b_mem, b_bar=b_bar)


def mu_mix(rates: Sequence[float], weights: Sequence[float]) -> float:
    """Capacity of a piecewise workload, ``(sum q_l / mu_l)^(-1)`` requests/s,
    where ``mu_l`` is each piece's capacity (requests/s) and ``q_l`` its share
    of requests (``weights``, normalised to sum to 1)."""
    rates, weights = list(rates), list(weights)
    if not rates or len(rates) != len(weights):
        raise ValueError(f"rates and weights must be two lists of the same length >= 1; "
                         f"got {len(rates)} and {len(weights)} values")
    for rate in rates:
        validation.positive_number("rates", rate)
    for weight in weights:
        validation.nonnegative_number("weights", weight)
    total = sum(weights)
    if total <= 0:
        raise ValueError(f"weights must not all be 0, got {weights!r}")
    return total / sum(q / mu for q, mu in zip(weights, rates))


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int = 2) -> int:
    """Bytes of KV cache per token, ``2 layers kv_heads head_dim dtype_bytes``
    (a key and a value per layer and KV head; docs/model.md §6.1).

    Examples:
        CodeLlama-34B: 48 layers, 8 KV heads of 128, BF16: 2 x 48 x 8 x 128 x 2.

        >>> kv_bytes_per_token(48, 8, 128)
        196608
    """
    validation.positive_int("layers", layers)
    validation.positive_int("kv_heads", kv_heads)
    validation.positive_int("head_dim", head_dim)
    validation.positive_int("dtype_bytes", dtype_bytes)
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def kv_capacity_tokens(gpu_bytes: float, weights_bytes: float, activation_bytes: float,
                       bytes_per_token: float, utilization: float = 0.90,
                       block_size: int = 16) -> int:
    """KV tokens a GPU holds, in whole blocks (docs/model.md §6.1):
    ``B floor((utilization gpu_bytes - weights_bytes - activation_bytes) /
    (bytes_per_token B))`` with ``B = block_size``.  All sizes in bytes;
    ``utilization`` in (0, 1].  Fewer than one block left is an error ("does
    not fit", with the numbers).

    Examples:
        0.9 x 80 GB - 68 GB - 2 GB = 2 GB, / (196608 x 16) B = 635.8 blocks:
        635 whole blocks of 16 tokens.

        >>> kv_capacity_tokens(80e9, 68e9, 2e9, 196608, block_size=16)
        10160
    """
    validation.positive_number("gpu_bytes", gpu_bytes)
    validation.nonnegative_number("weights_bytes", weights_bytes)
    validation.nonnegative_number("activation_bytes", activation_bytes)
    validation.positive_number("bytes_per_token", bytes_per_token)
    if not validation.fraction("utilization", utilization) > 0:
        raise ValueError(f"utilization must be a number in (0, 1], got {utilization!r}")
    validation.positive_int("block_size", block_size)
    free = utilization * gpu_bytes - weights_bytes - activation_bytes
    blocks = math.floor(free / (bytes_per_token * block_size)) if free > 0 else 0
    if blocks < 1:
        raise ValueError(f"model does not fit: {utilization:g} x {gpu_bytes:g} B of GPU memory "
                         f"- {weights_bytes:g} B of weights - {activation_bytes:g} B of "
                         f"activations leaves {free:g} B, less than one block of "
                         f"{block_size} x {bytes_per_token:g} B")
    return blocks * block_size
