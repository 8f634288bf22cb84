"""Prefix groups in a plan's traffic: requests whose prompts open with one of
``G`` shared heads (the prefix-group workload of
:class:`~llmqueue.models.prefixes.PrefixGroups`, drawn here from a plan's
own seeded streams so that every rate sees the same requests).

* :class:`Shifted` is a prompt's size law: the ``S`` shared tokens, then a
  suffix from its own law;
* :class:`Groups` holds ``G``, the Zipf exponent, ``S``, the suffix law and
  the hash block ``H``; it gives each request's content ids
  (:meth:`Groups.ids`), its hit once its group's head is cached
  (:meth:`Groups.hits`) and the mean of those hits (:meth:`Groups.mean_hit`);
* :class:`Uncached` is the law of the prompt tokens left to compute once the
  group's head is cached (the **effective** prompt).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import List, Optional, Tuple

import numpy as np

from llmqueue.common import validation
from llmqueue.models.prefixes import (HASH_BLOCK, MAX_GROUPS, BlockIds, group_picks,
                                      hash_block_size, zipf_popularity)
from llmqueue.models.sizes import SizeLaw, SizeLike, as_law
from llmqueue.theory.prefix import group_mean_hit


class Shifted(SizeLaw):
    """``by`` tokens more than a draw of ``law``: a prefix group's prompt, its
    shared tokens followed by a suffix.

    Examples:
        >>> import numpy as np
        >>> from llmqueue.models.sizes import Fixed
        >>> law = Shifted(Fixed(3), 10)
        >>> law.mean, law.sample(np.random.default_rng(0), 2).tolist(), law
        (13.0, [13, 13], 10 + Fixed(value=3, mean=3.0))
    """

    def __init__(self, law: SizeLaw, by: int) -> None:
        self.law = law
        self.by = validation.token_count("by", by)
        self.mean = float(by) + law.mean

    @property
    def variance(self) -> float:
        """The suffix law's variance."""
        return self.law.variance

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws of the suffix law, each plus ``by``."""
        return self.law.sample(rng, n) + self.by

    def zero_probability(self) -> Optional[float]:
        """0 when ``by`` > 0, else the suffix law's."""
        return self.law.zero_probability() if self.by == 0 else 0.0

    def survival(self, x: int) -> float:
        """``P(by + suffix > x)``."""
        return self.law.survival(x - self.by) if x >= self.by else 1.0

    def __repr__(self) -> str:
        return f"{self.by} + {self.law!r}"


@dataclass(frozen=True)
class Groups:
    """``groups`` prefix groups of Zipf popularity ``p_g ~ g^(-zipf)``, each
    prompt its group's ``shared`` tokens then a ``suffix`` of its own, cut
    into content ids of ``hash_block`` tokens: the group's
    ``floor(shared / hash_block)`` ids, then ids nobody else has."""

    groups: int
    zipf: float
    shared: int
    suffix: SizeLaw
    hash_block: int = HASH_BLOCK

    def __post_init__(self) -> None:
        validation.positive_int("groups", self.groups, high=MAX_GROUPS)
        validation.nonnegative_number("zipf", self.zipf)
        validation.token_count("shared", self.shared)
        hash_block_size(self.hash_block)
        object.__setattr__(self, "suffix", as_law("suffix", self.suffix))

    @property
    def popularity(self) -> Tuple[float, ...]:
        """``p_g`` of groups ``1..G``."""
        return zipf_popularity(self.groups, self.zipf)

    @property
    def shared_blocks(self) -> int:
        """Ids a group's prompts share, ``floor(S / H)``."""
        return self.shared // self.hash_block

    @property
    def prompt(self) -> Shifted:
        """The prompt's size law, ``S + suffix``."""
        return Shifted(self.suffix, self.shared)

    @cached_property
    def mean_hit(self) -> float:
        """``E[hit]`` tokens per request once every group's head is cached
        (:func:`~llmqueue.theory.prefix.group_mean_hit`, which ``capacity``'s
        ``group_hit`` reads too): exact with a cache that never evicts, after
        each group's first request; no cache's mean hit exceeds it."""
        return group_mean_hit(self.shared, self.hash_block, self.suffix)

    def hits(self, prompts: np.ndarray) -> np.ndarray:
        """Each prompt's hit once its group's head is cached: its group's
        whole hash blocks, at most ``floor((vp - 1) / H)`` of them (one token
        is always computed)."""
        h = self.hash_block
        room = np.maximum(np.asarray(prompts) - 1, 0) // h
        return np.minimum(room, self.shared_blocks) * h

    def ids(self, rng: np.random.Generator, prompts: np.ndarray) -> List[Tuple[int, ...]]:
        """Each request's content ids: a group drawn from ``rng`` with the Zipf
        shares (the first ``n`` picks do not depend on how many follow), its
        shared ids, then fresh ones up to the prompt's whole hash blocks."""
        picks = group_picks(rng, self.popularity)
        blocks = BlockIds(self.groups, self.shared_blocks)
        return [blocks.blocks(g, vp // self.hash_block) for g, vp in zip(picks, prompts.tolist())]

    def describe(self) -> str:
        """One line: the groups and the suffix law."""
        return (f"prefix groups G={self.groups} zipf={self.zipf:g} shared={self.shared} "
                f"(H={self.hash_block}), suffix {self.suffix!r}")


class Uncached(SizeLaw):
    """The prompt tokens a request of ``groups`` computes once its group's
    head is cached: ``vp - hit``."""

    def __init__(self, groups: Groups) -> None:
        self.groups = groups
        self.mean = groups.prompt.mean - groups.mean_hit

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` prompts less their hits."""
        prompts = self.groups.prompt.sample(rng, n)
        return prompts - self.groups.hits(prompts)

    def __repr__(self) -> str:
        return f"Uncached({self.groups.describe()})"


def groups_of(prefill: SizeLike, groups: Optional[Groups]) -> Optional[Groups]:
    """``groups`` when ``prefill`` is its prompt law (built by
    :meth:`~llmqueue.planning.spec.Traffic.prefix_groups`); a ValueError otherwise."""
    if groups is None:
        return None
    if not isinstance(groups, Groups):
        raise ValueError(f"groups must be a Groups(...) or None, got {groups!r}")
    if not (isinstance(prefill, Shifted) and prefill.law is groups.suffix
            and prefill.by == groups.shared):
        raise ValueError("a workload of prefix groups has the groups' prompt law (shared "
                         "tokens, then the suffix): build it with Traffic.prefix_groups(...)")
    return groups
