"""Workloads whose prompts share prefixes (docs/model.md §8.5): prefix groups.

A request may carry content ids of its prompt (docs/model.md §8.1), one per ``H``
tokens (the **hash block**): equal ``i``-th ids mean equal first
``(i + 1) H`` tokens.  :class:`PrefixGroups` draws requests from ``G``
groups of Zipf popularity (:func:`zipf_popularity`): each prompt is its
group's ``S`` shared tokens followed by a fresh suffix, so requests of one
group share the ids of the ``floor(S / H)`` blocks wholly inside the shared
part and nothing else.  Ids are plain ints handed out by :class:`BlockIds`:
group ``g``'s shared blocks are ``g n .. g n + n - 1`` (``n = floor(S / H)``),
and every other block gets an id never used before, from ``G n`` on.
Multi-turn sessions, whose ids follow a transcript, are in
:mod:`llmqueue.models.sessions`.
"""

from __future__ import annotations

import math
from typing import Dict, Hashable, Iterator, Optional, Tuple, Union

import numpy as np

from llmqueue.common import validation
from llmqueue.models.arrivals import BLOCK, ArrivalLaw, arrival_law
from llmqueue.models.sizes import SizeLaw, SizeLike, as_law
from llmqueue.models.workload import Arrival, Workload, compose

#: Most prefix groups :func:`zipf_popularity` lists (a tuple of that many floats).
MAX_GROUPS = 10**7
#: The hash block of synthetic workloads when none is given: vLLM's KV block
#: size, and docs/model.md §8.7's ``B = H = 16``.
HASH_BLOCK = 16


def zipf_popularity(groups: int, s: float) -> Tuple[float, ...]:
    """Zipf shares of ``groups`` prefix groups, ``p_g`` proportional to
    ``g^(-s)`` for ``g = 1..groups``, normalised to sum 1 (``s >= 0``; 0 is
    uniform).

    Examples:
        1 : 1/2 : 1/3 over their sum 11/6 is 6/11 : 3/11 : 2/11.

        >>> tuple(round(p, 4) for p in zipf_popularity(3, 1.0))
        (0.5455, 0.2727, 0.1818)
    """
    validation.positive_int("groups", groups, high=MAX_GROUPS)
    s = validation.nonnegative_number("s", s)
    weights = np.arange(1, groups + 1, dtype=float) ** -s
    return tuple(float(x) for x in weights / math.fsum(weights))


def hash_block_size(value: object) -> int:
    """``value`` if it is a hash block: a whole number of tokens from 1 to
    :data:`~llmqueue.common.validation.MAX_TOKENS`."""
    return validation.positive_int("hash_block", value, high=validation.MAX_TOKENS)


def group_picks(rng: np.random.Generator, popularity: Tuple[float, ...]) -> Iterator[int]:
    """Endless group indices ``0 .. G - 1`` drawn with the given shares from
    ``rng`` (in blocks, so the first ``n`` picks never depend on how many
    follow)."""
    shares = np.asarray(popularity, dtype=float)
    while True:
        yield from rng.choice(shares.size, BLOCK, p=shares).tolist()


class BlockIds:
    """The content ids of one pass over a stream: group ``g``'s ``shared``
    blocks are ``g * shared .. g * shared + shared - 1``; :meth:`fresh` ids
    follow ``groups * shared`` and are never handed out twice.

    Examples:
        >>> ids = BlockIds(groups=3, shared=2)
        >>> ids.group(1), ids.fresh(3), ids.fresh(1), ids.blocks(0, 3)
        ((2, 3), (6, 7, 8), (9,), (0, 1, 10))
    """

    def __init__(self, groups: int, shared: int) -> None:
        self.shared = shared
        self._next = groups * shared
        self._groups: Dict[int, Tuple[int, ...]] = {}

    def group(self, g: int) -> Tuple[int, ...]:
        """The ids of group ``g``'s shared blocks (one tuple per group)."""
        ids = self._groups.get(g)
        if ids is None:
            ids = self._groups[g] = tuple(range(g * self.shared, (g + 1) * self.shared))
        return ids

    def fresh(self, k: int) -> Tuple[int, ...]:
        """``k`` ids nobody has had."""
        start = self._next
        self._next += k
        return tuple(range(start, start + k))

    def blocks(self, g: int, total: int) -> Tuple[int, ...]:
        """``total`` ids (``>= shared``): group ``g``'s, then fresh ones."""
        return self.group(g) + self.fresh(total - self.shared)


