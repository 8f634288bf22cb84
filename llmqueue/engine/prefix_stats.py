"""What a run with a prefix cache reports (SPEC 10.3).

:class:`PrefixStats` is the running count one engine's cache keeps (the
engine's :class:`~llmqueue.engine.kv_recorder.MemoryRecorder` holds it, and
restarts it at the warm-up); :func:`prefix_figures` turns those of one or
several engines into the summary's keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Sequence


@dataclass
class PrefixStats:
    """The figures of SPEC 10.3 a run reports, over the observed span."""

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
    """The summary keys of SPEC 10.3 over an observed span of ``span`` ns, for
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


def mean_hit(caches: Sequence[PrefixStats]) -> Optional[float]:
    """Mean hit tokens of the first starts (``None`` before any)."""
    starts = sum(c.first_starts for c in caches)
    return sum(c.first_hits for c in caches) / starts if starts else None
