"""Analytic bounds on any SLO-feasible rate, computed before any simulation
(docs/model.md §7.6).  Each is a necessary condition: no engine runs faster.

* :func:`token_bound`: ``lambda_tok``, the token bound.  For models of the batch
  size alone (:func:`~llmqueue.theory.shapes.by_batch_size`) it is Theorem 2
  exactly, ``bmax / t(bmax) / (m_p + m_d)``; for others (context models such
  as the roofline, models of the split such as docs/model.md §4's step model) the
  largest rate a time-share of batch shapes ``(p, d)`` at the mean contexts
  can serve, and ``lambda_mix``, the rate of the one full shape at the
  workload's own mix;
* :func:`slot_bound`: ``lambda_slot = kmax / (t_1 m_d)``;
* :func:`memory_bound`: ``lambda_kv = C / (t_1 E[vd vp + vd (vd + 1) / 2])``;
* :func:`zero_load`: the zero-load attainment ``A_0`` and each request's
  unloaded latencies (:func:`unloaded_latency`, the base of relative SLOs);
* :class:`Bounds` bundles them (:meth:`Bounds.of` computes all).

``t_1`` (:func:`smallest_iteration`) is the time of one decode token at context 0.
Rates are requests per second, times seconds, sizes tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Set, Tuple

import numpy as np

from llmqueue.common import validation
from llmqueue.models.latency import LatencyModel
from llmqueue.models.sizes import Fixed, SizeLike, as_law, decode_mean, decode_sizes
from llmqueue.theory.capacity import lambda_star
from llmqueue.theory.shapes import MIX_TOKENS, MeanContext, by_batch_size, mix_decode, shape_time
from llmqueue.theory.region import convex_hull
from llmqueue.theory.slo import SLO, RequestLatency, Unloaded, attainment

#: Full shapes on the grid of the token bound's LP (docs/model.md §7.6: 65 is enough).
GRID = 65


def smallest_iteration(latency: LatencyModel) -> float:
    """``t_1``: seconds of one decode token at context 0, the smallest iteration."""
    return shape_time(latency, 1, 0)


@dataclass(frozen=True)
class TokenBound:
    """:func:`token_bound`'s result (requests/s, seconds, tokens).

    ``exact`` is True for models of the batch size alone (Theorem 2: no policy
    keeps up above ``lambda_tok``); for other models ``lambda_tok`` rests on
    mean contexts and is approximate.  ``mix_shape`` is ``(p, d)`` of the shape
    at the workload's mix and ``t_mix`` its time.
    """

    lambda_tok: float
    lambda_mix: float
    exact: bool
    mix_shape: Tuple[int, int]
    t_mix: float


def _lp(rates: np.ndarray, mean_prefill: float, mean_decode: float) -> float:
    """``max lambda`` with ``lambda (m_p, m_d) <= w . rates`` for weights ``w`` on
    the simplex (time shares of the shapes; serving more than offered is allowed).
    An optimal basis holds at most two shapes, so every pair is tried: on the
    segment ``theta r_i + (1 - theta) r_j`` the rate is the smaller of two linear
    functions of theta, largest at an end or where they cross."""
    demand = np.array([mean_prefill, mean_decode])
    keep = demand > 0
    scaled = rates[:, keep] / demand[keep]           # per shape: requests/s each side allows
    best = float(scaled.min(axis=1).max())           # single shapes (theta = 0 or 1)
    if scaled.shape[1] == 2:
        a, b = scaled[:, 0], scaled[:, 1]
        ai, aj = a[:, None], a[None, :]
        bi, bj = b[:, None], b[None, :]
        den = (ai - aj) - (bi - bj)
        with np.errstate(divide="ignore", invalid="ignore"):
            theta = (bj - aj) / den                  # where theta ai + (1-theta) aj = same in b
            value = aj + theta * (ai - aj)
        ok = (den != 0) & (theta >= 0) & (theta <= 1)
        if ok.any():
            best = max(best, float(value[ok].max()))
    return best


def token_bound(latency: LatencyModel, bmax: int, mean_prefill: float, mean_decode: float,
                kmax: Optional[int] = None, mean_prompt: Optional[float] = None) -> TokenBound:
    """docs/model.md §7.6's token bound of an engine of budget ``bmax`` tokens (``kmax``
    decoding slots, ``None`` = unlimited) for requests of mean ``mean_prefill``
    prompt and ``mean_decode`` output tokens.

    Other models (context models, models of the split): full shapes
    ``p + d = bmax`` with ``d <= kmax``, ``GRID``
    of them evenly spaced in ``d`` plus the mix shape, and for each such ``d``
    the shorter shapes of ``GRID`` prompts evenly spaced in ``0 .. bmax - d``,
    each priced at the mean contexts (:class:`MeanContext`).  ``lambda_tok``
    is the LP of :func:`_lp` over the vertices of their convex hull.  docs/model.md §7.6
    takes full shapes only, which is no bound when ``kmax`` caps the decodes:
    then a full batch is mostly prefill and slow, and time shared with
    batches of decodes alone serves more (Llama-3-8B on an H100, ``bmax``
    2048, ``kmax`` 100, ``(512, 256)``: 28.84 req/s where full shapes give
    7.0, and a run at 20 req/s is stable); without ``kmax`` the shorter shapes
    lie inside the full ones' hull there (32.36 either way), but at ``bmax``
    8192 the prompts' attention makes shorter batches faster per token
    (32.38 against 31.63).  The mix shape has ``d`` of :func:`mix_decode` (for
    other models at most ``kmax``; models of the batch size alone ignore
    ``kmax``, as Theorem 2 does: slots are :func:`slot_bound`'s part) and
    ``lambda_mix = min(p / m_p, d / m_d) / t_mix``, which is docs/model.md §7.10, E8.4's
    ``bmax / t_mix / (m_p + m_d)`` up to rounding ``d`` to whole tokens.
    Other models price shapes of at most
    :data:`~llmqueue.theory.shapes.MIX_TOKENS` tokens: a larger batch costs
    per token what one of that size costs (:meth:`MeanContext.tokens_time`),
    so a larger budget gives the figures of that one.  ``mean_prompt``: the
    tokens a prompt holds where they exceed the ``mean_prefill`` it computes
    (a prefix cache's hits are context, not work; :class:`MeanContext` reads
    the contexts from it).
    """
    validation.positive_int("bmax", bmax)
    validation.nonnegative_number("mean_prefill", mean_prefill)
    validation.positive_number("mean_decode", mean_decode)
    validation.optional_positive_int("kmax", kmax)
    demand = np.array([mean_prefill, mean_decode])
    if by_batch_size(latency):  # Theorem 2 holds whatever kmax (the slot bound's part)
        d_mix = mix_decode(bmax, mean_prefill, mean_decode)
        t_mix = shape_time(latency, d_mix, bmax - d_mix)
        mix = _lp(np.array([[bmax - d_mix, d_mix]]) / t_mix, *demand)
        exact = lambda_star(bmax, mean_prefill, mean_decode, latency)
        return TokenBound(exact, mix, True, (bmax - d_mix, d_mix), t_mix)
    seen = MeanContext(latency, mean_prefill, mean_decode, mean_prompt)
    bmax = min(bmax, MIX_TOKENS)
    top = bmax if kmax is None else min(bmax, kmax)
    d_mix = mix_decode(bmax, mean_prefill, mean_decode, top)
    ds = sorted(_grid(top) | {d_mix})
    # full shapes, then shorter ones: with a slot limit the decodes of a full
    # batch are few and slow (a prefill fills the rest), where a batch of
    # decodes alone serves them several times faster
    shapes = [(bmax - d, d) for d in ds] + [
        (p, d) for d in ds for p in sorted(_grid(bmax - d)) if 0 < p + d < bmax]
    times = [seen.batch_time(d, p, d + 1) for p, d in shapes]
    rates = [(p / t, d / t) for (p, d), t in zip(shapes, times)]
    at = ds.index(d_mix)
    mix = _lp(np.array([rates[at]]), *demand)
    hull = np.array(convex_hull(rates + [(0.0, 0.0)]))
    return TokenBound(_lp(hull, *demand), mix, False, (bmax - d_mix, d_mix), times[at])


def _grid(top: int) -> Set[int]:
    """``GRID`` whole numbers evenly spaced from 0 to ``top``."""
    return {round(i * top / (GRID - 1)) for i in range(GRID)}


def slot_bound(kmax: int, t1: float, mean_decode: float) -> float:
    """``lambda_slot = kmax / (t_1 m_d)`` requests/s: a request holds one of the
    ``kmax`` slots for at least ``vd`` iterations of at least ``t1`` seconds."""
    validation.positive_int("kmax", kmax)
    validation.positive_number("t1", t1)
    validation.positive_number("mean_decode", mean_decode)
    return kmax / (t1 * mean_decode)


def _sizes(prefill_law: SizeLike, decode_law: SizeLike, n: int, seed: int,
           count: str = "n") -> Tuple[np.ndarray, np.ndarray]:
    """``n`` prompt and decode sizes (decode at least 1), from two streams of
    ``seed``; ``count`` names ``n`` in errors."""
    validation.positive_int(count, n)
    validation.seed("seed", seed)
    prompt, decode = as_law("prefill_law", prefill_law), as_law("decode_law", decode_law)
    rp, rd = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    return prompt.sample(rp, n), decode_sizes(decode, rd, n)


def memory_bound(capacity_tokens: int, t1: float, prefill_law: SizeLike,
                 decode_law: SizeLike, draws: int = 10**5, seed: int = 0) -> float:
    """``lambda_kv = C / (t_1 E[vd vp + vd (vd + 1)/2])`` requests/s (Little's law
    on KV token-seconds: a request holds about that many token-iterations of the
    cache of ``C`` tokens, each iteration at least ``t1`` seconds).  The
    expectation is exact for fixed sizes and a mean over ``draws`` draws
    (seeded by ``seed``) otherwise; decode draws of 0 count as 1."""
    validation.positive_int("capacity_tokens", capacity_tokens)
    validation.positive_number("t1", t1)
    prompt, decode = as_law("prefill_law", prefill_law), as_law("decode_law", decode_law)
    if isinstance(prompt, Fixed) and isinstance(decode, Fixed):
        vp, vd = float(prompt.value), float(max(decode.value, 1))
        area = vd * vp + vd * (vd + 1) / 2
    else:
        p, d = (x.astype(float) for x in _sizes(prompt, decode, draws, seed, "draws"))
        area = float(np.mean(d * p + d * (d + 1) / 2))
    return capacity_tokens / (t1 * area)


def unloaded_latency(latency: LatencyModel, bmax: int, vp: int, vd: int) -> Unloaded:
    """A request's latencies on an empty engine (docs/model.md §7.6), in seconds.

    TTFT: its prompt in chunks of ``bmax`` (chunk ``i`` after ``i bmax`` cached
    tokens), alone, then one decode iteration at context ``vp``.  TPOT: one
    decode iteration at context ``vp + vd/2`` (the mean of its later tokens'
    contexts ``vp + 1 .. vp + vd - 1``).  Beyond docs/model.md §7.6, for gating TBT and
    E2E: ``tbt_max`` is its last decode iteration (context ``vp + vd - 1``; times
    grow with context) and ``e2e = ttft + (vd - 1) tpot``.  ``tpot`` and
    ``tbt_max`` are ``None`` at ``vd = 1``.
    """
    validation.positive_int("bmax", bmax)
    validation.token_count("vp", vp)
    validation.token_count("vd", vd, minimum=1)
    ttft = shape_time(latency, 1, 0, vp)
    for start in range(0, vp, bmax):
        ttft += shape_time(latency, 0, min(bmax, vp - start), chunk_ctx=start)
    if vd == 1:
        return Unloaded(ttft, None, None, ttft)
    tpot = shape_time(latency, 1, 0, vp + vd / 2)
    return Unloaded(ttft, tpot, shape_time(latency, 1, 0, vp + vd - 1), ttft + (vd - 1) * tpot)


@dataclass(frozen=True)
class ZeroLoad:
    """:func:`zero_load`'s result: ``attainment`` is ``A_0`` (joint), ``unloaded``
    each sampled request's unloaded latencies, ``sizes`` its ``(vp, vd)``."""

    attainment: float
    unloaded: Tuple[Unloaded, ...]
    sizes: Tuple[Tuple[int, int], ...]


def zero_load(latency: LatencyModel, bmax: int, prefill_law: SizeLike, decode_law: SizeLike,
              slo: SLO, n: int = 10**4, seed: int = 0,
              fits: Optional[Callable[[int, int], bool]] = None) -> ZeroLoad:
    """The zero-load attainment ``A_0``: the share of ``n`` sampled requests
    (seeded by ``seed``) whose :func:`unloaded_latency` meets ``slo`` (scheduling
    delay 0).  Below the target, ``slo`` is infeasible at every rate.  A request
    ``(vp, vd)`` with ``fits(vp, vd)`` false is never served (it can never fit
    the KV cache: docs/model.md §6.1 ignores it) and misses the SLO."""
    if not isinstance(slo, SLO):
        raise ValueError(f"slo must be an SLO, got {slo!r}")
    validation.positive_int("bmax", bmax)
    prompts, decodes = _sizes(prefill_law, decode_law, n, seed)
    cache: Dict[Tuple[int, int], Unloaded] = {}
    sizes = tuple(zip(prompts.tolist(), decodes.tolist()))
    for key in sizes:
        if key not in cache:
            cache[key] = unloaded_latency(latency, bmax, *key)
    unloaded = tuple(cache[key] for key in sizes)
    served = [True] * len(sizes) if fits is None else [fits(*key) for key in sizes]
    records = [RequestLatency(u.ttft, u.tpot, u.tbt_max, u.e2e, 0.0, True, None, u) if ok
               else RequestLatency(finished=False, unloaded=u)
               for u, ok in zip(unloaded, served)]
    return ZeroLoad(attainment(records, slo).joint, unloaded, sizes)


@dataclass(frozen=True)
class Bounds:
    """docs/model.md §7.6's bounds of one configuration (requests/s; ``None`` = not
    computed: no ``kmax``, no KV capacity, no SLO)."""

    lambda_tok: float
    lambda_mix: float
    exact: bool
    """Whether ``lambda_tok`` is Theorem 2 exactly (models of the batch size alone)."""
    lambda_slot: Optional[float] = None
    lambda_kv: Optional[float] = None
    attainment_zero_load: Optional[float] = None
    """``A_0``."""

    @property
    def limit(self) -> float:
        """The smallest of the rate bounds computed (requests/s)."""
        return min(x for x in (self.lambda_tok, self.lambda_slot, self.lambda_kv)
                   if x is not None)

    def infeasible(self, target: float = 0.9) -> bool:
        """True when ``A_0 < target``: the SLO fails at every rate (False when
        ``A_0`` was not computed)."""
        validation.fraction("target", target)
        return self.attainment_zero_load is not None and self.attainment_zero_load < target

    @classmethod
    def of(cls, latency: LatencyModel, bmax: int, prefill_law: SizeLike, decode_law: SizeLike,
           *, kmax: Optional[int] = None, capacity_tokens: Optional[int] = None,
           slo: Optional[SLO] = None, draws: int = 10**5, n: int = 10**4,
           seed: int = 0, fits: Optional[Callable[[int, int], bool]] = None) -> "Bounds":
        """Every bound for an engine (``latency``, ``bmax``, ``kmax``, a KV cache
        of ``capacity_tokens``) and requests drawn from the two size laws.  Means:
        the prompt law's mean and the decode law's with draws of 0 counted as 1.
        ``fits`` as :func:`zero_load` takes it."""
        prompt, decode = as_law("prefill_law", prefill_law), as_law("decode_law", decode_law)
        m_d = decode_mean(decode)
        if m_d is None:  # a law whose chance of 0 is unknown: the sample mean
            m_d = float(np.mean(_sizes(prompt, decode, draws, seed, "draws")[1]))
        tok = token_bound(latency, bmax, prompt.mean, m_d, kmax)
        t1 = smallest_iteration(latency)
        return cls(
            tok.lambda_tok, tok.lambda_mix, tok.exact,
            None if kmax is None else slot_bound(kmax, t1, m_d),
            None if capacity_tokens is None else
            memory_bound(capacity_tokens, t1, prompt, decode, draws, seed),
            None if slo is None else zero_load(latency, bmax, prompt, decode, slo, n,
                                               seed, fits).attainment)
