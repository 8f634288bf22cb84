"""Prefix caching in a plan: the bounds at the **effective** prompt.

An engine with a prefix cache (``KV(..., prefix=True)``) on prefix groups
(:meth:`~llmqueue.planning.spec.Traffic.prefix_groups`) computes only the
prompt tokens its cache does not hold.  Once a group's head is cached, a
request hits the group's whole hash blocks (one token short of its prompt at
most), so ``E[hit]`` is :meth:`~llmqueue.planning.groups.Groups.mean_hit`:
exact with a cache that never evicts, and no cache hits more.  The bounds
then read the prompt less its hit (:func:`cached_bounds`):

* ``lambda_tok`` and ``lambda_mix``: Theorem 2 at the mean prompt
  ``E[vp] - E[hit]`` (for context models the decodes' contexts stay the whole
  prompt's), ``(bmax / t(bmax)) / (E[vp] - E[hit] + E[vd])`` for models of the
  batch size alone;
* ``lambda_kv``: Little's law on each request's own KV, ``vp - hit`` tokens
  and its decodes (the shared heads are held once);
* ``A_0``: each sampled request's unloaded latency with its group's head
  cached (:func:`unloaded_cached`; relative SLOs stay multiples of the
  unloaded latency of the whole prompt, as the replications judge them).

Since no cache hits more than the groups' heads, these remain necessary
conditions at every cache size.  When the cache may evict during a
replication (it cannot hold the whole KV of every request the longest
replication brings: :func:`never_evicts`), ``plan`` reads ``E[hit]`` from its
first probe instead (the mean first-start hit of its measured requests,
:func:`measured_hit`) and its token bound is then approximate
(:func:`with_mean_hit`).
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from llmqueue.models.sizes import decode_sizes
from llmqueue.planning.groups import Groups, Uncached
from llmqueue.planning.probe import LONGEST, Probe, Rules, probe
from llmqueue.planning.replicate import Task, prefix_cached
from llmqueue.planning.spec import EngineSpec, Traffic
from llmqueue.theory.bounds import (Bounds, memory_bound, smallest_iteration, token_bound,
                                    unloaded_latency)
from llmqueue.theory.prefix import prefix_gain
from llmqueue.theory.shapes import shape_time
from llmqueue.theory.slo import SLO, RequestLatency, Unloaded, attainment
from llmqueue.theory.stats import mean_ci

GROUPS, FIRST_PROBE = "groups", "first probe"
#: The note of a rate at or above :attr:`Hits.ceiling`, failed without simulation.
CEILING = ("at or above the bound at the groups' whole heads (no cache hits more): no policy "
           "keeps up (Theorem 2)")


@dataclass(frozen=True)
class Hits:
    """What a plan's bounds know of the prefix cache: ``mean_hit`` tokens per
    request and where they come from (``source``: :data:`GROUPS` or
    :data:`FIRST_PROBE`), whether the cache may evict in a replication,
    the bounds without the cache (``nominal``: every prompt computed whole),
    the mean prompt, and for a measured hit the first probe's hit ratio."""

    mean_hit: float
    source: str
    may_evict: bool
    nominal: Bounds
    mean_prefill: float
    mean_decode: float
    hit_ratio: Optional[float] = None
    rate: Optional[float] = None
    """The first probe's rate (req/s), for a measured hit."""
    ceiling: Optional[float] = None
    """For a measured hit, the bounds' limit at the groups' hit where it is
    exact (a model of the batch size alone): no cache hits more, so a rate at
    or above it FAILs without simulation."""

    @property
    def note(self) -> str:
        """One line: where ``E[hit]`` comes from and how far it holds."""
        if self.source == FIRST_PROBE:
            return (f"measured by the first probe (hit ratio {self.hit_ratio:.3f} at "
                    f"{self.rate:.4g} req/s): the cache may evict, so the hit is not known in "
                    "closed form and the token bound is approximate")
        return ("every group's whole hash blocks once its head is cached: exact at an "
                "unlimited cache" + (" (this one never evicts)" if not self.may_evict else
                                     "; an upper bound here, where the cache may evict"))

    def as_dict(self) -> Dict[str, Any]:
        """The keys a plan's JSON gains."""
        return {"mean_hit": self.mean_hit, "mean_hit_source": self.source,
                "mean_hit_note": self.note, "cache_may_evict": self.may_evict,
                "effective_prefill": self.mean_prefill - self.mean_hit,
                "prefix_gain": prefix_gain(self.mean_prefill, self.mean_decode,
                                           min(self.mean_hit, self.mean_prefill)),
                "first_probe_hit_ratio": self.hit_ratio,
                "lambda_tok_no_cache": self.nominal.lambda_tok,
                "bound_at_group_hit": self.ceiling,
                "lambda_kv_no_cache": self.nominal.lambda_kv,
                "attainment_zero_load_no_cache": self.nominal.attainment_zero_load}

    def line(self, bounds: Bounds) -> str:
        """One line for the printed plan."""
        return (f"prefix cache: E[hit] = {self.mean_hit:.4g} tokens per request, {self.note}; "
                f"the bounds read the effective prompt E[vp] - E[hit] = "
                f"{self.mean_prefill - self.mean_hit:.4g} of {self.mean_prefill:.4g} tokens: "
                f"lambda_tok {bounds.lambda_tok:.4g} req/s against "
                f"{self.nominal.lambda_tok:.4g} without the cache"
                + ("" if self.ceiling is None else
                   f"; {self.ceiling:.4g} req/s at the groups' whole heads fails unsimulated "
                   "(no cache hits more)"))


