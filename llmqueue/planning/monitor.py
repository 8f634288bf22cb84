"""What a replication of ``plan`` judges (docs/model.md §7.5, §7.7 item 3): each measured
request's thresholds (:func:`limits`; per class for per-class SLOs, relative
ones times the request's unloaded latency), the gated metrics it is already
certain to miss (:func:`_fails`), and the run's attainment so far
(:class:`Monitor`).

Only what is certain counts before a request finishes: no prefill done yet
past the TTFT limit, not finished past the E2E limit, TPOT already over its
limit, not scheduled yet past the scheduling-delay limit (a prompt's first chunk
is stamped when its iteration starts).  A finished request's largest gap and
scheduling delay come from its engine's recorder.  In joint mode the
attainment is the share of requests with no failed metric; in quantile mode
the least, over classes and gated metrics, of the share within the threshold.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, Hashable, List, Optional, Sequence, Tuple

import numpy as np

from llmqueue.planning.spec import EngineSpec
from llmqueue.policies.view import Request, output_tokens
from llmqueue.theory.bounds import unloaded_latency
from llmqueue.theory.slo import METRICS, SLO, SLOLike

#: The metrics ``plan`` gates, bit by bit.
GATED = METRICS
BIT = {m: 1 << i for i, m in enumerate(GATED)}
ALL = (1 << len(GATED)) - 1
UNLOADED = {"ttft": 0, "tpot": 1, "tbt": 2, "e2e": 3}  # the unloaded latency (docs/model.md §7.6)


def slo_of(slo: SLOLike, klass: Hashable) -> SLO:
    """The SLO that judges a request of class ``klass``."""
    return slo if isinstance(slo, SLO) else slo[klass]


def limits(slo: SLOLike, engine: EngineSpec, vp: np.ndarray, vd: np.ndarray,
           classes: Optional[Sequence[Hashable]] = None) -> Dict[str, np.ndarray]:
    """Each gated metric's threshold per request, in seconds (+inf where the
    request's SLO does not gate it; relative SLOs: the multiple times the
    request's unloaded latency, docs/model.md §7.6).  ``classes`` names each request's
    class when ``slo`` is per class."""
    n = len(vp)
    if isinstance(slo, SLO):
        groups = [(slo, np.ones(n, dtype=bool))]
    else:
        labels = [None] * n if classes is None else list(classes)
        groups = [(slo_of(slo, k), np.array([x == k for x in labels], dtype=bool))
                  for k in dict.fromkeys(labels)]
    cache: Dict[Tuple[int, int], Tuple[float, float, float, float]] = {}
    out: Dict[str, np.ndarray] = {}
    for metric in GATED:
        values = np.full(n, math.inf)
        for one, members in groups:
            limit = getattr(one, metric)
            if limit is None:
                continue
            if not one.is_relative:
                values[members] = float(limit)
                continue
            for i in np.flatnonzero(members).tolist():
                key = (int(vp[i]), int(vd[i]))
                if key not in cache:
                    u = unloaded_latency(engine.latency, engine.bmax, *key)
                    cache[key] = (u.ttft, u.tpot or 0.0, u.tbt_max or 0.0, u.e2e)
                values[i] = cache[key][UNLOADED[metric]] * limit
        if np.isfinite(values).any():
            out[metric] = values
    return out


def drain_limit(lims: Dict[str, np.ndarray], vd: np.ndarray) -> float:
    """The largest time threshold (s): of TTFT, E2E and scheduling delay, and
    TPOT or TBT times a request's ``vd - 1`` (the E2E part they limit)."""
    def top(x: np.ndarray) -> float:
        finite = x[np.isfinite(x)]
        return float(finite.max()) if finite.size else 0.0
    spans = [top(lims[m]) for m in ("ttft", "e2e", "sched_delay") if m in lims]
    for m in ("tpot", "tbt"):
        if m in lims:
            spans.append(top(lims[m] * np.maximum(vd - 1, 1)))
    return max(spans)


#: ``(first scheduled, tbt_max)`` ticks of a finished request, and when an
#: unfinished one was first scheduled (None: not yet).
Lookup = Callable[[Request], Tuple[Optional[int], Optional[int]]]
Scheduled = Callable[[Request], Optional[int]]


def _tpot(r: Request, end: int, first: int) -> float:
    """``r``'s TPOT if its first token came at ``first`` and its last at ``end``
    (ticks): the time between, over the tokens after the first; 0 for a request
    of one output token (it meets any TPOT threshold)."""
    after = output_tokens(r) - 1
    return (end - first) / 1e9 / after if after > 0 else 0.0


