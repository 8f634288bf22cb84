"""The prefix cache of one engine (docs/model.md §8.1-8.2): KV blocks shared by
requests whose prompts begin with the same content.

A request may carry content ids (:class:`PrefixRequest`): one per hash block
of ``H`` tokens, by position (id ``j`` stands for its first ``(j + 1) H``
tokens), its prompt's first, then those of the blocks its decode tokens fill.
The cache keeps an :class:`Entry` per hash block that some request computed
whole: its id, how many residents hold it (``count``) and, once none does,
when it was last used.  An entry held by nobody is *evictable*: it keeps its
content and its ``m = H / B`` KV blocks count as free; an allocation that
finds too few empty blocks evicts the least recently used first (on equal
times the deeper block, as vLLM frees a request's blocks tail first, then the
older entry).

The memory identity: blocks in use = ``m`` x (entries held by someone) +
every started resident's own blocks (its KV not covered by the entries it
holds), and free = empty + ``m`` x evictable entries
(:meth:`PrefixCache.check`).

Where docs/model.md §8 is silent (the contract the reference stepper shares):

* the hit a policy sees for an unstarted request (its prefill left is its
  prompt less the hit) is the hit it gets at its start: evictions wait until
  the batch choice has started and allocated (:meth:`PrefixCache.settle`), so
  a start never loses an entry it was shown;
* a start's check counts ``m`` blocks for each evictable entry it revives and
  none for entries others hold; a victim frees its own blocks and the entries
  only it (and the gate call's earlier victims) held (:class:`GateKV`);
* entries are made when an iteration's progress is applied, for the requests
  served in the plan's order (decodes, then prefill chunks), each in
  position order, before that instant's releases;
* a request whose prompt arrived prefilled (``Engine.call(prefilled=True)``)
  looks nothing up; ``preemption="swap"`` is refused with ``prefix=True``.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Dict, Hashable, List, Optional, Sequence, Tuple

from llmqueue.common import validation
from llmqueue.engine.kv import KV
from llmqueue.engine.kv_residents import Held
from llmqueue.engine.prefix_stats import PrefixStats
from llmqueue.policies.view import Request


class PrefixRequest(Request):
    """A request with content ids for prefix caching (docs/model.md §8.1)."""

    __slots__ = ("ids", "hash_block", "session")

    def __init__(self, rid: Hashable, vp: int, vd: int, klass: Hashable = None, *,
                 ids: Tuple[Hashable, ...], hash_block: int, session: Hashable = None,
                 prefilled: bool = False) -> None:
        super().__init__(rid, vp, vd, klass, prefilled=prefilled)
        self.ids = ids
        """Content ids by position: its prompt's whole hash blocks, then its output's."""
        self.hash_block = hash_block
        """``H``: tokens per id."""
        self.session = session
        """The session it is a turn of (``Sessions``), or ``None``."""


def prefix_request(rid: Hashable, vp: int, vd: int, klass: Hashable = None,
                   blocks: Optional[Sequence[Hashable]] = None,
                   out_blocks: Optional[Sequence[Hashable]] = None,
                   hash_block: Optional[int] = None, session: Hashable = None,
                   prefilled: bool = False) -> Request:
    """The request of an arrival: a plain :class:`Request` without ids, else a
    :class:`PrefixRequest` whose ids are the prompt's first ``vp // H`` ids
    (a last id covering part of a block, as in Mooncake's files, is dropped)
    followed by ``out_blocks``.

    Examples:
        >>> r = prefix_request(0, 40, 20, blocks=(7, 8, 9), out_blocks=(5,), hash_block=16)
        >>> r.ids  # 40 tokens hold two whole blocks of 16; the third id is partial
        (7, 8, 5)
    """
    if blocks is None and out_blocks is None:
        return Request(rid, vp, vd, klass, prefilled=prefilled)
    if hash_block is None:
        raise ValueError(f"request {rid} carries block ids but no hash_block (tokens per id); "
                         "allowed: a positive integer")
    h = validation.positive_int("hash_block", hash_block)
    ids = tuple(blocks or ())[:vp // h] + tuple(out_blocks or ())
    return PrefixRequest(rid, vp, vd, klass, ids=ids, hash_block=h, session=session,
                         prefilled=prefilled)


def check_request(r: Request, kv: Optional[KV]) -> None:
    """Refuse a request with ids on an engine without a prefix cache, or
    whose hash block is not a whole number of the cache's KV blocks."""
    if not isinstance(r, PrefixRequest):
        return
    if kv is None or not kv.prefix:
        raise ValueError(f"request {r.rid} carries prefix block ids but the engine has no "
                         "prefix cache; allowed: kv=KV(..., prefix=True) (--set prefix=on "
                         "with kv=), or a workload without ids")
    if r.hash_block % kv.block_size:
        raise ValueError(f"hash_block must be a multiple of the KV block size "
                         f"(kv_block={kv.block_size}); got hash_block={r.hash_block}")


@dataclass(slots=True)
class PrefixHeld(Held):
    """A request's KV record under a prefix cache: :class:`Held` and its hits."""

    prompt: int = 0
    """The prompt it must compute at its next start (``vp``, or ``vp + d``)."""
    hit: int = 0
    """Hit tokens of its current incarnation (while unstarted: what a start would get now)."""
    entries: List["Entry"] = field(default_factory=list)
    """The cache entries it holds."""
    cached: Optional[int] = None
    """Its first start's hit (``cached_tokens``); ``None`` until it starts."""


@dataclass(slots=True, eq=False)
class Entry:
    """One cached hash block."""

    key: Hashable
    """Its content id."""
    depth: int
    """Its position ``j`` (it covers tokens ``[j H, (j + 1) H)``)."""
    created: int
    """Creation number (the last tie-break of eviction)."""
    count: int = 1
    """Residents holding it; 0: evictable."""
    stamp: int = 0
    """How many times it became evictable (marks stale heap rows)."""


class PrefixCache:
    """The entries of one engine's prefix cache and their LRU order."""

    def __init__(self, kv: KV) -> None:
        self.kv = kv
        self.hash_block: Optional[int] = None
        self.m = 0
        """KV blocks per entry (``H / B``), set by the first request with ids."""
        self.entries: Dict[Hashable, Entry] = {}
        self.evictable = 0
        self._lru: List[Tuple[int, int, int, int, Entry]] = []
        self._created = 0
        self.stats = PrefixStats()
        self.changed = False
        """Whether an entry was revived or evicted since the last proposal
        (a later choice may then differ: no skip-ahead)."""

    def adopt(self, r: PrefixRequest) -> None:
        """Learn ``H`` from ``r`` (one engine's requests share one)."""
        if self.hash_block is None:
            self.hash_block = r.hash_block
            self.m = r.hash_block // self.kv.block_size
        elif r.hash_block != self.hash_block:
            raise ValueError(f"hash_block must be the same for every request of an engine "
                             f"(its cache is cut in blocks of {self.hash_block} tokens); got "
                             f"{r.hash_block} for request {r.rid}")

    # -- reading ---------------------------------------------------------
    def lookup(self, r: Request, prompt: int) -> int:
        """Hit tokens ``r`` gets now at a start computing ``prompt`` tokens:
        whole hash blocks of its leading ids that are cached, at most
        ``prompt - 1`` tokens."""
        ids = getattr(r, "ids", None)
        if not ids or prompt <= 1:
            return 0
        h = self.hash_block
        if h is None:
            return 0
        most = min(len(ids), (prompt - 1) // h)
        entries = self.entries
        k = 0
        while k < most and ids[k] in entries:
            k += 1
        return k * h

    def hits(self, r: PrefixRequest, hit: int) -> List[Entry]:
        """The entries behind ``hit`` tokens of ``r``'s (a lookup's result)."""
        entries = self.entries
        return [entries[key] for key in r.ids[:hit // self.hash_block]]  # type: ignore[operator]

    # -- changing --------------------------------------------------------
    def hold(self, entries: Sequence[Entry], now: int) -> int:
        """A start takes ``entries``; returns how many it revived (were evictable)."""
        revived = 0
        for e in entries:
            if e.count == 0:
                revived += 1
            e.count += 1
        if revived:
            self.evictable -= revived
            self.stats.set_level(now, self.evictable * self.m)
            self.changed = True
        return revived

    def insert(self, r: PrefixRequest, old: int, new: int, held: List[Entry]) -> int:
        """``r``'s KV grew from ``old`` to ``new`` tokens: each hash block it
        completed with an id nobody cached becomes an entry it holds (appended
        to ``held``); returns how many."""
        h = self.hash_block
        ids = r.ids
        top = min(new // h, len(ids))  # type: ignore[operator]
        made = 0
        entries = self.entries
        for j in range(old // h, top):  # type: ignore[operator]
            key = ids[j]
            if key not in entries:
                e = Entry(key, j, self._created)
                self._created += 1
                entries[key] = e
                held.append(e)
                made += 1
        if made and len(entries) > self.stats.entries_max:
            self.stats.entries_max = len(entries)
        return made

    def release(self, held: Sequence[Entry], now: int) -> int:
        """A resident gives back ``held``; returns how many became evictable."""
        freed = 0
        lru = self._lru
        for e in held:
            e.count -= 1
            if e.count == 0:
                e.stamp += 1
                heapq.heappush(lru, (now, -e.depth, e.created, e.stamp, e))
                freed += 1
        if freed:
            self.evictable += freed
            self.stats.set_level(now, self.evictable * self.m)
        return freed

    def settle(self, free: int, now: int) -> None:
        """Evict least recently used entries until the empty blocks (``free``
        less the evictable entries' blocks) are not negative."""
        m, lru, entries = self.m, self._lru, self.entries
        evicted = 0
        while free - self.evictable * m < 0:
            _, _, _, stamp, e = heapq.heappop(lru)
            if e.count or e.stamp != stamp:
                continue  # revived since, or pushed again later
            del entries[e.key]
            self.evictable -= 1
            evicted += 1
        if evicted:
            self.stats.evictions += evicted
            self.stats.set_level(now, self.evictable * m)
            self.changed = True
        if len(lru) > 2 * self.evictable + 64:
            self._lru = [row for row in lru if not row[4].count and row[4].stamp == row[3]]
            heapq.heapify(self._lru)

    def check(self, residents: Sequence[Request], free: int) -> None:
        """docs/model.md §8.2's invariants: counts equal the residents holding each
        entry, no evictable entry is held, and free covers the evictable ones."""
        counts: Dict[int, int] = {}
        for r in residents:
            for e in r.memory.entries:
                counts[id(e)] = counts.get(id(e), 0) + 1
        evictable = 0
        for e in self.entries.values():
            if e.count != counts.get(id(e), 0):
                raise AssertionError(f"entry {e.key!r} counts {e.count} holders; "
                                     f"{counts.get(id(e), 0)} residents hold it")
            evictable += e.count == 0
        if evictable != self.evictable or free < self.evictable * self.m:
            raise AssertionError(f"{evictable} evictable entries (counted {self.evictable}) "
                                 f"of {self.m} blocks each with {free} blocks free")


class GateKV:
    """The cache settings as the KV gate reads them for one gate call, with
    prefix caching's block counts: a new start needs the blocks past its hit
    and revives the evictable entries of its hit (once per call); a victim
    frees its own blocks and the entries nobody else holds."""

    def __init__(self, kv: KV, cache: PrefixCache) -> None:
        self.kv, self.cache = kv, cache
        self.block_size, self.admission, self.reserve = kv.block_size, kv.admission, kv.reserve
        self.preemption, self.blocks, self.prefix = kv.preemption, kv.blocks, True
        self._revived: set = set()
        self._dropped: Dict[int, int] = {}

    def need(self, r: Request, tokens: int, decode: bool, started: bool) -> int:
        """:meth:`KV.need`, less the hit entries of a new start that are held
        already, plus those it revives."""
        need = self.kv.need(r, tokens, decode, started)
        hit = 0 if started else r.memory.hit
        if hit:
            cache = self.cache
            revived = self._revived
            for e in cache.hits(r, hit):  # type: ignore[arg-type]
                if e.count == 0 and id(e) not in revived:
                    revived.add(id(e))
                else:
                    need -= cache.m
        return need

    def held_blocks(self, r: Request) -> int:
        """Blocks a victim's preemption frees."""
        held = r.memory.entries
        m = self.cache.m
        blocks = self.kv.held_blocks(r) - m * len(held)
        dropped = self._dropped
        for e in held:
            n = dropped.get(id(e), 0) + 1
            dropped[id(e)] = n
            if n == e.count:
                blocks += m
        return blocks
