"""The reference engine with a prefix cache: the plain stepping of docs/model.md §8.2.

An independent, slow, obviously-correct counterpart of the fast engine's
prefix cache, for equivalence tests.  It is the KV reference
(:func:`~llmqueue.engine.reference_kv.run_reference_kv`) with the hooks of
:class:`~llmqueue.engine.reference_common.NoCache` filled in by
:class:`PrefixCache`, written from docs/model.md §8 and ``notes/prefix_design.md``
(the contract), rescanning its state at every step:

* entries are kept by id with their depth (position), creation number and
  last use; an entry's count is never stored: it is the number of started
  residents whose list of held ids names it, recounted when needed, so an
  entry is evictable exactly when no started resident names it;
* a request's ids are its prompt ids ``blocks[:vp // H]`` then its
  ``out_blocks``; the prompt ``P`` it must compute at its next start is ``vp``,
  or what :func:`~llmqueue.engine.reference_kv.run_reference_kv` makes it at a
  preemption (``vp + d`` under ``keep``);
* lookup: ``h`` leading ids with ``(j + 1) H <= P`` that have an entry,
  ``k = min(h, (P - 1) // H)``; before every proposal each unstarted resident
  shows ``prefill_left = P - k H`` (so its KV, as the KV reference reads it,
  is its hit), and the gate's start takes exactly that hit, its ``k`` ids
  becoming its held ids;
* memory: the KV reference counts ``ceil(held / B)`` blocks per started
  resident (its hit included) and subtracts what common entries count twice
  (:meth:`PrefixCache.shared`: ``m`` per extra holder), so the blocks in use
  are ``m`` per entry in use plus every resident's own blocks, a start pays for
  the evictable entries it revives (not those revived by an earlier start of
  the same gate call), and a victim frees the entries nobody else holds;
* after a batch is chosen (and allocated), entries are evicted while the
  empty blocks (free less ``m`` per evictable entry) are negative: smallest
  ``(last_use, -depth, created)`` first;
* when an iteration's progress is applied, each served request (decodes in
  plan order, then chunks in plan order) inserts, for each hash block it
  completes that has an id, a new entry held by it, unless an entry with that
  id exists (then it keeps its own copy); then finished requests release;
* a release (finish at the iteration's end, preemption at the choice) drops
  the held ids; an entry nobody holds any more gets ``last_use = now``.

Multi-turn sessions (closed loops): turn ``k + 1`` of a session arrives
``think`` seconds after turn ``k`` finishes; a turn rejected as never-fit ends
its session.  Requests are numbered in the order they arrive (rows and turns
alike; a turn due at the same instant as a row comes after it).
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import (Any, Deque, Dict, Hashable, Iterable, List, NamedTuple, Optional, Sequence,
                    Tuple)

from llmqueue.common.units import to_ticks
from llmqueue.engine.kv import KV
from llmqueue.engine.kv_recorder import KVBatch
from llmqueue.engine.reference_common import Memory, NoCache, kv_of, serve
from llmqueue.engine.reference_kv import run_reference_kv
from llmqueue.engine.results import Batch
from llmqueue.models.latency import LatencyModel
from llmqueue.policies.builtin import Policy
from llmqueue.policies.view import Plan, Request


@dataclass
class Entry:
    """A cached hash block (its count is recounted from the holders)."""

    depth: int
    """Its position ``j`` in the requests that use it."""
    created: int
    """Its creation number in this cache."""
    last_use: int = 0
    """When its last holder released it (ticks)."""


@dataclass
class Part:
    """One request's part in the prefix cache."""

    ids: Tuple[Hashable, ...]
    """Its content ids by position: prompt ids, then ``out_blocks``."""
    prompt: int
    """``P``: the prompt its next start must compute."""
    holds: List[Hashable] = field(default_factory=list)
    """Ids of the entries it holds (while started)."""
    started: bool = False
    """Whether it holds KV now."""
    starts: int = 0
    """Its starts so far (the first one and restarts)."""
    cached: Optional[int] = None
    """Its first start's hit (tokens)."""
    session: Optional[Tuple[Any, int]] = None
    """``(script, turn index)`` for a session's turn."""
    number: int = -1
    """Its number in arrival order (-1 until it arrives)."""


