"""What a run with a KV cache reports (docs/model.md §6.7), recorded as it happens.

:class:`MemoryRecorder` keeps the KV in use as a step function of time (tokens
and blocks, changing at allocations, preemptions and releases) with exact
integer integrals for their time averages and the tokens' maximum (levels
held for a positive time, as the pending maximum), the per-iteration rows of the batch
log (:class:`KVBatch`), and the counters behind the summary figures.

Timing of the counts: preemptions count when they happen (at a batch
choice); the iteration rows, recomputed tokens and the iterations with a
preemption count when the iteration ends (as the batch counters do), and the
memory area of a request when it finishes.  A warm-up restart clears them all
but the levels.

A run of ``k`` identical iterations (the engine's skip-ahead) allocates the
same tokens and blocks at the start of each.  Where nothing can cut the run
or read its rows (no batch or time-series log, no early stop, after the
warm-up restart, before the horizon: :attr:`MemoryRecorder.announced_before`),
the scheduler books it once it has run (:meth:`MemoryRecorder.book`, in
closed form: most runs).  Otherwise :meth:`MemoryRecorder.allocate` announces
it when it starts and :meth:`MemoryRecorder.commit` books the allocations
and iteration ends that happened by a given time (the scheduler calls it
when the run ends, a warm-up restart in the middle of one): an ended run at
once, or, when a restart cuts it or a log wants its rows, step by step
through a ``_Run``.  Either way every figure is what stepping one iteration
at a time would give.  Arrivals never change the KV in use, so they need no
commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from llmqueue.common.units import UNLIMITED, to_seconds
from llmqueue.engine.kv import KV
from llmqueue.engine.kv_blocks import Growth
from llmqueue.engine.prefix_stats import prefix_figures
from llmqueue.engine.recorder import Recorder


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


@dataclass(slots=True)
class _Run:
    """``k`` iterations of ``t`` ticks from ``start``; the ``j``-th allocates up
    to ``tokens + j * dtokens`` tokens and :func:`_blocks_at` blocks."""

    start: int
    t: int
    k: int
    tokens: int
    blocks: int
    dtokens: int
    dblocks: Union[int, List[int]]
    preemptions: int
    recomputed: int
    starts: int
    allocated: int = 1
    done: int = 0
    due: int = 0
    """The time of the next allocation or iteration end to book."""


def _blocks_at(blocks: int, dblocks: Union[int, List[int]], j: int) -> int:
    """Blocks held after the ``j``-th allocation of a run whose first holds
    ``blocks`` and each further one ``dblocks`` more, or, when the blocks grow
    unevenly, the ``j``-th ``dblocks[j - 1]`` more than the first."""
    if isinstance(dblocks, list):
        return blocks + (dblocks[j - 1] if j else 0)
    return blocks + j * dblocks


def _rows(run: _Run, first: int, end: int) -> List[KVBatch]:
    """The batch-log rows of iterations ``first`` .. ``end - 1`` of ``run``
    (a function of its own: a generator inside a hot method makes the
    method's locals closure cells, slower on every call)."""
    return [KVBatch(run.tokens, run.blocks, run.preemptions, run.recomputed, run.starts)
            if j == 0 else
            KVBatch(run.tokens + j * run.dtokens, _blocks_at(run.blocks, run.dblocks, j),
                    0, 0, 0)
            for j in range(first, end)]


def _levels(start: int, t: int, first: int, last: int, tokens: int, dtokens: int,
            blocks: int, dblocks: Union[int, List[int]]) -> List[Tuple[int, int, int]]:
    """The time-series rows ``(time, tokens, blocks)`` of allocations ``first``
    .. ``last`` of a run (outside the hot method, as :func:`_rows`)."""
    return [(start + j * t, tokens + j * dtokens, _blocks_at(blocks, dblocks, j))
            for j in range(first, last + 1)]


class MemoryRecorder:
    """Running KV figures of one engine."""

    def __init__(self, kv: KV, batches: bool = False, timeseries: bool = False) -> None:
        self.kv = kv
        self.tokens = 0
        self.blocks = 0
        self.tokens_max = 0
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
        self._swaps()
        self.prefix: Any = None
        """A prefix cache's figures (:class:`~llmqueue.engine.prefix_cache.PrefixStats`)."""
        self._run: Optional[_Run] = None
        #: the current run, as :meth:`allocate` announced it (``_run`` once booked in part):
        #: (end, start, t, k, tokens, blocks, dtokens, dblocks, preemptions, recomputed,
        #: starts), a plain tuple (a named one costs a call per iteration)
        self._one: Optional[tuple] = None
        self.log: Optional[List[KVBatch]] = [] if batches else None
        self.series: Optional[List[Tuple[int, int, int]]] = [] if timeseries else None
        self.announced_before = UNLIMITED
        """A run of iterations that starts before this time (ns) is announced
        when it starts (:meth:`allocate`) and booked as its iterations end
        (:meth:`commit`), step by step if anything cuts it or wants its rows
        (the blocks of its iterations then come as a list); a later one is
        booked at once when it has run (:meth:`book`).  ``simulate`` moves it
        back to the warm-up restart where nothing else can cut a run or read
        its rows (no batch or time-series log, no early stop); the scheduler
        also announces a run that a horizon may cut."""

    def level(self, now: int, tokens: int, blocks: int, mark: bool = True) -> None:
        """KV in use changes to ``tokens`` tokens in ``blocks`` blocks at ``now``
        (``mark=False``: only extend the integrals to ``now``, no time-series point)."""
        span = now - self._t
        if span:
            self._tokens_area += self.tokens * span
            self._blocks_area += self.blocks * span
            self._t = now
            if self.tokens > self.tokens_max:
                self.tokens_max = self.tokens
        self.tokens = tokens
        self.blocks = blocks
        series = self.series
        if series is not None and mark:
            row = (now, tokens, blocks)
            if series and series[-1][0] == now:
                series[-1] = row
            else:
                series.append(row)

    def preempted(self, count: int) -> None:
        """``count`` residents were preempted now."""
        self.preemptions += count

    def _swaps(self) -> None:
        self.swap_outs = self.swapped_out_tokens = self.swap_ins = self.swapped_in_tokens = 0
        self.swap_fallbacks = self.swap_ticks = self.swap_max = 0

    def swapped_out(self, tokens: int, pool: int) -> None:
        """A victim's ``tokens`` KV tokens moved to the swap pool, which now holds ``pool``."""
        self.swap_outs += 1
        self.swapped_out_tokens += tokens
        self.swap_max = max(self.swap_max, pool)

    def swapped_in(self, tokens: int) -> None:
        """A swapped request's ``tokens`` KV tokens came back from the swap pool."""
        self.swap_ins += 1
        self.swapped_in_tokens += tokens

    def ignore(self) -> None:
        """A request that can never fit arrived and was rejected."""
        self.ignored += 1

    def allocate(self, now: int, tokens: int, blocks: int, preemptions: int, recomputed: int,
                 starts: int, t: int, k: int = 1, dtokens: int = 0,
                 dblocks: Growth = 0) -> None:
        """``k`` iterations of ``t`` ticks start at ``now``: the first holds
        ``tokens`` / ``blocks`` after its allocation, and its choice preempted
        ``preemptions`` residents and started ``starts``, and it recomputes
        ``recomputed`` tokens; each further one holds ``dtokens`` / ``dblocks``
        more (or, when ``dblocks`` is a list, the ``j``-th holds ``dblocks[j - 1]``
        blocks more than the first) and preempts, starts and recomputes nothing."""
        self.level(now, tokens, blocks)
        self._one = (now + k * t, now, t, k, tokens, blocks, dtokens, dblocks, preemptions,
                     recomputed, starts)

    def commit(self, now: int) -> None:
        """Book the allocations and iteration ends of the current run up to ``now``."""
        one = self._one
        if one is not None:
            if one[3] == 1:  # one iteration (most runs): booked when it ends
                if now >= one[0]:
                    self._one = None
                    self.ended(one[9], one[8])
                    if self.log is not None:
                        self.log.append(KVBatch(one[4], one[5], one[8], one[9], one[10]))
                return
            end, start, t, k, tokens, blocks, dtokens, dblocks, preemptions, recomputed, \
                starts = one
            self._one = None
            if now < end or self.log is not None:
                # within the run (a warm-up restart), or batch-log rows: step by step
                assert not isinstance(dblocks, tuple), "a run cut or logged gets a list"
                self._run = _Run(start, t, k, tokens, blocks, dtokens, dblocks, preemptions,
                                 recomputed, starts, due=start + t)
            else:  # the whole run at once (most announced runs)
                self.ended(recomputed, preemptions)
                self.book(start, t, 1, k - 1, tokens, dtokens, blocks, dblocks)
                return
        run = self._run
        if run is None or now < run.due:
            return
        start, t = run.start, run.t
        last = min(run.k - 1, (now - start) // t)  # the last allocation by now
        first = run.allocated
        if last >= first:
            self.book(start, t, first, last, run.tokens, run.dtokens, run.blocks, run.dblocks)
            run.allocated = last + 1
        done = min(run.k, (now - start) // t)
        if done > run.done:
            if run.done == 0:
                self.ended(run.recomputed, run.preemptions)
            if self.log is not None:
                self.log.extend(_rows(run, run.done, done))
            run.done = done
            if done == run.k:
                self._run = None
        run.due = start + min(run.allocated, run.done + 1) * t

    def ended(self, recomputed: int, preemptions: int) -> None:
        """The first iteration of a run ended: it recomputed ``recomputed``
        tokens, and its choice preempted ``preemptions`` residents."""
        self.recomputed += recomputed
        if preemptions:
            self.preempted_iterations += 1

    def book(self, start: int, t: int, first: int, last: int, tokens: int, dtokens: int,
             blocks: int, dblocks: Growth) -> None:
        """Book allocations ``first - 1`` .. ``last - 1`` of a run from ``start``
        (of ``tokens`` / ``blocks`` growing by ``dtokens`` / ``dblocks``), each
        held until the next, and make allocation ``last`` the level: the
        current level, allocation ``first - 1`` (with ``first = 0``: the level
        before the run), is held from the last change to ``start + first * t``,
        the next ``last - first`` for ``t`` each (:meth:`level` once for all of
        them, in closed form).  The scheduler calls it with ``first = 0`` for a
        run it was not asked to announce, once the run has ended (nothing cut
        it, no row of it is wanted, nothing read the KV in use while it ran):
        :meth:`allocate` and :meth:`commit` of the whole run at once."""
        span = start + first * t - self._t
        count = last - first  # allocations held for a whole iteration
        js = (first + last - 1) * count // 2  # Σ j over first .. last - 1
        if isinstance(dblocks, tuple):  # a whole run's sum and total (kv_blocks.block_growth)
            grown, final = dblocks[0], blocks + dblocks[1]
        elif isinstance(dblocks, list):
            grown = sum(dblocks[max(first - 1, 0):last - 1])
            final = blocks + dblocks[last - 1] if last else blocks
        else:
            grown, final = dblocks * js, blocks + last * dblocks
        self._tokens_area += self.tokens * span + t * (count * tokens + dtokens * js)
        self._blocks_area += self.blocks * span + t * (count * blocks + grown)
        high = self.tokens if span else 0  # the maximum counts levels held a positive time
        if count:  # the run's never fall: the last one held a whole iteration is its top
            top = tokens + (last - 1) * dtokens
            if top > high:
                high = top
        if high > self.tokens_max:
            self.tokens_max = high
        if self.series is not None:  # its runs are announced, their blocks listed
            assert first and not isinstance(dblocks, tuple), "series rows: announced, listed"
            self.series.extend(_levels(start, t, first, last, tokens, dtokens, blocks, dblocks))
        self._t = start + last * t
        self.tokens = tokens + last * dtokens
        self.blocks = final

    def released(self, now: int, tokens: int, blocks: int, count: int, areas: int) -> None:
        """``count`` requests finished at ``now``, having held ``areas``
        token-iterations of KV in all, and the KV in use fell to ``tokens``
        tokens in ``blocks`` blocks."""
        self.level(now, tokens, blocks)
        self.area_sum += areas
        self.area_count += count

    def restart(self, now: int) -> None:
        """Forget everything before ``now`` but the levels (warm-up deletion)."""
        self.commit(now)
        self.level(now, self.tokens, self.blocks, False)
        self._origin = now
        self._tokens_area = self._blocks_area = 0
        self.tokens_max = 0
        self.preemptions = self.preempted_iterations = self.recomputed = self.ignored = 0
        self.area_sum = self.area_count = 0
        self._swaps()
        if self.prefix is not None:
            self.prefix.restart(now)

    def close(self, end: int) -> None:
        """Extend the integrals to ``end``."""
        self.level(end, self.tokens, self.blocks, False)
        if self.prefix is not None:
            self.prefix.set_level(end, self.prefix.level)


def memory_figures(engines: Sequence[Recorder], end: int) -> Dict[str, object]:
    """The summary figures of docs/model.md §6.7 over ``[origin, end]`` of an
    engine with a KV cache (its :class:`Recorder`, whose ``memory`` is a
    :class:`MemoryRecorder`), or of several such engines together (a pool or
    a network's total): counts and integrals add up, utilization is of all
    their blocks, and the maxima (of the KV in use, of the swap pool), which
    are not those of a sum, are an engine's own only."""
    recorders: List[MemoryRecorder] = [e.memory for e in engines]
    completed = sum(e.completed for e in engines)
    batches = sum(e.batches for e in engines)
    processed = sum(e.decode_tokens + e.prefill_tokens for e in engines)
    origins = {r._origin for r in recorders}
    assert len(origins) == 1, "engines of one clock restart together"
    span = end - origins.pop()
    seconds = to_seconds(span)
    preemptions = sum(r.preemptions for r in recorders)
    recomputed = sum(r.recomputed for r in recorders)
    counted = sum(r.area_count for r in recorders)
    figures: Dict[str, object] = {
        "throughput_requests_per_s": completed / seconds if span else None,
        "preemptions": preemptions,
        "preemptions_per_iteration": preemptions / batches if batches else None,
        "iterations_with_preemption": (sum(r.preempted_iterations for r in recorders)
                                       / batches if batches else None),
        "recomputed_tokens": recomputed,
        "recompute_fraction": recomputed / processed if processed else None,
        "kv_mean": sum(r._tokens_area for r in recorders) / span if span else None,
    }
    if len(recorders) == 1:
        figures["kv_max"] = recorders[0].tokens_max
    figures.update(
        kv_utilization=(sum(r._blocks_area for r in recorders) / span
                        / sum(r.kv.blocks for r in recorders) if span else None),
        ignored=sum(r.ignored for r in recorders),
        memory_area_mean=sum(r.area_sum for r in recorders) / counted if counted else None)
    swapping = [r for r in recorders if r.kv.preemption == "swap"]
    if swapping:  # kv_swap's figures, only where it swaps
        figures.update(swap_outs=sum(r.swap_outs for r in swapping),
                       swapped_out_tokens=sum(r.swapped_out_tokens for r in swapping),
                       swap_ins=sum(r.swap_ins for r in swapping),
                       swapped_in_tokens=sum(r.swapped_in_tokens for r in swapping),
                       swap_fallbacks=sum(r.swap_fallbacks for r in swapping),
                       swap_seconds=to_seconds(sum(r.swap_ticks for r in swapping)))
        if len(recorders) == 1:
            figures["swap_max"] = recorders[0].swap_max
    caches = [r.prefix for r in recorders if r.prefix is not None]
    if caches:  # a prefix cache's (docs/model.md §8.3)
        figures.update(prefix_figures(caches, span, len(recorders) == 1))
        figures["prefill_computed_tokens"] = sum(e.prefill_tokens for e in engines)
    return figures