def check_prefix(workload: Traffic, engine: EngineSpec) -> None:
    """A ValueError for a prefix cache without prefix groups, or groups
    whose hash block is not a whole number of the cache's KV blocks."""
    if not prefix_cached(engine):
        return
    assert engine.kv is not None
    if workload.groups is None:
        raise ValueError("the engine has a prefix cache (KV(..., prefix=True)) but the "
                         "workload carries no prefix ids, so nothing is shared; allowed: "
                         "Traffic.prefix_groups(...), or a KV without prefix")
    if workload.groups.hash_block % engine.kv.block_size:
        raise ValueError(f"hash_block must be a multiple of the KV block size "
                         f"(kv_block={engine.kv.block_size}); got "
                         f"hash_block={workload.groups.hash_block}")


def never_evicts(engine: EngineSpec, workload: Traffic, requests: int) -> bool:
    """Whether the cache holds the whole KV of ``requests`` requests of
    ``workload`` at their mean sizes: nothing ever needs evicting then."""
    assert engine.kv is not None
    return engine.kv.tokens >= requests * (workload.mean_prefill + workload.mean_decode)


def unloaded_cached(latency: Any, bmax: int, vp: int, vd: int, hit: int) -> Unloaded:
    """A request's latencies on an empty engine whose cache holds its first
    ``hit`` prompt tokens: its prompt's chunks from ``hit`` on (chunk ``i``
    after ``hit + i bmax`` cached tokens), then its decodes as
    :func:`~llmqueue.theory.bounds.unloaded_latency` has them."""
    u = unloaded_latency(latency, bmax, vp, vd)
    if not hit:
        return u
    ttft = shape_time(latency, 1, 0, vp)
    for start in range(hit, vp, bmax):
        ttft += shape_time(latency, 0, min(bmax, vp - start), chunk_ctx=start)
    e2e = ttft if u.tpot is None else ttft + (vd - 1) * u.tpot
    return Unloaded(ttft, u.tpot, u.tbt_max, e2e)


def zero_load_cached(latency: Any, bmax: int, groups: Groups, workload: Traffic, slo: SLO,
                     n: int = 10**4, seed: int = 0,
                     fits: Optional[Callable[[int, int], bool]] = None) -> float:
    """``A_0`` with every group's head cached: the share of ``n`` sampled
    requests whose :func:`unloaded_cached` latencies meet ``slo`` (relative
    thresholds: multiples of the whole prompt's unloaded latency); a request
    that can never fit the KV cache misses."""
    rp, rd = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    prompts = groups.prompt.sample(rp, n)
    sizes = zip(prompts.tolist(), decode_sizes(workload.decode_law, rd, n).tolist(),
                groups.hits(prompts).tolist())
    seen: Dict[Tuple[int, int, int], RequestLatency] = {}
    records: List[RequestLatency] = []
    for key in sizes:
        if key not in seen:
            vp, vd, hit = key
            u0 = unloaded_latency(latency, bmax, vp, vd)
            u = unloaded_cached(latency, bmax, vp, vd, hit)
            seen[key] = RequestLatency(u.ttft, u.tpot, u.tbt_max, u.e2e, 0.0, True, None, u0) \
                if fits is None or fits(vp, vd) else RequestLatency(finished=False, unloaded=u0)
        records.append(seen[key])
    return attainment(records, slo).joint


