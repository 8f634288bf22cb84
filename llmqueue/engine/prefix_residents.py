"""The residents of an engine with a prefix cache (docs/model.md §8.2).

:class:`PrefixResidents` is :class:`~llmqueue.engine.kv_residents.MemoryResidents`
with the cache of :mod:`~llmqueue.engine.prefix_cache`:

* **what a policy sees**: before each proposal, every unstarted resident
  with a prompt that the view shows has its prefill left set to the prompt it
  must compute less the hit a start would get now (:meth:`view`), so policies
  size their chunks on the work that is really left;
* **a start** takes its hit's entries (reviving the evictable ones): its KV
  holds the hit tokens at once, the backlog drops by them, and a first start
  books them as its ``cached_tokens``;
* **progress** makes entries of the hash blocks a served request completes
  (:meth:`apply`); **a finish or a preemption** gives its entries back, and
  those nobody holds become evictable (:meth:`release`, :meth:`_preempt`);
* the memory area of an unstarted resident stays 0 though its prefill left
  already counts its hit.

The blocks of the cache: a started resident's own blocks are those of its KV
less ``m`` per entry it holds; the gate reads them through
:class:`~llmqueue.engine.prefix_cache.GateKV`.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from llmqueue.engine.kv import KV, kv_tokens
from llmqueue.engine.kv_residents import MemoryResidents
from llmqueue.engine.prefix_cache import GateKV, PrefixCache, PrefixHeld, PrefixRequest
from llmqueue.policies.view import UNSTARTED, Plan, Request


class PrefixResidents(MemoryResidents):
    """Residents sharing a prefix cache."""

    def __init__(self, kv: KV) -> None:
        super().__init__(kv)
        self.cache = PrefixCache(kv)
        self.env: Any = None
        """The SimPy environment (:meth:`attach`)."""
        self.recorder: Any = None
        self._outs: dict = {}
        """Started decoders whose output has ids (sessions): they make entries as they decode."""

    def attach(self, env: Any, recorder: Any) -> None:
        """Read the time from ``env`` and book hits in ``recorder`` (the engine's)."""
        self.env, self.recorder = env, recorder
        recorder.memory.prefix = self.cache.stats

    # -- joining ---------------------------------------------------------
    def admit(self, r: Request, now: int) -> None:
        ignored = r.memory is not None and r.memory.ignored
        r.memory = PrefixHeld(ignored=ignored, prompt=r.prefill_left)
        if isinstance(r, PrefixRequest):
            self.cache.adopt(r)
        super().admit(r, now)

    # -- the policy's view -------------------------------------------------
    def view(self, cap: Optional[int] = None, started_only: bool = False) -> Any:
        self.cache.changed = False
        if not started_only:
            prefilling, cache = self.prefilling, self.cache
            j, tokens, end = self.started_prefilling, 0, len(prefilling)
            first = j
            while j < end and (cap is None or j == first or tokens < cap):
                r = prefilling[j]
                rec = r.memory
                hit = cache.lookup(r, rec.prompt)
                if hit != rec.hit:
                    r.prefill_left += rec.hit - hit
                    self.prefill_tokens += rec.hit - hit
                    rec.hit = hit
                tokens += r.prefill_left
                j += 1
        return super().view(cap, started_only)

    def gate_kv(self) -> GateKV:
        """The cache as the gate reads it for one proposal."""
        return GateKV(self.kv, self.cache)

    # -- what the gate decided ------------------------------------------
    def start(self, r: Request) -> None:
        super().start(r)
        rec = r.memory
        rec.n0, rec.cs0 = self.iterations, self._clock_sum  # nothing held until now
        hit = rec.hit
        first = rec.cached is None
        stats = self.cache.stats
        if hit:
            now = self.env.now
            entries = self.cache.hits(r, hit)  # type: ignore[arg-type]
            self.cache.hold(entries, now)
            rec.entries = entries
            self.used_tokens += hit
            self.recorder.add_work(now, -hit)
            stats.hit_tokens += hit
            if first:
                tokens = self.tokens
                if tokens is not None:  # its first chunk is scheduled now (prefill_left < vp)
                    tokens.schedule(r, now)
            else:
                stats.restart_hits += hit
        if first:
            rec.cached = hit
            stats.first_hits += hit
            stats.first_prompt += r.vp
            stats.first_starts += 1
        if r.prefill_left == 0 and _outputs(r):
            self._outs[id(r)] = r

    def _preempt(self, r: Request, key: int, restart: str) -> int:
        self._outs.pop(id(r), None)
        held = super()._preempt(r, key, restart)
        rec = r.memory
        self.cache.release(rec.entries, self.env.now)
        rec.entries = []
        rec.prompt = r.prefill_left
        rec.hit = 0
        return held

    def release(self, finished: Sequence[Request]) -> int:
        areas = super().release(finished)
        cache, m = self.cache, self.cache.m
        for r in finished:
            self._outs.pop(id(r), None)
            held = r.memory.entries
            if held:
                now: int = r.finished  # type: ignore[assignment]  # set: it finished
                self.free += m * (cache.release(held, now) - len(held))
        return areas

    # -- one iteration ---------------------------------------------------
    def apply(self, plan: Plan, k: int, start: int, t: int,
              times: Optional[Sequence[int]] = None) -> Tuple[List[Request], List[Request]]:
        cache = self.cache
        grown: List[Tuple[Request, int, int]] = []
        if cache.hash_block is not None:
            outs = self._outs
            if outs:
                grown.extend((r, kv_tokens(r), 1) for r in plan.decode if id(r) in outs)
            for r, n in plan.prefill:
                if isinstance(r, PrefixRequest):
                    grown.append((r, kv_tokens(r), n))
        prefilled, finished = super().apply(plan, k, start, t, times)
        for r, old, n in grown:  # its own blocks become the entries' (memory unchanged)
            cache.insert(r, old, old + n * k, r.memory.entries)  # type: ignore[arg-type]
        for r in prefilled:
            if _outputs(r):
                self._outs[id(r)] = r
        return prefilled, finished

    def quiet(self, plan: Plan, k: int) -> int:
        """Skip-ahead under a prefix cache: how many of ``k`` iterations of
        ``plan`` may run as one.  No served request may complete a hash block
        it has an id for before the last of them (its entry could change what
        a later choice sees; at the last is fine), and this choice must have
        revived or evicted no entry (that changes what a waiting request's
        start needs); the scheduler then bounds them by the empty blocks
        alone, so that none is evicted."""
        if self.cache.changed:
            return 1
        h = self.cache.hash_block
        if h is not None:
            for r, n in plan.prefill:
                ids = getattr(r, "ids", None)
                if ids:
                    x = kv_tokens(r)
                    if x // h < len(ids):  # it completes block x // h in iteration i
                        k = min(k, -((x // h * h + h - x) // -n))
            outs = self._outs
            if outs:
                for r in plan.decode:
                    if id(r) in outs:
                        x = kv_tokens(r)
                        if x // h < len(r.ids):  # type: ignore[attr-defined]
                            k = min(k, x // h * h + h - x)
        return k

    def _settle(self, r: Request, n: int, cs: int) -> None:
        if r.seq >= UNSTARTED:  # unstarted: holds nothing, whatever its hit
            rec = r.memory
            rec.n0, rec.cs0 = n, cs
            return
        super()._settle(r, n, cs)

    def cached_prefix(self, r: Request) -> int:
        """The hit ``r`` would get here now at a first start (changes nothing)."""
        return self.cache.lookup(r, r.prefill_left)


def _outputs(r: Request) -> bool:
    """Whether ``r`` has ids for blocks its decode tokens complete."""
    return isinstance(r, PrefixRequest) and len(r.ids) * r.hash_block > r.vp
