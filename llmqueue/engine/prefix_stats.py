"""What a run with a prefix cache reports (docs/model.md §8.3).

:class:`PrefixStats` is the running count one engine's cache keeps (the
engine's :class:`~llmqueue.engine.kv_recorder.MemoryRecorder` holds it, and
restarts it at the warm-up); :func:`prefix_figures` turns those of one or
several engines into the summary's keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Sequence

from llmqueue.models.latency import LatencyModel
from llmqueue.theory.prefix import lambda_star_cached


@dataclass
class PrefixStats:
    """The figures of docs/model.md §8.3 a run reports, over the observed span."""

    hit_tokens: int = 0
    restart_hits: int = 0
    first_hits: int = 0
    first_prompt: int = 0
    first_starts: int = 0
    evictions: int = 0
    entries_max: int = 0
    cache_area: int = 0
    """Integral of the evictable blocks over time (block-ns)."""
    level: int = 0
    since: int = 0

    def set_level(self, now: int, blocks: int) -> None:
        """The evictable blocks are ``blocks`` from ``now`` on."""
        self.cache_area += self.level * (now - self.since)
        self.level, self.since = blocks, now

    def restart(self, now: int) -> None:
        """Forget everything before ``now`` but the level (warm-up deletion)."""
        level = self.level
        self.__init__()  # type: ignore[misc]
        self.level, self.since = level, now


def prefix_figures(caches: Sequence[PrefixStats], span: int, one: bool) -> Dict[str, object]:
    """The summary keys of docs/model.md §8.3 over an observed span of ``span`` ns, for
    one engine's cache or several together (counts add up; ``cache_entries_max``
    is an engine's own only, ``one``)."""
    first_prompt = sum(c.first_prompt for c in caches)
    figures: Dict[str, object] = {
        "prefix_hit_tokens": sum(c.hit_tokens for c in caches),
        "prefix_hit_ratio": (sum(c.first_hits for c in caches) / first_prompt
                             if first_prompt else None),
        "recompute_hit_tokens": sum(c.restart_hits for c in caches),
        "evictions": sum(c.evictions for c in caches),
        "cache_blocks_mean": (sum(c.cache_area for c in caches) / span if span else None),
    }
    if one:
        figures["cache_entries_max"] = caches[0].entries_max
    return figures


def effective_load(caches: Sequence[PrefixStats], rate: Optional[float],
                   mean_prefill: Optional[float], mean_decode: Optional[float],
                   bmax: Optional[int], latency: Optional[LatencyModel]) -> Dict[str, object]:
    """Theorem 2's figures at the effective prompt ``E[vp] - E[hit]`` (the
    mean hit of the first starts in the observed span), beside the nominal
    ones (docs/model.md §8.3): ``lambda_star_effective`` (requests/s) and
    ``load_effective``; ``None`` where the workload's figures, the budget or
    any first start are missing."""
    starts = sum(c.first_starts for c in caches)
    figures: Dict[str, object] = {"lambda_star_effective": None, "load_effective": None}
    if not starts or mean_prefill is None or mean_decode is None or bmax is None:
        return figures
    hit = min(sum(c.first_hits for c in caches) / starts, mean_prefill)
    capacity = lambda_star_cached(bmax, mean_prefill, mean_decode, hit, latency)
    figures["lambda_star_effective"] = capacity
    if rate is not None:
        figures["load_effective"] = rate / capacity
    return figures
