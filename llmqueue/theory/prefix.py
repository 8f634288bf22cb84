"""Prefix caching in closed form (docs/model.md §8.4): no simulation.

A request may carry ``blocks``, content ids of its prompt, one per ``H``
tokens (``H`` the **hash block**): equal i-th ids mean equal first
``(i + 1) H`` tokens.  Cached blocks spare their tokens' prefill, hence

* the **ideal hit** of a stream of requests (:func:`ideal_hits`,
  :func:`ideal_hit_ratio`): what an unlimited cache on an engine that
  finishes every request before the next arrival instant saves, counted
  exactly from the ids;
* **Che's approximation** of an LRU cache of ``C`` hash blocks shared by
  ``G`` prefix groups (:func:`che`, :func:`che_hit_ratio`,
  :func:`che_characteristic_time`), with **Zipf** group popularities
  (:func:`zipf_popularity`);
* Theorem 2's capacity with ``E[c]`` hit tokens per request
  (:func:`lambda_star_cached`) and its gain over no cache
  (:func:`prefix_gain`), and ``E[c]`` of prefix groups once every group's
  head is cached (:func:`group_mean_hit`).

Every function is pure, takes tokens, seconds and requests per second, and
raises :class:`ValueError` naming the parameter when an argument is out of
range.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import (Any, Hashable, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union,
                    cast)

import numpy as np

from llmqueue.common import validation
from llmqueue.models.latency import LatencyModel
# docs/model.md §8.4's Zipf shares live with the workloads that draw them; re-exported here
from llmqueue.models.prefixes import zipf_popularity as zipf_popularity
from llmqueue.models.sizes import SizeLaw
from llmqueue.theory.capacity import lambda_star


# --- the ideal hit --------------------------------------------------------------------

def _prompt_tokens(index: int, request: Any) -> int:
    value: Any = getattr(request, "prefill", None)
    try:
        value = operator.index(value)  # an int, or a numpy integer
    except TypeError:
        pass  # not whole: token_count names it
    return validation.token_count(f"requests[{index}].prefill", value)


def _ids(index: int, request: Any, name: str) -> Sequence[Hashable]:
    value: Any = getattr(request, name, None)
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise ValueError(f"requests[{index}].{name} must be a sequence of ids or None, "
                         f"got {validation.shown(value)}")
    return cast(Sequence[Hashable], value)  # a numpy array of ids slices as one


def _hits(requests: Iterable[Any], hash_block: int) -> Iterator[Tuple[int, int]]:
    """``(hit, vp)`` of each request in turn (see :func:`ideal_hits`)."""
    validation.positive_int("hash_block", hash_block)
    seen: Set[Hashable] = set()
    instant: List[Hashable] = []  # ids of the current instant, seen from the next one on
    now = -math.inf
    for index, request in enumerate(requests):
        given: Any = getattr(request, "time", None)
        if not validation.is_number(given):
            raise ValueError(f"requests[{index}].time must be a finite number of seconds, "
                             f"got {validation.shown(given)}")
        time = float(given)
        if time < now:
            raise ValueError(f"requests must be in arrival order: requests[{index}].time is "
                             f"{time!r}, before the previous request's {now!r}")
        if time > now:
            seen.update(instant)
            instant.clear()
            now = time
        vp = _prompt_tokens(index, request)
        usable = _ids(index, request, "blocks")[:vp // hash_block]  # full blocks only
        found = 0
        for block in usable:
            if block not in seen:
                break
            found += 1
        yield (min(found * hash_block, vp - 1) if vp > 0 else 0), vp
        instant.extend(usable)
        instant.extend(_ids(index, request, "out_blocks"))


def ideal_hits(requests: Iterable[Any], hash_block: int) -> List[int]:
    """Each request's ideal hit, in tokens (docs/model.md §8.4).

    ``requests`` are read once, in arrival order (a time earlier than the
    previous one is an error); each has ``time`` (s), ``prefill`` (``vp``
    tokens) and, read with a default of ``None``, ``blocks`` (its prompt's
    content ids, one per ``hash_block`` tokens) and ``out_blocks`` (ids of the
    blocks it completes while decoding): an :class:`~llmqueue.models.workload.Arrival`
    with those fields, or any object with those attributes.  Only full blocks
    count: a prompt uses its first ``floor(vp / hash_block)`` ids.  A
    request's hit is ``min(h * hash_block, vp - 1)`` (0 when ``vp`` is 0),
    ``h`` the number of its leading usable ids found among the usable ids and
    ``out_blocks`` of requests that arrived **strictly** earlier: requests of
    one instant share nothing.  Memory: the distinct ids and the hits.

    Examples:
        The second request repeats the first's two blocks and adds one of its
        own; the third arrives with it, so it cannot reuse that block.

        >>> from collections import namedtuple
        >>> R = namedtuple("R", "time prefill blocks")
        >>> ideal_hits([R(0.0, 32, (1, 2)), R(1.0, 48, (1, 2, 3)),
        ...             R(1.0, 48, (1, 2, 3))], hash_block=16)
        [0, 32, 32]
    """
    return [hit for hit, _ in _hits(requests, hash_block)]


def ideal_hit_ratio(requests: Iterable[Any], hash_block: int) -> float:
    """Sum of :func:`ideal_hits` over sum of prompt tokens (0 when there are
    none): the hit ratio of an unlimited cache on an engine that finishes
    every request before the next arrival instant; a simulation never
    exceeds it on first starts (docs/model.md §8.4).  One pass; memory of the
    distinct ids only.

    Examples:
        A prompt of exactly two blocks that were all seen hits at most
        ``vp - 1`` tokens: one token is always computed.

        >>> from collections import namedtuple
        >>> R = namedtuple("R", "time prefill blocks")
        >>> ideal_hit_ratio([R(0.0, 32, (1, 2)), R(1.0, 32, (1, 2))], hash_block=16)
        0.484375
    """
    hit_tokens = prompt_tokens = 0
    for hit, vp in _hits(requests, hash_block):
        hit_tokens += hit
        prompt_tokens += vp
    return hit_tokens / prompt_tokens if prompt_tokens else 0.0


# --- Che's approximation --------------------------------------------------------------

@dataclass(frozen=True)
class Che:
    """Che's approximation of an LRU prefix cache (docs/model.md §8.4)."""

    time: float
    """The characteristic time ``T`` (s): a block unused for ``T`` is evicted
    (``inf`` when the cache holds every shared prefix and nothing else)."""
    group_hits: Tuple[float, ...]
    """Probability that a request of group ``g`` finds its prefix cached,
    ``1 - exp(-lambda p_g T)``."""
    hit_ratio: float
    """Predicted hit tokens over prompt tokens,
    ``sum_g p_g (1 - exp(-lambda p_g T)) n_g H / E[vp]``."""