class CacheRow(NamedTuple):
    """The cache after one batch choice (aligned with the batch log), in blocks."""

    in_use: int
    """Blocks in use: ``m`` per entry in use plus the residents' own blocks."""
    evictable: int
    """``m`` per evictable entry."""
    empty: int
    """Blocks neither in use nor evictable."""
    entries: int
    """Entries, in use and evictable."""


class PrefixFigures(NamedTuple):
    """A run's prefix-cache counts (docs/model.md §8.3)."""

    prefix_hit_tokens: int
    """Hit tokens of all starts and restarts."""
    recompute_hit_tokens: int
    """Hit tokens of restarts."""
    prefill_computed_tokens: int
    """Prefill tokens processed (recomputes included)."""
    evictions: int
    """Entries evicted."""
    first_hit_tokens: int
    """Hit tokens of first starts."""
    first_prompt_tokens: int
    """Prompt tokens (``vp``) of first starts."""
    entries_max: int
    """Most entries at once (in use and evictable)."""
    cache_blocks_mean: Optional[float]
    """The time-average of the evictable blocks over the run (``None``: it lasted 0 s)."""

    @property
    def prefix_hit_ratio(self) -> Optional[float]:
        """First starts' hit tokens over their prompt tokens (``None`` without any)."""
        return self.first_hit_tokens / self.first_prompt_tokens if self.first_prompt_tokens \
            else None


class PrefixReference(NamedTuple):
    """What :func:`run_reference_prefix` returns (times in nanoseconds)."""

    batches: List[Batch]
    """The batch log."""
    kv_log: List[KVBatch]
    """Memory per iteration (blocks in use, shared entries once), aligned with ``batches``."""
    requests: List[Request]
    """Every request that arrived, by number, its memory record in ``memory``."""
    cached_tokens: Dict[Hashable, Optional[int]]
    """Each request's first start's hit, by number (``None``: it never started)."""
    figures: PrefixFigures
    """The run's prefix-cache counts."""
    cache_log: List[CacheRow]
    """The cache after each iteration's choice, aligned with ``batches``."""


