"""Per-request token timing (docs/model.md §7.5): each request's scheduling delay and
largest inter-token gap (``tbt_max``), and a histogram of every inter-token gap.

The residents never touch decoders served together one by one (the shared
decode clock of :mod:`llmqueue.engine.residents`), and their gaps are kept the
same way, at a cost of O(changes):

* the **decode iterations** (those with any decode token) are numbered; a
  decoder served in every decode iteration since number ``a`` (its *anchor*) is
  **continuous**: its gaps since are the gaps between consecutive decode
  iterations' ends.  Those go to a stack of maxima (number, gap), strictly
  decreasing, so its largest gap since ``a`` is one bisection away.  A run of
  ``k`` iterations adds at most two entries (its first gap, and the largest of
  the others): no anchor falls inside a run;
* a decoder that joins (new, or back after a preemption) or that a partial
  batch leaves out is **broken**: it keeps its own last token time until a decode
  iteration serves it again, which settles its gap on its own and makes it
  continuous;
* a request's largest gap is settled (**synced**) when it breaks, leaves the
  decoders (preemption) or finishes.

So a full decode batch costs O(1) plus the broken decoders it serves, and a
partial one O(1) per decoder it leaves out or serves broken (plus a set of its
members, built in C).  Gaps are counted exactly by length in ticks (``counts``)
and moved into a 1 %-binned :class:`~llmqueue.theory.histogram.GapHistogram`
whenever more than :data:`FLUSH` lengths are held, so memory stays bounded.

The scheduling delay is the start of the first iteration holding any of the
request's tokens (a prefill chunk, or the first decode of a request without
prompt).  Under a KV cache, recomputed prompt tokens are not tokens, but the
decode iterations of a request re-decoding after a ``scratch`` restart are: the
gap that spans a preemption runs to its first decode after it.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from llmqueue.policies.view import Request
from llmqueue.theory.histogram import GapHistogram

#: Distinct gap lengths held exactly before they are binned.
FLUSH = 4096


class _Times:
    """One request's token timing (ticks; ``anchor`` a decode iteration number,
    None unless it is a continuous decoder)."""

    __slots__ = ("scheduled", "last", "anchor", "tbt")

    def __init__(self) -> None:
        self.scheduled: Optional[int] = None
        self.last: Optional[int] = None
        self.anchor: Optional[int] = None
        self.tbt = 0


class TokenTimes:
    """Scheduling delays, largest gaps and the gap histogram of one engine."""

    def __init__(self) -> None:
        self.records: Dict[Request, _Times] = {}
        """Timing of the requests scheduled or decoding, until they finish."""
        self.iterations = 0
        """Decode iterations so far."""
        self.last_end: Optional[int] = None
        """End of the last decode iteration (ticks)."""
        self.counts: Dict[int, int] = {}
        """Gaps counted exactly, by length (ticks)."""
        self.histogram = GapHistogram()
        """Gaps moved out of :attr:`counts` (seconds, 1 % bins)."""
        self._at: List[int] = []
        self._gap: List[int] = []
        self._broken: Dict[Request, _Times] = {}
        self._prune = 64

    def _record(self, r: Request) -> _Times:
        rec = self.records.get(r)
        if rec is None:
            rec = self.records[r] = _Times()
        return rec

    # -- events of the residents -------------------------------------------
    def schedule(self, r: Request, start: int) -> None:
        """``r`` is in the iteration starting at ``start``."""
        rec = self.records.get(r)
        if rec is None:
            rec = self.records[r] = _Times()
            rec.scheduled = start
        elif rec.scheduled is None:
            rec.scheduled = start

    def join(self, r: Request) -> None:
        """``r`` joins the decoders."""
        rec = self.records.get(r)
        self._broken[r] = rec if rec is not None else self._record(r)

    def first(self, r: Request, at: int) -> None:
        """``r``'s first token came at ``at`` with its prefill (``first_token=
        "prefill"``): its first gap runs from there to its first decode."""
        self._record(r).last = at

    def leave(self, r: Request) -> None:
        """``r`` leaves the decoders without finishing (a preemption)."""
        rec = self.records.get(r)
        if rec is not None:
            self._sync(rec)
            rec.anchor = None
            self._broken.pop(r, None)

    def decode(self, served: Sequence[Request], decoders: Sequence[Request], k: int,
               first_end: int, end: int, t: int, times: Optional[Sequence[int]]) -> None:
        """A run of ``k`` iterations gave ``served`` (all of ``decoders``, or
        some) a token each; its first ends at ``first_end``, its last at
        ``end``; each lasts ``t`` (or ``times[j]``)."""
        counts, broken = self.counts, self._broken
        n0 = self.iterations
        m = len(served)
        if k == 1 and not broken and m == len(decoders):  # the usual step, in short
            gap = first_end - self.last_end  # type: ignore[operator]  # they decoded before
            counts[gap] = counts.get(gap, 0) + m
            if self._gap and self._gap[-1] == gap:
                self._at[-1] = n0 + 1
            else:
                self._push(n0 + 1, gap)
            self.iterations = n0 + 1
            self.last_end = end
            return
        unserved: Sequence[Request] = ()
        if m != len(decoders):
            # the usual partial batch is the oldest decoders (a prefix, compared in C)
            unserved = decoders[m:] if decoders[:m] == served else \
                list(set(decoders).difference(served))
            last_end, records, at, values = self.last_end, self.records, self._at, self._gap
            for r in unserved:
                rec = records.get(r)
                if rec is None:
                    broken[r] = self._record(r)
                elif rec.anchor is not None:  # continuous: it breaks (_sync, inline)
                    if n0 > rec.anchor:
                        i = bisect_left(at, rec.anchor + 1)
                        if i < len(values) and values[i] > rec.tbt:
                            rec.tbt = values[i]
                    rec.last = last_end
                    rec.anchor = None
                    broken[r] = rec
        own = 0
        if broken:
            if unserved:
                skipped = set(unserved)
                back = [(r, rec) for r, rec in broken.items() if r not in skipped]
            else:
                back = list(broken.items())
            for r, rec in back:
                del broken[r]
                own += 1
                last = rec.last
                if last is not None:
                    gap = first_end - last
                    counts[gap] = counts.get(gap, 0) + 1
                    if gap > rec.tbt:
                        rec.tbt = gap
                rec.last = first_end
                rec.anchor = n0 + 1
        if own < m:
            gap = first_end - self.last_end  # type: ignore[operator]  # continuous ones exist
            counts[gap] = counts.get(gap, 0) + m - own
            values = self._gap
            if values and values[-1] == gap:
                self._at[-1] = n0 + 1  # the common case of _push: the same gap again
            else:
                self._push(n0 + 1, gap)
        if k > 1:
            if times is None:
                counts[t] = counts.get(t, 0) + m * (k - 1)
                if self._gap and self._gap[-1] == t:
                    self._at[-1] = n0 + k  # the same gap again
                else:
                    self._push(n0 + k, t)
            else:
                for tj in times[1:]:
                    counts[tj] = counts.get(tj, 0) + m
                self._push(n0 + k, max(times[1:]))
        self.iterations = n0 + k
        self.last_end = end
        if len(counts) > FLUSH:
            self.flush()

    def finish(self, r: Request) -> Tuple[Optional[int], int]:
        """``r`` produced its last token: its first scheduled time and its
        largest gap (0 without any), both ticks; its record is dropped."""
        rec = self.records.pop(r, None)
        if rec is None:
            return None, 0
        if rec.anchor is None:  # broken: a partial batch left it out before its last token
            self._broken.pop(r, None)
        elif self.iterations > rec.anchor:
            self._sync(rec)
        return rec.scheduled, rec.tbt

    def scheduled(self, r: Request) -> Optional[int]:
        """When unfinished ``r`` was first scheduled (None: not yet)."""
        rec = self.records.get(r)
        return None if rec is None else rec.scheduled

    # -- the stack of gap maxima -------------------------------------------
    def _push(self, at: int, gap: int) -> None:
        values, marks = self._gap, self._at
        while values and values[-1] <= gap:
            values.pop()
            marks.pop()
        marks.append(at)
        values.append(gap)
        if len(values) > self._prune:
            self._drop_old()

    def _drop_old(self) -> None:
        """Forget maxima at or before every anchor (no query reaches them)."""
        oldest = min((rec.anchor for rec in self.records.values() if rec.anchor is not None),
                     default=self.iterations)
        cut = bisect_left(self._at, oldest + 1)
        del self._at[:cut], self._gap[:cut]
        self._prune = 2 * len(self._gap) + 64

    def _sync(self, rec: _Times) -> None:
        """Settle a continuous decoder's largest gap up to the last decode iteration."""
        anchor, now = rec.anchor, self.iterations
        if anchor is None or now <= anchor:
            return
        i = bisect_left(self._at, anchor + 1)
        if i < len(self._gap) and self._gap[i] > rec.tbt:
            rec.tbt = self._gap[i]
        rec.last = self.last_end
        rec.anchor = now

    # -- the histogram -----------------------------------------------------
    def flush(self) -> None:
        """Move the exact counts into :attr:`histogram`."""
        if self.counts:
            self.histogram.add_many(np.fromiter(self.counts, dtype=float) / 1e9,
                                    np.fromiter(self.counts.values(), dtype=np.int64))
        self.counts = {}

    def gaps(self) -> GapHistogram:
        """Every gap counted since the last :meth:`restart`, binned."""
        self.flush()
        return self.histogram

    def quantile(self, q: float) -> Optional[float]:
        """The ``q``-quantile of every gap counted since the last :meth:`restart`
        (seconds; None without any): the exact order statistic while no more
        than :data:`FLUSH` lengths were seen, else the histogram's (within
        0.5 %, :meth:`GapHistogram.quantile`)."""
        if self.histogram.count:
            self.flush()
            return self.histogram.quantile(q)
        counts = self.counts
        total = sum(counts.values())
        if not total:
            return None
        rank = max(1, math.ceil(round(q * total, 9)))
        seen = 0
        for ticks in sorted(counts):
            seen += counts[ticks]
            if seen >= rank:
                return ticks / 1e9
        return None  # not reached: the counts sum to total

    def restart(self) -> None:
        """Forget the gaps counted so far (warm-up deletion); the requests'
        own records stay."""
        self.counts = {}
        self.histogram = GapHistogram()
