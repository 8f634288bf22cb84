"""Cache collapse: does a backlog push a prefix cache into a second, low-hit
state (metastability, the prefix analogue of preemption storms)?

The hypothesis: with M just large enough, a calm engine keeps the shared
prefixes cached and runs at a high hit ratio; a backlog fills the cache with
the residents' own blocks, evicts the prefixes, the hit ratio falls, every
prompt costs more prefill and the backlog never drains.  Two starts of the
same arrivals tell: (a) empty, (b) with ``initial`` requests waiting at
t = 0.  Two configurations, on the engine of
:mod:`~llmqueue.experiments.prefix_runs` (sarathi, bmax 512, no kmax, blocks
and hash blocks of 16 tokens):

* ``system-prompts``: the prompts of ``prefix-capacity`` (8 groups, Zipf 1,
  1,024 shared tokens, suffix and decode geometric with mean 128) at 0.95 of
  lambda*_c = 13.06 req/s, with M = 75,000 tokens: the residents hold about
  68,000 at this load, so they crowd the cache;
* ``many-groups``: 1,000 groups (Zipf 1) of 256 shared tokens, suffix
  geometric 32, decode geometric 128, M = 60,000 tokens (all the prefixes
  would take 256,000), at 11 req/s: between the capacity without the cache
  (8.04 req/s) and with every prefix cached (20.9 req/s).  Here prefixes are
  evicted under load: the hit ratio stays far below the ideal.

Figures per run, over the second half of the horizon: the hit ratio of the
requests whose first start falls in it (:func:`hit_windows` draws it over
time: a request counts in the window of its first start, read from the batch
log, with its ``cached_tokens`` over its prompt), the slope of pending
(req/s, with its standard error over the drift windows, or over the seeds),
completions per second, preemptions and evictions over the whole run, the
mean evictable cache and the pending at the end.  Checks only what the runs
show robustly: per configuration, both starts end at one hit ratio (within
:data:`HIT_GAP`) and neither keeps growing.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from llmqueue.common.units import TICKS_PER_SECOND
from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result, Summary
from llmqueue.experiments import memory_runs as mr
from llmqueue.experiments.base import Check, Column, Experiment, Param, Rows, register
from llmqueue.experiments.prefix_capacity import DECODE, GROUPS, SHARED, SUFFIX, ZIPF
from llmqueue.experiments.prefix_runs import BMAX, KV_BLOCK, LATENCY, serve
from llmqueue.models.prefixes import PrefixGroups
from llmqueue.models.sizes import Geometric, SizeLaw
from llmqueue.theory.capacity import lambda_star
from llmqueue.theory.prefix import ideal_hit_ratio, lambda_star_cached

HORIZON = 1800.0                 # s per run (figures: its second half)
INITIAL = 400                    # requests waiting at t = 0 in start (b)
WINDOW = 30.0                    # s: windows of the hit ratio over time
HIT_GAP = 0.02                   # the two starts' late hit ratios agree within this
FLAT = 0.5                       # req/s: a slope within max(3 se, FLAT) of 0 is flat
LOAD = 0.95                      # of lambda*_c, for system-prompts


@dataclass(frozen=True)
class Config:
    """One configuration: prefix groups, their sizes, the cache and the rate."""

    name: str
    """Its name in ``configs``."""
    groups: int
    """Prefix groups G (Zipf 1)."""
    shared: int
    """Tokens a group's prompts share."""
    suffix: SizeLaw
    """Each prompt's own tokens."""
    decode: SizeLaw
    """Decode tokens."""
    M: int
    """KV cache (tokens)."""
    rate: float
    """Poisson arrivals per second."""

    def workload(self, initial: int, seed: int) -> PrefixGroups:
        """Its arrivals, with ``initial`` requests at t = 0."""
        return PrefixGroups(self.groups, ZIPF, self.shared, self.suffix, self.decode,
                            rate=self.rate, seed=seed, hash_block=KV_BLOCK, initial=initial)

    def capacities(self) -> Tuple[float, float]:
        """Theorem 2's capacity with every prefix cached, and without the cache (req/s)."""
        vp, vd = self.shared + self.suffix.mean, self.decode.mean
        return (lambda_star_cached(BMAX, vp, vd, self.shared // KV_BLOCK * KV_BLOCK, LATENCY),
                lambda_star(BMAX, vp, vd, LATENCY))


_CAPACITY = lambda_star_cached(BMAX, SHARED + SUFFIX.mean, DECODE.mean, SHARED, LATENCY)
CONFIGS: Dict[str, Config] = {c.name: c for c in (
    Config("system-prompts", GROUPS, SHARED, SUFFIX, DECODE, 75_000, LOAD * _CAPACITY),
    Config("many-groups", 1000, 256, Geometric(32), Geometric(128), 60_000, 11.0))}


def parse_configs(text: str) -> List[Config]:
    """``"many-groups"`` (or ``all``) as configurations, in the order given."""
    names = [x.strip() for x in str(text).split(",") if x.strip()]
    chosen = list(CONFIGS.values()) if names == ["all"] else \
        [CONFIGS[x] for x in names if x in CONFIGS]
    if not chosen or (names != ["all"] and len(chosen) < len(names)):
        raise ValueError(f"configs must be all or a comma-separated list of "
                         f"{', '.join(CONFIGS)}; got {text!r}")
    return chosen


def first_starts(result: Result) -> Dict[Any, float]:
    """Each started request's first start (s): the first iteration that
    computed a chunk of its prompt (a hit leaves at least one token to
    compute, so every start has one).  Needs the batch log."""
    if result.batch_log is None:
        raise ValueError("first_starts needs a run recorded with batches=True")
    out: Dict[Any, float] = {}
    for b in result.batch_log:
        for rid, _ in b.prefill:
            out.setdefault(rid, b.start / TICKS_PER_SECOND)
    return out


def _started(result: Result) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """First start (s), hit and prompt tokens of every request that started."""
    if result.request_log is None:
        raise ValueError("the hit ratio over time needs a run recorded with requests=True")
    starts = first_starts(result)
    rows = [(starts[r.rid], r.memory.cached, r.vp) for r in result.request_log
            if r.rid in starts and r.memory is not None and r.memory.cached is not None]
    data = np.array(rows, dtype=float).reshape(-1, 3)
    return data[:, 0], data[:, 1], data[:, 2]


def hit_windows(result: Result, width: float = WINDOW) -> Tuple[np.ndarray, np.ndarray]:
    """The hit ratio over time: in windows of ``width`` s, the hit tokens of
    the requests whose first start falls in the window over their prompt
    tokens; ``(window centres s, ratio)`` (NaN where none started).  Needs
    the batch and request logs."""
    start, hit, vp = _started(result)
    edges = np.arange(0.0, start.max(initial=0.0) + 2 * width, width)
    hits, _ = np.histogram(start, edges, weights=hit)
    prompts, _ = np.histogram(start, edges, weights=vp)
    ratio = np.full(hits.size, np.nan)
    np.divide(hits, prompts, out=ratio, where=prompts > 0)
    return (edges[:-1] + edges[1:]) / 2, ratio


def figures(result: Result, horizon: float) -> Dict[str, Any]:
    """One run's figures (see the module docstring).  Needs the batch,
    request and pending logs."""
    s = result.summary
    start, hit, vp = _started(result)
    late = start >= horizon / 2
    slope, se = mr.pending_slope(result, horizon)
    log = result.request_log or []
    done = np.array([r.finished for r in log if r.finished is not None], dtype=float)
    served = np.count_nonzero(done >= horizon / 2 * TICKS_PER_SECOND) / (horizon / 2)
    t, pending, _ = result.timeseries()
    edges = np.append(np.clip(t, horizon / 2, horizon), horizon)
    return {"hit_late": float(hit[late].sum() / vp[late].sum()) if late.any() else None,
            "pending_late": float(np.dot(np.diff(edges), pending) / (horizon / 2)),
            "prefix_hit_ratio": s.get("prefix_hit_ratio"), "pending_slope": slope,
            "pending_slope_se": se, "pending_final": s.get("pending_final"),
            "throughput_late": served, "preemptions": s.get("preemptions"),
            "evictions": s.get("evictions"), "cache_blocks_mean": s.get("cache_blocks_mean"),
            "kv_utilization": s.get("kv_utilization")}


def merged(runs: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Means over the seeds (a figure some runs lack: the mean of the others);
    with two seeds or more the slope's error is its standard error over them."""
    out: Dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs if r[key] is not None]
        out[key] = mr.mean_se(values)[0] if values else None
    if len(runs) > 1:
        out["pending_slope_se"] = mr.mean_se([r["pending_slope"] for r in runs])[1]
    return out


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """Per configuration, start (a) empty and (b) with ``initial`` requests,
    seeds ``seed .. seed + seeds - 1`` (the same arrivals for both starts);
    the logs asked for are those of the first seed."""
    horizon = options.horizon or HORIZON
    base, rows = options.seed or 0, []
    for config in parse_configs(params["configs"]):
        ideal, plain = config.capacities()
        for start, initial in (("empty", 0), ("backlog", params["initial"])):
            runs, first = [], None
            for seed in range(base, base + params["seeds"]):
                work = config.workload(initial, seed)
                result = serve(work, config.M, horizon=horizon, batches=True,
                               requests=True, timeseries=True)
                runs.append(figures(result, horizon))
                runs[-1]["hit_ideal"] = ideal_hit_ratio(
                    itertools.takewhile(lambda a: a.time < horizon, work), KV_BLOCK)
                first = first or result
            assert first is not None
            summary = Summary.from_mapping({
                "config": config.name, "start": start, "initial": initial, "kv": config.M,
                "rate": config.rate, "groups": config.groups, "shared": config.shared,
                "lambda_star_c": ideal, "lambda_star_none": plain, "seeds": params["seeds"],
                "horizon": horizon, **merged(runs)})
            kept = Result(summary, first.params, first.batch_log if options.batches else None,
                          first.request_log if options.requests else None,
                          first.series if options.timeseries else None)
            rows.append((f"{config.name} {start}", kept))
    return rows


def _flat(s: Summary) -> bool:
    slope, se = s["pending_slope"], s["pending_slope_se"] or 0.0
    return slope is not None and slope <= max(3 * se, FLAT)


def _slope(s: Summary) -> str:
    return f"{s['pending_slope']:+.3f} +- {s['pending_slope_se'] or 0:.3f} req/s"


def checks(rows: Rows) -> List[Check]:
    """Per configuration that ran both starts: one hit ratio, and no growth."""
    by: Dict[str, Dict[str, Summary]] = {}
    for _, r in rows:
        by.setdefault(r.summary["config"], {})[r.summary["start"]] = r.summary
    out: List[Check] = []
    for name, starts in by.items():
        a, b = starts.get("empty"), starts.get("backlog")
        if a is None or b is None or a["hit_late"] is None or b["hit_late"] is None:
            continue
        out.append(Check(f"{name}: both starts end at one hit ratio (within {HIT_GAP:g}, "
                         "second half)", abs(a["hit_late"] - b["hit_late"]) <= HIT_GAP,
                         f"empty {a['hit_late']:.4f}, backlog of {b['initial']} "
                         f"{b['hit_late']:.4f}"))
        out.append(Check(f"{name}: neither start keeps growing (pending slope over the "
                         f"second half <= max(3 se, {FLAT:g}) req/s)", _flat(a) and _flat(b),
                         f"empty {_slope(a)}, backlog {_slope(b)}"))
    return out


def _verdict(a: Summary, b: Summary) -> str:
    """What the two starts of one configuration show, in words."""
    same = abs(a["hit_late"] - b["hit_late"]) <= HIT_GAP
    flat = _flat(a) and _flat(b)
    if same and flat:
        return "one state: both starts end at the same hit ratio and neither grows"
    if _flat(a) and not _flat(b):
        return ("two states: the empty start holds, the backlog start keeps growing"
                + ("" if same else " at another hit ratio"))
    if not _flat(a) and not _flat(b):
        return "both starts grow" + ("" if same else ", at different hit ratios")
    if not flat:
        return "the empty start grows, the backlog start does not"
    return "the hit ratios differ though neither start grows"


def notes(rows: Rows, params: Dict[str, Any]) -> List[str]:
    """The configurations' capacities, and what the two starts show."""
    by: Dict[str, Dict[str, Summary]] = {}
    for _, r in rows:
        by.setdefault(r.summary["config"], {})[r.summary["start"]] = r.summary
    out: List[str] = []
    for name, starts in by.items():
        s = next(iter(starts.values()))
        out.append(f"{name}: {s['rate']:.2f} req/s, M = {s['kv']:,} tokens; capacity with "
                   f"every prefix cached {s['lambda_star_c']:.2f} req/s, without the cache "
                   f"{s['lambda_star_none']:.2f} req/s; an unlimited cache would hit "
                   f"{s['hit_ideal']:.3f} of these arrivals' prompt tokens.")
        a, b = starts.get("empty"), starts.get("backlog")
        if a is None or b is None or a["hit_late"] is None or b["hit_late"] is None:
            continue
        out.append(f"  second half: hit {a['hit_late']:.4f} (empty) and {b['hit_late']:.4f} "
                   f"(backlog), mean pending {a['pending_late']:.0f} and "
                   f"{b['pending_late']:.0f}: {_verdict(a, b)}.")
    if rows:
        out.append(f"Hit ratios over the second half of {rows[0][1].summary['horizon']:g} s "
                   "count each request at its first start (from the batch log).")
        out.append("Why a backlog need not crowd the cache here: under sarathi a waiting "
                   "request holds no KV until its first chunk, so a backlog lengthens the "
                   "queue, not the residents' list, whose size the token budget sets; the "
                   "cache is as crowded as in a calm run at the same load.")
    return out


COLUMNS: Sequence[Column] = [
    ("rate", "req/s", "{:.2f}"), ("kv", "M", "{:,}"), ("initial", "at t=0", "{:d}"),
    ("prefix_hit_ratio", "hit (all)", "{:.4f}"), ("hit_late", "hit (2nd half)", "{:.4f}"),
    ("throughput_late", "served req/s", "{:.2f}"),
    ("pending_slope", "pending slope", "{:+.3f}"), ("pending_slope_se", "+- se", "{:.3f}"),
    ("pending_final", "pending end", "{:,.0f}"), ("preemptions", "preemptions", "{:,.0f}"),
    ("evictions", "evictions", "{:,.0f}"), ("cache_blocks_mean", "cached blocks", "{:,.0f}")]

EXPERIMENT = register(Experiment(
    name="prefix-collapse",
    summary="cache collapse: an empty start and a backlog of 400 requests on a prefix cache "
            "that residents crowd (8 system prompts; 1,000 short shared prefixes)",
    params={"configs": Param("str", "all", f"comma-separated configurations "
                             f"({', '.join(CONFIGS)}) or all"),
            "initial": Param("int", INITIAL, "requests waiting at t = 0 in the backlog start",
                             low=1),
            "seeds": Param("int", 1, "runs per row (figures averaged)", low=1)},
    run=run, checks=checks, columns=COLUMNS, notes=notes, horizon=HORIZON, seeded=True,
    options=frozenset({"horizon", "seed"} | mr.RECORDINGS)))