class PrefixCache(NoCache):
    """The prefix cache of docs/model.md §8.2 behind the KV reference's hooks.

    ``rows`` are the arrivals the KV reference numbers by position (their
    ids in fields 4-5), ``sessions`` the closed-loop scripts, ``hash_block``
    ``H`` (a multiple of the block size of ``kv``), ``until`` the horizon in
    ticks."""

    def __init__(self, rows: Sequence[Sequence], sessions: Sequence[Any], hash_block: int,
                 kv: KV, until: Optional[int]) -> None:
        self.rows, self.sessions, self.until = rows, sessions, until
        self.size, self.m, self.blocks = hash_block, hash_block // kv.block_size, kv.blocks
        self.entries: Dict[Hashable, Entry] = {}
        self.parts: Dict[int, Part] = {}  # by id() of the request
        self.requests: List[Request] = []
        self.line: Deque[Request] = deque()
        self.arrived = self.created = self.cut = 0
        self.counts = dict(hits=0, recompute_hits=0, computed=0, evictions=0, first_hits=0,
                           first_prompts=0, entries_max=0)
        self.log: List[CacheRow] = []
        self.levels: List[Tuple[int, int, int]] = []  # (time, 0 release / 1 choice, evictable)

    def ids(self, vp: int, blocks: Optional[Sequence[Hashable]],
            out_blocks: Optional[Sequence[Hashable]]) -> Tuple[Hashable, ...]:
        """A request's ids by position (docs/model.md §8.1: full prompt blocks only)."""
        return tuple(blocks or ())[:vp // self.size] + tuple(out_blocks or ())

    def join(self, r: Request, part: Part) -> None:
        """Track ``r`` with its part."""
        self.parts[id(r)] = part
        self.requests.append(r)

    def turn(self, script: Any, index: int, at: int) -> Optional[Request]:
        """Turn ``index`` of session ``script`` due at ``at`` (``None`` past the horizon)."""
        if self.until is not None and at >= self.until:
            self.cut += 1  # its session would go on: arrivals never end
            return None
        t = script.turns[index]
        r = Request(-1, t.prefill, t.decode)
        r.arrival = at
        r.memory = Memory()
        self.join(r, Part(self.ids(t.prefill, t.blocks, t.out_blocks), t.prefill,
                          session=(script, index)))
        return r

    def begin(self, line: Deque[Request]) -> None:
        """Give the rows their ids and merge the sessions' first turns into the line."""
        self.line = line
        for row, r in zip(self.rows, line):  # the line lists the rows in order
            self.join(r, Part(self.ids(r.vp, row[4] if len(row) > 4 else None,
                                       row[5] if len(row) > 5 else None), r.vp))
        firsts = [self.turn(s, 0, to_ticks(s.start)) for s in self.sessions if s.turns]
        merged = sorted(list(line) + [r for r in firsts if r is not None],
                        key=lambda r: r.arrival)  # stable: rows first at equal times
        line.clear()
        line.extend(merged)

    def arrive(self, r: Request) -> None:
        """Number ``r`` in arrival order."""
        r.rid = self.parts[id(r)].number = self.arrived
        self.arrived += 1

    def more(self) -> bool:
        """Whether a session's next turn may still come."""
        if self.cut:
            return True
        for r in self.requests:
            link = self.parts[id(r)].session
            if link and r.finished is None and not r.memory.ignored \
                    and link[1] + 1 < len(link[0].turns):
                return True
        return False

    def hit(self, part: Part) -> List[Hashable]:
        """The ids a start of ``part`` now would use (lookup, changing nothing)."""
        p, h = part.prompt, 0
        while h < len(part.ids) and (h + 1) * self.size <= p and part.ids[h] in self.entries:
            h += 1
        return list(part.ids[:min(h, (p - 1) // self.size)]) if p > 0 else []

    def peek(self, unstarted: Sequence[Request]) -> None:
        """Show each unstarted resident's prompt less the hit it would get now."""
        for r in unstarted:
            part = self.parts[id(r)]
            r.prefill_left = part.prompt - self.size * len(self.hit(part))

    def held_by(self, holders: Iterable[Request]) -> List[List[Hashable]]:
        """The ids each of ``holders`` holds (started) or would take (a start)."""
        parts = [self.parts[id(r)] for r in holders]
        return [p.holds if p.started else self.hit(p) for p in parts]

    def shared(self, holders: Sequence[Request]) -> int:
        """``m`` blocks per holding of an entry beyond its first holder."""
        lists = self.held_by(holders)
        return self.m * (sum(len(ids) for ids in lists) - len(set().union(*lists)))

    def holders(self) -> "Counter[Hashable]":
        """How many started residents hold each entry (recounted)."""
        return Counter(key for p in self.parts.values() if p.started for key in p.holds)

    def evictable(self) -> List[Hashable]:
        """The entries no started resident holds."""
        counts = self.holders()
        return [key for key in self.entries if counts[key] == 0]

    def start(self, r: Request, now: int) -> None:
        """Take the hit shown at the proposal: its entries' counts go up."""
        part = self.parts[id(r)]
        ids = self.hit(part)
        hit = self.size * len(ids)
        if r.prefill_left != part.prompt - hit:
            raise AssertionError(f"request {r.rid}: the peek and the start disagree")
        part.holds, part.started = ids, True
        self.counts["hits"] += hit
        if part.starts == 0:
            part.cached = hit
            self.counts["first_hits"] += hit
            self.counts["first_prompts"] += r.vp
        else:
            self.counts["recompute_hits"] += hit
        part.starts += 1

    def settle(self, free: int, now: int) -> None:
        """Evict (LRU, deeper first, older first) while the empty blocks are negative."""
        while True:
            idle = self.evictable()
            if free - self.m * len(idle) >= 0:
                break
            if not idle:
                raise AssertionError(f"{free} blocks free after a choice: over the cache")
            del self.entries[min(idle, key=lambda k: (self.entries[k].last_use,
                                                      -self.entries[k].depth,
                                                      self.entries[k].created))]
            self.counts["evictions"] += 1
        evictable = self.m * len(idle)
        self.levels.append((now, 1, evictable))
        self.log.append(CacheRow(self.blocks - free, evictable, free - evictable,
                                 len(self.entries)))

    def serve(self, plan: Plan, end: int) -> None:
        """Apply the iteration, then insert the hash blocks it completed."""
        before = [(r, kv_of(r)) for r in plan.decode] + [(r, kv_of(r)) for r, _ in plan.prefill]
        serve(plan, end)
        self.counts["computed"] += sum(n for _, n in plan.prefill)
        for r, old in before:
            part = self.parts[id(r)]
            for j in range(len(part.ids)):
                if old < (j + 1) * self.size <= kv_of(r) and part.ids[j] not in self.entries:
                    self.entries[part.ids[j]] = Entry(j, self.created)
                    self.created += 1
                    part.holds.append(part.ids[j])
        self.counts["entries_max"] = max(self.counts["entries_max"], len(self.entries))

    def release(self, r: Request, now: int) -> None:
        """Drop ``r``'s entries (nobody's any more: last used ``now``); note its new prompt."""
        part = self.parts[id(r)]
        held, part.holds, part.started = part.holds, [], False
        part.prompt = r.prefill_left
        idle = self.evictable()
        for key in held:
            if key in idle:
                self.entries[key].last_use = now
        self.levels.append((now, 0, self.m * len(idle)))

    def finish(self, r: Request, end: int) -> None:
        """Release ``r``; its session's next turn arrives after its think time."""
        self.release(r, end)
        link = self.parts[id(r)].session
        if link and link[1] + 1 < len(link[0].turns):
            nxt = link[0].turns[link[1] + 1]
            r2 = self.turn(link[0], link[1] + 1, end + to_ticks(nxt.think))
            if r2 is not None:
                at = sum(1 for s in self.line if s.arrival <= r2.arrival)
                self.line.insert(at, r2)

    def figures(self, end: int) -> PrefixFigures:
        """The run's counts; the evictable blocks' time-average over ``[0, end]``."""
        c, area, level, since = self.counts, 0, 0, 0
        for at, _, blocks in sorted(self.levels):  # releases before a choice at one time
            if at >= end:
                break
            area, level, since = area + level * (at - since), blocks, at
        area += level * (end - since)
        return PrefixFigures(c["hits"], c["recompute_hits"], c["computed"], c["evictions"],
                             c["first_hits"], c["first_prompts"], c["entries_max"],
                             area / end if end > 0 else None)


def hash_block_of(rows: Sequence[Sequence], given: Optional[int], kv: KV) -> int:
    """The run's ``H``: the rows' (all alike) or ``given``, a positive multiple of
    the block size (the block size when nobody names one)."""
    named = {row[6] for row in rows if len(row) > 6 and row[6] is not None}
    if given is not None:
        named.add(given)
    if any(len(row) > 4 and row[4] for row in rows) and not kv.prefix:
        raise ValueError("requests carry prefix ids but the KV cache has prefix=False")
    if len(named) > 1:
        raise ValueError(f"one engine's requests share one hash block; got {sorted(named)}")
    size = named.pop() if named else kv.block_size
    if not isinstance(size, int) or size <= 0 or size % kv.block_size:
        raise ValueError(f"hash_block must be a positive multiple of the block size "
                         f"{kv.block_size}; got {size!r}")
    return size


def run_reference_prefix(arrivals: Iterable[Sequence], policy: Policy, kv: KV, *,
                         sessions: Sequence[Any] = (), hash_block: Optional[int] = None,
                         bmax: Optional[int] = 128, kmax: Optional[int] = 100,
                         latency: Optional[LatencyModel] = None,
                         horizon: Optional[float] = None) -> PrefixReference:
    """Step docs/model.md §6 with docs/model.md §8.2's prefix cache; see the module docstring.

    ``arrivals`` are ``(time, prefill, decode[, class[, blocks[, out_blocks[,
    hash_block]]]])`` rows, ``sessions`` objects with ``start`` (s) and
    ``turns`` (each with ``prefill``, ``decode``, ``blocks``, ``out_blocks``
    and ``think``, s), their ids in hash blocks of ``hash_block`` tokens."""
    rows = list(arrivals)
    size = hash_block_of(rows, hash_block, kv)
    cache = PrefixCache(rows, sessions, size, kv,
                        to_ticks(horizon) if horizon is not None else None)
    out = run_reference_kv(rows, policy, kv, bmax=bmax, kmax=kmax, latency=latency,
                           horizon=horizon, cache=cache)
    requests = sorted((r for r in cache.requests if cache.parts[id(r)].number >= 0),
                      key=lambda r: cache.parts[id(r)].number)
    end = to_ticks(horizon) if horizon is not None else max(  # the last event
        [b.start + b.duration for b in out.batches] + [r.arrival for r in requests], default=0)
    return PrefixReference(out.batches, out.kv_log, requests,
                           {r.rid: cache.parts[id(r)].cached for r in requests},
                           cache.figures(end), cache.log[:len(out.batches)])
