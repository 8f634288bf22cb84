"""What a run with a KV cache reports (SPEC 7.7), recorded as it happens.

:class:`MemoryRecorder` keeps the KV in use as a step function of time (tokens
and blocks, changing at allocations, preemptions and releases) with exact
integer integrals for its time average and its maximum (levels held for a
positive time, as the pending maximum), the per-iteration rows of the batch
log (:class:`KVBatch`), and the counters behind the summary figures.

Timing of the counts: preemptions count when they happen (at a batch
choice); the iteration rows, recomputed tokens and the iterations with a
preemption count when the iteration ends (as the batch counters do), and the
memory area of a request when it finishes.  A warm-up restart clears them all
but the levels.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

from llmqueue.common.units import to_seconds
from llmqueue.engine.kv import KV


class KVBatch(NamedTuple):
    """What memory did in one iteration (aligned with the batch log)."""

    kv_tokens: int
    """KV tokens held after this iteration's allocation."""
    kv_blocks: int
    """Blocks held (reservations included) after this iteration's allocation."""
    preemptions: int
    """Residents preempted while this iteration's batch was chosen."""
    recomputed_tokens: int
    """Tokens of this iteration that re-process positions processed before."""
    new_starts: int
    """Residents that took KV for the first time (since admission or preemption)."""


class MemoryRecorder:
    """Running KV figures of one engine."""

    def __init__(self, kv: KV, batches: bool = False, timeseries: bool = False) -> None:
        self.kv = kv
        self.tokens = 0
        self.blocks = 0
        self.tokens_max = 0
        self.blocks_max = 0
        self._t = 0
        self._origin = 0
        self._tokens_area = 0
        self._blocks_area = 0
        self.preemptions = 0
        self.preempted_iterations = 0
        self.recomputed = 0
        self.ignored = 0
        self.area_sum = 0
        self.area_count = 0
        self._row: Optional[KVBatch] = None
        self.log: Optional[List[KVBatch]] = [] if batches else None
        self.series: Optional[List[Tuple[int, int, int]]] = [] if timeseries else None

    def _advance(self, now: int) -> None:
        span = now - self._t
        if span:
            self._tokens_area += self.tokens * span
            self._blocks_area += self.blocks * span
            self._t = now
            if self.tokens > self.tokens_max:
                self.tokens_max = self.tokens
            if self.blocks > self.blocks_max:
                self.blocks_max = self.blocks

    def level(self, now: int, tokens: int, blocks: int) -> None:
        """KV in use changes to ``tokens`` tokens in ``blocks`` blocks at ``now``."""
        self._advance(now)
        self.tokens = tokens
        self.blocks = blocks
        series = self.series
        if series is not None:
            row = (now, tokens, blocks)
            if series and series[-1][0] == now:
                series[-1] = row
            else:
                series.append(row)

    def preempted(self, count: int) -> None:
        """``count`` residents were preempted now."""
        self.preemptions += count

    def ignore(self) -> None:
        """A request that can never fit arrived and was rejected."""
        self.ignored += 1

    def allocate(self, now: int, tokens: int, blocks: int, row: KVBatch) -> None:
        """An iteration starts at ``now`` holding ``tokens`` / ``blocks``."""
        self.level(now, tokens, blocks)
        self._row = row

    def iteration_done(self) -> None:
        """The iteration announced by :meth:`allocate` ended."""
        row = self._row
        if row is None:
            return
        self._row = None
        self.recomputed += row.recomputed_tokens
        if row.preemptions:
            self.preempted_iterations += 1
        if self.log is not None:
            self.log.append(row)

    def finished(self, area: int) -> None:
        """A request finished having held ``area`` token-iterations of KV."""
        self.area_sum += area
        self.area_count += 1

    def restart(self, now: int) -> None:
        """Forget everything before ``now`` but the levels (warm-up deletion)."""
        self._advance(now)
        self._origin = now
        self._tokens_area = self._blocks_area = 0
        self.tokens_max = self.blocks_max = 0
        self.preemptions = self.preempted_iterations = self.recomputed = self.ignored = 0
        self.area_sum = self.area_count = 0

    def close(self, end: int) -> None:
        """Extend the integrals to ``end``."""
        self._advance(end)

    def figures(self, end: int, completed: int, batches: int, processed: int
                ) -> Dict[str, object]:
        """The summary figures of SPEC 7.7 and 9 over ``[origin, end]``, given the
        run's completed requests, iterations and processed tokens there."""
        span = end - self._origin
        seconds = to_seconds(span)
        return {
            "throughput_requests_per_s": completed / seconds if span else None,
            "preemptions": self.preemptions,
            "preemptions_per_iteration": self.preemptions / batches if batches else None,
            "iterations_with_preemption": (self.preempted_iterations / batches
                                           if batches else None),
            "recomputed_tokens": self.recomputed,
            "recompute_fraction": self.recomputed / processed if processed else None,
            "kv_mean": self._tokens_area / span if span else None,
            "kv_max": self.tokens_max,
            "kv_utilization": (self._blocks_area / span / self.kv.blocks if span else None),
            "ignored": self.ignored,
            "memory_area_mean": self.area_sum / self.area_count if self.area_count else None,
        }