def _groups(popularity: Sequence[float],
            shared_blocks: Union[float, Sequence[float]]) -> Tuple[np.ndarray, np.ndarray]:
    """The normalised popularities and each group's shared blocks."""
    if isinstance(popularity, (str, bytes)) or not isinstance(popularity, (Sequence, np.ndarray)):
        raise ValueError(f"popularity must be a sequence of numbers >= 0, "
                         f"got {validation.shown(popularity)}")
    if len(popularity) == 0:
        raise ValueError("popularity must name at least one group, got an empty sequence")
    p = np.array([validation.nonnegative_number(f"popularity[{g}]", x)
                  for g, x in enumerate(popularity)], dtype=float)
    total = math.fsum(p)
    if not total > 0:
        raise ValueError(f"popularity must have a sum > 0, got {validation.shown(popularity)}")
    if validation.is_number(shared_blocks):
        blocks = [validation.nonnegative_number("shared_blocks", shared_blocks)] * len(p)
    elif isinstance(shared_blocks, (Sequence, np.ndarray)) and not isinstance(
            shared_blocks, (str, bytes)) and len(shared_blocks) == len(p):
        blocks = [validation.nonnegative_number(f"shared_blocks[{g}]", x)
                  for g, x in enumerate(shared_blocks)]
    else:
        raise ValueError(f"shared_blocks must be a number >= 0 or one such number per group "
                         f"({len(p)}), got {validation.shown(shared_blocks)}")
    return p / total, np.array(blocks, dtype=float)


def _filled(rate: float, p: np.ndarray, n: np.ndarray, unique: float, time: float) -> float:
    """The left side ``sum_g n_g (1 - exp(-rate p_g T)) + rate E[u] T``."""
    return float(np.dot(n, -np.expm1(-rate * p * time))) + rate * unique * time


def _characteristic_time(rate: float, p: np.ndarray, n: np.ndarray, unique: float,
                         capacity: float) -> float:
    if capacity == 0:
        return 0.0
    live = p > 0  # a group never requested fills nothing
    if unique == 0 and capacity >= float(np.sum(n[live])):
        return math.inf
    p, n = p[live], n[live]
    # the left side rises from 0, so the root lies in (0, hi] once it reaches C there
    hi = capacity / (rate * unique) if unique > 0 else 1 / (rate * float(np.max(p)))
    while _filled(rate, p, n, unique, hi) < capacity:
        hi *= 2  # only with E[u] = 0: the left side tends to sum n_g > C
        if math.isinf(hi):
            return math.inf  # C within rounding of sum n_g
    lo = 0.0
    for _ in range(2000):
        mid = (lo + hi) / 2
        if not lo < mid < hi:
            break  # the floats between lo and hi are exhausted
        if _filled(rate, p, n, unique, mid) < capacity:
            lo = mid
        else:
            hi = mid
    return hi