def _fails(r: Request, lim: Dict[str, float], now: int, final: bool, done: Lookup,
           scheduled: Scheduled) -> int:
    """Bits of the gated metrics ``r`` is already certain to miss at ``now``
    (ticks); ``final``: the run is over, so an unfinished request misses all."""
    bits = 0
    if r.finished is not None:
        if "ttft" in lim and r.first_token is not None and \
                (r.first_token - r.arrival) / 1e9 > lim["ttft"]:
            bits |= BIT["ttft"]
        if "tpot" in lim and r.first_token is not None and \
                _tpot(r, r.finished, r.first_token) > lim["tpot"]:
            bits |= BIT["tpot"]
        if "e2e" in lim and (r.finished - r.arrival) / 1e9 > lim["e2e"]:
            bits |= BIT["e2e"]
        if "tbt" in lim or "sched_delay" in lim:
            first, gap = done(r)
            if "tbt" in lim and gap is not None and gap / 1e9 > lim["tbt"]:
                bits |= BIT["tbt"]
            if "sched_delay" in lim and first is not None and \
                    (first - r.arrival) / 1e9 > lim["sched_delay"]:
                bits |= BIT["sched_delay"]
        return bits
    if final:
        return ALL
    age = (now - r.arrival) / 1e9
    if "ttft" in lim and r.prefill_done is None and age > lim["ttft"]:
        bits |= BIT["ttft"]
    if "tpot" in lim and r.first_token is not None and _tpot(r, now, r.first_token) > lim["tpot"]:
        bits |= BIT["tpot"]
    if "e2e" in lim and age > lim["e2e"]:
        bits |= BIT["e2e"]
    # a prompt's first chunk is stamped when its iteration starts (a request
    # without prompt only once its first decode is applied: judged at its end)
    if "sched_delay" in lim and r.vp and age > lim["sched_delay"] and scheduled(r) is None:
        bits |= BIT["sched_delay"]
    return bits


class Monitor:
    """The measured requests' verdicts, updated at each check."""

    def __init__(self, n_meas: int, lims: Dict[str, np.ndarray], mode: str,
                 classes: Optional[Sequence[Hashable]], done: Lookup,
                 scheduled: Scheduled) -> None:
        self.n = n_meas
        self.lims = lims
        self.mode = mode
        self.done = done
        self.scheduled = scheduled
        self.bits = np.zeros(n_meas, dtype=np.int64)
        self.decided = np.zeros(n_meas, dtype=bool)
        names = list(lims)
        columns = [lims[m].tolist() for m in names]
        #: each measured request's thresholds, by metric (those it gates)
        self.limit: List[Dict[str, float]] = [
            {m: x for m, x in zip(names, row) if x != math.inf} for row in zip(*columns)]
        #: quantile mode's groups: (members, metrics gated for them), one per class
        labels = [None] * n_meas if classes is None else list(classes)
        self.groups: List[Tuple[np.ndarray, List[str]]] = []
        for klass in dict.fromkeys(labels):
            members = np.array([x == klass for x in labels], dtype=bool)
            gated = [m for m in names if np.isfinite(lims[m][members]).any()]
            self.groups.append((members, gated))
        self.open: List[Tuple[int, Request]] = []

    def miss(self, measured: np.ndarray) -> None:
        """The measured requests of indices ``measured`` miss every metric, decided now:
        they can never fit the KV cache and are never served."""
        self.bits[measured] = ALL
        self.decided[measured] = True

    def check(self, now: int, final: bool = False) -> None:
        """Update the verdicts of the open requests."""
        still = []
        for j, r in self.open:
            bits = _fails(r, self.limit[j], now, final, self.done, self.scheduled)
            self.bits[j] |= bits
            if r.finished is not None or final:
                self.decided[j] = True
            else:
                still.append((j, r))
        self.open = still

    def attainment(self) -> float:
        """The run's attainment so far, an upper bound until every measured
        request is decided: the share of requests with no failed metric (joint)
        or the least share within one gated metric of one class (quantile)."""
        if self.mode == "joint":
            return 1.0 - int(np.count_nonzero(self.bits)) / self.n
        return min(1.0 - int(np.count_nonzero(self.bits[members] & BIT[m])) / int(members.sum())
                   for members, gated in self.groups for m in gated)

    def below(self, target: float) -> bool:
        """Whether more measured requests already fail than ``target`` allows
        (in quantile mode: in some class, for some metric)."""
        if self.mode == "joint":
            return int(np.count_nonzero(self.bits)) > allowed_failures(target, self.n)
        return any(int(np.count_nonzero(self.bits[members] & BIT[m]))
                   > allowed_failures(target, int(members.sum()))
                   for members, gated in self.groups for m in gated)

    def all_done(self, arrived: int) -> bool:
        """Every measured request has arrived and been decided."""
        return arrived >= self.n and not self.open


def allowed_failures(target: float, n_meas: int) -> float:
    """``(1 - target) n_meas``, rounded to 9 decimals (0.1 * 300 is 30, not
    29.999999999999993): a run stops once more measured requests fail."""
    return round((1 - target) * n_meas, 9)