class PrefixGroups(Workload):
    """Requests from ``groups`` prefix groups of Zipf popularity (docs/model.md §8.5).

    Each request picks group ``g`` with probability ``p_g`` proportional to
    ``g^(-zipf)`` (:attr:`popularity`); its prompt is the group's ``shared``
    tokens followed by a fresh ``suffix`` (a size law, or a fixed size), so
    ``vp = shared + suffix``, and it decodes ``decode`` tokens (a draw of 0
    gives 1).  Its ``blocks`` hold one id per full hash block of ``H =
    hash_block`` tokens: the group's ``floor(shared / H)`` ids first (the same
    for every request of the group), then ids no other request has (see
    :class:`BlockIds`); no ``out_blocks``, so a restart hits prompt blocks only.

    Times and sizes are :func:`~llmqueue.models.workload.compose`'s with the
    suffix law as the prefill law: Poisson at ``rate`` by default, or the
    ``arrivals`` law (an :class:`~llmqueue.models.arrivals.ArrivalLaw`, or a
    text form of :func:`~llmqueue.models.arrivals.parse_arrival` at ``rate``).
    As there, the same seed gives the same requests, the first ``n`` the same
    whatever ``count``, and group picks come from a fourth independent stream
    of ``numpy.random.SeedSequence(seed)``.

    ``hash_block`` is 16 by default (vLLM's block size, docs/model.md §8.7's
    ``B = H = 16``): the ids are cut per hash block, so the workload needs
    it; an engine whose KV block size B divides it takes it as it is.

    Examples:
        Two groups sharing 40 tokens: blocks of 16 tokens, two shared (group 0
        owns ids 0-1, group 1 ids 2-3), the rest fresh from 4 on.

        >>> w = PrefixGroups(groups=2, zipf=1.0, shared=40, suffix=30, decode=5,
        ...                  rate=1.0, count=3, seed=1)
        >>> [(a.prefill, a.blocks) for a in w]
        [(70, (0, 1, 4, 5)), (70, (2, 3, 6, 7)), (70, (0, 1, 8, 9))]
        >>> w.mean_prefill, w.hash_block, w.count
        (70.0, 16, 3)
    """

    groups: int
    """Prefix groups ``G``."""
    zipf: float
    """Zipf exponent ``s``."""
    shared: int
    """Tokens shared by a group's prompts ``S``."""
    shared_blocks: int
    """Ids shared by a group's prompts: ``floor(S / H)``."""
    popularity: Tuple[float, ...]
    """``p_g`` of groups ``1..G``."""
    suffix: SizeLaw
    """Law of each prompt's own tokens."""
    decode: SizeLaw
    """Law of decode tokens."""

    def __init__(self, groups: int, zipf: float, shared: int, suffix: SizeLike,
                 decode: SizeLike, *, rate: Optional[float] = None,
                 arrivals: Union[ArrivalLaw, str] = "poisson", count: Optional[int] = None,
                 seed: int = 0, hash_block: int = HASH_BLOCK, klass: Hashable = None,
                 initial: int = 0) -> None:
        popularity = zipf_popularity(groups, validation.nonnegative_number("zipf", zipf))
        validation.token_count("shared", shared)
        hash_block = hash_block_size(hash_block)
        if isinstance(arrivals, ArrivalLaw):
            if rate is not None:
                raise ValueError(f"give rate with an arrival law's name, not with the law "
                                 f"{arrivals!r}; got rate={validation.shown(rate)}")
            law = arrivals
        elif rate is None:
            raise ValueError("rate must be given (requests per second), or arrivals as an "
                             "arrival law")
        else:
            law = arrival_law(arrivals, rate, "arrivals")
        suffix_law, decode_law = as_law("suffix", suffix), as_law("decode", decode)
        base = compose(law, suffix_law, decode_law, count, seed, klass, initial=initial)
        n = shared // hash_block

        def make() -> Iterator[Arrival]:
            picks = group_picks(np.random.default_rng(np.random.SeedSequence(seed).spawn(4)[3]),
                                popularity)
            ids = BlockIds(groups, n)
            for a, g in zip(base.make(), picks):
                vp = shared + a.prefill
                yield Arrival(a.time, vp, a.decode, klass, ids.blocks(g, vp // hash_block),
                              None, hash_block)

        text = (f"prefix groups G={groups} zipf={zipf:g} shared={shared} (H={hash_block}), "
                f"{law!r}, suffix {suffix_law!r}, decode {decode_law!r}, seed={seed}"
                + (f", {initial} at t=0" if initial else ""))
        super().__init__(make, base.count, text, rate=base.rate,
                         mean_prefill=shared + suffix_law.mean, mean_decode=base.mean_decode,
                         initial=initial, hash_block=hash_block)
        for name, value in (("groups", groups), ("zipf", float(zipf)), ("shared", shared),
                            ("shared_blocks", n), ("popularity", popularity),
                            ("suffix", suffix_law), ("decode", decode_law)):
            object.__setattr__(self, name, value)  # a frozen Workload

    def __repr__(self) -> str:
        return f"PrefixGroups({self.description})"