def _check_rate_unique_capacity(rate: float, unique_blocks_mean: float,
                                capacity_blocks: float) -> Tuple[float, float, float]:
    return (validation.positive_number("rate", rate),
            validation.nonnegative_number("unique_blocks_mean", unique_blocks_mean),
            validation.nonnegative_number("capacity_blocks", capacity_blocks))


def che_characteristic_time(rate: float, popularity: Sequence[float],
                            shared_blocks: Union[float, Sequence[float]],
                            unique_blocks_mean: float, capacity_blocks: float) -> float:
    """Che's characteristic time ``T`` (s): the root of
    ``sum_g n_g (1 - exp(-lambda p_g T)) + lambda E[u] T = C`` (docs/model.md §8.4).

    ``rate`` is ``lambda`` (requests/s); ``popularity`` the groups' shares
    ``p_g`` (numbers >= 0, normalised to sum 1); ``shared_blocks`` each
    group's shared prefix ``n_g`` in hash blocks (one number for every
    group, or one per group); ``unique_blocks_mean`` ``E[u]``, the hash
    blocks of its own each request adds and nobody reuses;
    ``capacity_blocks`` ``C``, the hash blocks the cache holds for content.
    The left side rises with ``T``, so bisection finds the root to the last
    float.  ``T`` is 0 when ``C`` is 0 and ``inf`` when ``E[u]`` is 0 and
    ``C`` holds every requested group's prefix.

    Examples:
        One group of one block, one request per second, one unique block each:
        ``1 - exp(-T) + T = 1`` holds at ``T = 0.5671...`` (the omega
        constant, ``T = exp(-T)``).

        >>> round(che_characteristic_time(1.0, [1.0], 1, 1.0, 1.0), 6)
        0.567143
    """
    rate, unique, capacity = _check_rate_unique_capacity(rate, unique_blocks_mean,
                                                          capacity_blocks)
    p, n = _groups(popularity, shared_blocks)
    return _characteristic_time(rate, p, n, unique, capacity)


def che(rate: float, popularity: Sequence[float], shared_blocks: Union[float, Sequence[float]],
        unique_blocks_mean: float, capacity_blocks: float, hash_block: int,
        mean_prompt: float) -> Che:
    """Che's approximation for an LRU prefix cache (docs/model.md §8.4): ``T``, each
    group's hit probability and the predicted hit ratio.

    Arguments as :func:`che_characteristic_time`, and ``hash_block`` ``H``
    (tokens per hash block) and ``mean_prompt`` ``E[vp]`` (tokens; at least
    the shared prefixes' mean ``sum_g p_g n_g H``).  A group's prefix is used
    all or nothing.  Exact as ``C`` grows without bound (every group hits);
    an approximation otherwise.

    Examples:
        Two groups of 4 blocks of 16 tokens and no unique blocks: a cache of 8
        blocks keeps both, so every request saves its 64 shared tokens.

        >>> che(2.0, [3, 1], 4, 0.0, 8, 16, 128.0)
        Che(time=inf, group_hits=(1.0, 1.0), hit_ratio=0.5)
    """
    rate, unique, capacity = _check_rate_unique_capacity(rate, unique_blocks_mean,
                                                          capacity_blocks)
    p, n = _groups(popularity, shared_blocks)
    validation.positive_int("hash_block", hash_block)
    mean_prompt = validation.positive_number("mean_prompt", mean_prompt)
    shared_tokens = float(np.dot(p, n)) * hash_block
    if mean_prompt < shared_tokens * (1 - 1e-12):
        raise ValueError(f"mean_prompt must be at least the shared prefixes' mean "
                         f"sum_g p_g n_g H = {shared_tokens:g} tokens, got {mean_prompt:g}")
    time = _characteristic_time(rate, p, n, unique, capacity)
    with np.errstate(invalid="ignore"):  # 0 * inf for a group never requested
        hits = np.where(p > 0, -np.expm1(-rate * p * time), 0.0)
    ratio = float(np.dot(p * hits, n)) * hash_block / mean_prompt
    return Che(time, tuple(float(h) for h in hits), ratio)