def with_mean_hit(bounds: Bounds, workload: Traffic, engine: EngineSpec, mean_hit: float,
                  exact: bool = True) -> Bounds:
    """``bounds`` with the token bound at the effective prompt
    ``E[vp] - mean_hit`` (decode contexts at the whole prompt); ``exact``
    False: the hit is only an estimate, so the bound is too."""
    m_p = workload.mean_prefill
    tok = token_bound(engine.latency, engine.bmax, max(m_p - mean_hit, 0.0),
                      workload.mean_decode, engine.kmax, mean_prompt=m_p)
    return dataclasses.replace(bounds, lambda_tok=tok.lambda_tok, lambda_mix=tok.lambda_mix,
                               exact=tok.exact and exact)


def cached_bounds(nominal: Bounds, workload: Traffic, engine: EngineSpec, slo: Any,
                  seed: int, requests: int) -> Tuple[Bounds, Optional[Hits]]:
    """With a prefix cache (:func:`check_prefix`), the bounds with every
    group's head cached and the :class:`Hits` they used (``requests`` is what
    a replication brings at most, warm-up included, for :func:`never_evicts`);
    else ``nominal`` and ``None``."""
    check_prefix(workload, engine)
    groups, kv = workload.groups, engine.kv
    if groups is None or kv is None or not kv.prefix:
        return nominal, None
    assert isinstance(slo, SLO)  # per-class SLOs need classes, which groups do not have
    t1 = smallest_iteration(engine.latency)
    bounds = dataclasses.replace(
        nominal, lambda_kv=memory_bound(kv.tokens, t1, Uncached(groups), workload.decode_law,
                                        seed=seed),
        attainment_zero_load=zero_load_cached(engine.latency, engine.bmax, groups, workload,
                                              slo, seed=seed, fits=kv.fits_ever))
    hits = Hits(groups.mean_hit, GROUPS, not never_evicts(engine, workload, requests), nominal,
                workload.mean_prefill, workload.mean_decode)
    return with_mean_hit(bounds, workload, engine, hits.mean_hit), hits


def longest(n_warm: int, n_meas: int) -> int:
    """Requests of the longest replication a probe runs (its warm-up included)."""
    return n_warm + LONGEST * n_meas


def measured_hit(p: Probe) -> Tuple[float, Optional[float]]:
    """The mean first-start hit of ``p``'s measured requests (tokens; 0 when
    none started) and their hit ratio (hit tokens over prompt tokens)."""
    started = hits = prompts = 0
    for r in p.runs:
        if r.hits is not None:
            started, hits, prompts = (started + r.hits[0], hits + r.hits[1],
                                      prompts + r.hits[2])
    return (hits / started if started else 0.0), (hits / prompts if prompts else None)


def hit_figures(p: Probe) -> Dict[str, List[Optional[float]]]:
    """The measured hit ratio and mean hit of a probe's replications,
    ``[mean, 95 % CI half-width]`` each (empty without a prefix cache)."""
    runs = [r.hits for r in p.runs if r.hits is not None and r.hits[0]]
    if not runs:
        return {}
    ratio = mean_ci(h / max(t, 1) for _, h, t in runs)
    mean = mean_ci(h / n for n, h, _ in runs)
    return {"prefix_hit_ratio": [ratio[0], ratio[1]], "mean_hit": [mean[0], mean[1]]}


def first_probe(base: Task, bounds: Bounds, hits: Optional[Hits], engines: int, rules: Rules,
                executor: Optional[Executor], bar: Any
                ) -> Tuple[Optional[Probe], Bounds, Optional[Hits]]:
    """When the cache may evict (and a group's head holds a hash block), the
    first probe of the plan, at the bound without the cache (the capacity of
    an engine that computes every prompt whole), and the bounds and
    :class:`Hits` at the mean hit it measured; else ``None``, ``bounds``
    and ``hits``."""
    if hits is None or not hits.may_evict or not hits.mean_hit:
        return None, bounds, hits
    first = probe(base, hits.nominal.limit * engines, engines, rules, executor, bar)
    first = dataclasses.replace(first, note="; ".join(
        x for x in ("measures the prefix cache's hit", first.note) if x))
    hit, ratio = measured_hit(first)
    return first, with_mean_hit(bounds, base.traffic, base.engine, hit, exact=False), \
        dataclasses.replace(hits, mean_hit=hit, source=FIRST_PROBE, hit_ratio=ratio,
                            rate=first.rate, ceiling=bounds.limit if bounds.exact else None)