def che_hit_ratio(rate: float, popularity: Sequence[float],
                  shared_blocks: Union[float, Sequence[float]], unique_blocks_mean: float,
                  capacity_blocks: float, hash_block: int, mean_prompt: float) -> float:
    """Che's predicted hit ratio ``sum_g p_g (1 - exp(-lambda p_g T)) n_g H / E[vp]``
    (arguments and ``T`` as :func:`che`).

    Examples:
        One group of 2 blocks of 16 tokens in 64-token prompts, one unique
        block a request, a cache of 2 blocks: the prefix is cached with
        probability ``q = 1 - exp(-T)`` where ``2 q + T = 2`` (``T = 0.8526``),
        and saves half of a prompt, so the ratio is ``q / 2``.

        >>> round(che_hit_ratio(1.0, [1.0], 2, 1.0, 2.0, 16, 64.0), 4)
        0.2868
    """
    return che(rate, popularity, shared_blocks, unique_blocks_mean, capacity_blocks,
               hash_block, mean_prompt).hit_ratio


# --- capacity with hits ---------------------------------------------------------------

def _effective_prefill(mean_prefill: float, mean_hit: float) -> float:
    mean_prefill = validation.nonnegative_number("mean_prefill", mean_prefill)
    mean_hit = validation.nonnegative_number("mean_hit", mean_hit)
    if mean_hit > mean_prefill:
        raise ValueError(f"mean_hit must be a number from 0 to mean_prefill "
                         f"({mean_prefill:g}), got {validation.shown(mean_hit)}")
    return mean_prefill - mean_hit


def lambda_star_cached(bmax: int, mean_prefill: float, mean_decode: float, mean_hit: float,
                       latency: Optional[LatencyModel] = None) -> float:
    """Theorem 2's capacity with ``E[c] = mean_hit`` hit tokens per request,
    ``(bmax / t_bmax) / (E[vp] - E[c] + E[vd])`` requests/s (docs/model.md §8.4):
    :func:`~llmqueue.theory.capacity.lambda_star` at the effective prompt
    ``E[vp] - E[c]`` (a context model read at that effective mix, approximate).

    Examples:
        docs/model.md §8.7, E10.2: 1152-token prompts of which 1024 hit, 128 decodes, on the
        staircase with ``bmax = 512``: 512 / (0.01128 + 4 x 0.03547) tokens
        per second over 256 tokens a request.

        >>> round(lambda_star_cached(512, 1152, 128, 1024), 2)
        13.06
    """
    return lambda_star(bmax, _effective_prefill(mean_prefill, mean_hit), mean_decode, latency)


def prefix_gain(mean_prefill: float, mean_decode: float, mean_hit: float) -> float:
    """Capacity with hits over capacity without, for a model of the batch
    size alone: ``(E[vp] + E[vd]) / (E[vp] - E[c] + E[vd])`` (docs/model.md §8.4).

    Examples:
        docs/model.md §8.7, E10.2: 1280 tokens a request, 256 of them computed.

        >>> prefix_gain(1152, 128, 1024)
        5.0
    """
    effective = _effective_prefill(mean_prefill, mean_hit)
    mean_decode = validation.positive_number("mean_decode", mean_decode)
    return (float(mean_prefill) + mean_decode) / (effective + mean_decode)


def group_mean_hit(shared: int, hash_block: int, suffix: SizeLaw) -> float:
    """The mean hit per request of prefix groups (docs/model.md §8.5) once every
    group's head is cached (an unlimited cache, docs/model.md §8.4): the group's whole
    hash blocks, ``floor(S / H) H``, less a block for a prompt with no tokens
    of its own whose shared part ends on a block's edge (a hit stops one token
    short of the prompt; the chance of an empty suffix from 10^5 draws seeded 0).

    Examples:
        docs/model.md §8.7, E10.2: 1024 shared tokens, hash blocks of 16, suffixes of at
        least one token.

        >>> from llmqueue.models.sizes import Fixed, Geometric
        >>> group_mean_hit(1024, 16, Geometric(128)), group_mean_hit(1030, 16, Fixed(0))
        (1024.0, 1024.0)
        >>> group_mean_hit(1024, 16, Fixed(0))
        1008.0
    """
    shared = validation.token_count("shared", shared)
    h = validation.positive_int("hash_block", hash_block)
    hit: float = shared // h * h
    if hit and shared % h == 0:  # a prompt of the shared part alone hits one block less
        draws = suffix.sample(np.random.default_rng(0), 100_000)
        hit -= h * float(np.mean(draws == 0))
    return float(hit)
