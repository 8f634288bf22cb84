"""Routing with prefixes: K engines, each with its own prefix cache, behind a
router that does or does not read those caches.

Requests come from ``G`` prefix groups of Zipf popularity (each prompt is its
group's ``S`` shared tokens and a suffix of its own) as Poisson arrivals at a
fraction ``load`` of the K-engine capacity with hits, ``K lambda*_c``, where
``lambda*_c = (bmax / t_bmax) / (E[vp] - E[c] + E[vd])`` and ``E[c]`` is the
hit once every group's prefix is cached (``floor(S / H) H``).  Each engine
has a KV cache of ``kv = M`` tokens that cannot keep every group's prefix
with its residents, so where a request goes decides whether its prefix is
found: ``random`` and ``jsq-tokens`` spread every group over every engine
(each engine keeps, and evicts, every group's prefix), ``prefix-affinity``
sends a request to the engine with its longest cached prefix (a group
settles on few engines) and ``prefix-score`` weighs the hit against the
backlog.  The cache-aware routers find more of every prompt cached, so
their engines compute fewer tokens and their queues stay short; with a
cache too small for the load (``kv=60000``) the routers that ignore the
caches fall behind for good.

Every router runs on the same arrivals for a seed, ``seeds`` seeds from
``--seed`` on.  A row per router and seed: the network's figures (hit ratio,
TTFT, preemptions, evictions), the tokens each engine processed (prompt
tokens computed and decode tokens: their spread says how evenly the router
shares the work), and the slope of pending requests over the second half of
the arrivals (its verdict says whether the queue holds).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from llmqueue.common import validation
from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result
from llmqueue.experiments import memory_runs, prefix_runs
from llmqueue.experiments.base import (Check, Column, Experiment, Param, Rows, engine_kwargs,
                                       engine_params, latency_of, register)
from llmqueue.experiments.traffic import PREFIX_PARAMS, read_size, size_law
from llmqueue.models.prefixes import MAX_GROUPS, PrefixGroups
from llmqueue.models.sizes import SIZE_FORMS, decode_mean
from llmqueue.models.workload import Workload
from llmqueue.network.network import Network
from llmqueue.network.routers import make_router, router_names
from llmqueue.theory.prefix import group_mean_hit, lambda_star_cached
from llmqueue.theory.stability import measured_verdict

ENGINES = 4
GROUPS = 32
ZIPF = 1.1
SHARED = 1536                   # tokens every prompt of a group shares
SUFFIX = "geometric:128"        # each prompt's own tokens
DECODE = "geometric:128"
CACHE = 100_000                 # M: KV tokens per engine
LOAD = 0.8                      # of K lambda*_c
REQUESTS = 8_000
SEEDS = 3
WEIGHT = 0.5                    # prefix-score's w
#: The routers ``router=all`` runs: two that ignore the caches, two that read them.
BLIND = ("random", "jsq-tokens")
AWARE = ("prefix-affinity", "prefix-score")
ROUTERS = BLIND + AWARE
#: What a run honours: its seed and the logs (a run has a fixed count of
#: arrivals, so no horizon).
OPTIONS = frozenset({"seed", "batches", "requests", "timeseries"})


def hash_block(p: Mapping[str, Any]) -> int:
    """``H``: ``p["hash_block"]``, else the KV block size."""
    return validation.positive_int("hash_block", p.get("hash_block") or p["kv_block"])


def mean_sizes(p: Mapping[str, Any]) -> Tuple[float, float, float]:
    """``(E[vp], E[c], E[vd])`` in tokens: the mean prompt (shared tokens and
    suffix), its hit once every group's prefix is cached, the mean output."""
    suffix, decode = size_law("vp", p["vp"]), size_law("vd", p["vd"])
    shared = validation.token_count("shared", p["shared"])
    output = decode_mean(decode)  # draws of 0 give 1
    if output is None:
        raise ValueError(f"vd: {decode!r} does not say how often it draws 0")
    return shared + suffix.mean, group_mean_hit(shared, hash_block(p), suffix), output


def capacity(p: Mapping[str, Any]) -> float:
    """``lambda*_c`` of one engine (requests/s): Theorem 2 at the prompt
    tokens left to compute once every group's prefix is cached."""
    if p["bmax"] is None:
        raise ValueError("bmax must be an integer >= 1 here (lambda* needs a budget), got None")
    vp, hit, vd = mean_sizes(p)
    return lambda_star_cached(p["bmax"], vp, vd, hit, latency_of(p))


def arrival_rate(p: Mapping[str, Any]) -> float:
    """Requests per second into the pool: ``load`` times ``K lambda*_c``."""
    if not p["load"] > 0:
        raise ValueError(f"load must be a number > 0, got {p['load']!r}")
    return p["load"] * validation.positive_int("engines", p["engines"]) * capacity(p)


def workload(p: Mapping[str, Any], seed: int) -> Workload:
    """``requests`` Poisson arrivals at :func:`arrival_rate` from the prefix
    groups (without their ids when the engines have no prefix cache)."""
    groups = PrefixGroups(p["prefix_groups"], p["zipf"], p["shared"], size_law("vp", p["vp"]),
                          size_law("vd", p["vd"]), rate=arrival_rate(p), count=p["requests"],
                          seed=seed, hash_block=hash_block(p))
    return groups if p["prefix"] and p["kv"] is not None else groups.without_ids()


def routers(p: Mapping[str, Any]) -> List[str]:
    """The routers a run compares: :data:`ROUTERS`, or the one named (a
    ``prefix_weight`` away from its default needs ``prefix-score`` among them)."""
    names = list(ROUTERS) if p["router"] == "all" else [p["router"]]
    if p["prefix_weight"] != WEIGHT and "prefix-score" not in names:
        raise ValueError(f"prefix_weight is read by router prefix-score only; got "
                         f"router={p['router']}")
    return names


def simulate_router(p: Mapping[str, Any], router: str, seed: int,
                    options: Optional[RunOptions] = None) -> Result:
    """One run of the pool behind ``router`` on seed ``seed``'s arrivals: the
    network's result, with the figures of the module's docstring added
    (``options``: whether to keep the batch log; the request log and the
    pending series are always kept)."""
    options = RunOptions() if options is None else options
    kw = engine_kwargs(p)
    options_of = {"weight": p["prefix_weight"]} if router == "prefix-score" else {}
    net = Network(seed=seed, batches=options.batches)
    net.add_replicas("engine", p["engines"], make_router(router, seed, **options_of), **kw)
    work = workload(p, seed)
    net.feed("engine", work)
    result = net.run()
    total = result.total
    tokens = [r.summary["throughput_tokens_per_s"] * r.summary["duration"]
              if r.summary["duration"] else 0.0 for r in result.engines.values()]
    end = max(a.time for a in work)  # the pending slope over the arrivals' second half
    slope, slope_se = memory_runs.pending_slope(total, end) if end > 0 else (None, None)
    vp, hit, _ = mean_sizes(p)
    total.add_figures(
        router=router, seed=seed, engines=p["engines"], kv=p["kv"], rate=arrival_rate(p),
        lambda_star_c=capacity(p), hit_bound=hit / vp,
        tokens_min=round(min(tokens)), tokens_max=round(max(tokens)),
        tokens_spread=(max(tokens) - min(tokens)) / float(np.mean(tokens))
        if np.mean(tokens) > 0 else None,
        pending_slope=slope, pending_slope_se=slope_se,
        verdict=measured_verdict(slope, slope_se, arrival_rate(p)),
        **({"prefix_weight": p["prefix_weight"]} if router == "prefix-score" else {}))
    return total


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """A row per seed and router (routers in the order of :data:`ROUTERS`)."""
    validation.positive_int("seeds", params["seeds"])
    base = options.seed or 0
    return [(f"{router} seed {seed}", simulate_router(params, router, seed, options))
            for seed in range(base, base + params["seeds"]) for router in routers(params)]


def by_seed(rows: Rows) -> Dict[int, Dict[str, Dict[str, Any]]]:
    """The rows' summaries by seed, then router."""
    out: Dict[int, Dict[str, Dict[str, Any]]] = {}
    for _, r in rows:
        out.setdefault(r.summary["seed"], {})[r.summary["router"]] = r.summary.as_dict()
    return out


def _better(rows: Rows, aware: str, key: str, higher: bool) -> Optional[Check]:
    """Whether ``aware`` beats both :data:`BLIND` routers on ``key`` on every seed."""
    seeds = by_seed(rows)
    if not seeds or any(not set(BLIND + (aware,)) <= set(s) for s in seeds.values()):
        return None
    passed, shown = True, []
    for seed, s in sorted(seeds.items()):
        mine, others = s[aware][key], [s[b][key] for b in BLIND]
        ok = mine is not None and all(o is not None and (mine > o if higher else mine < o)
                                      for o in others)
        passed &= ok
        shown.append(f"seed {seed}: {_value(mine, key)} against "
                     f"{' / '.join(_value(o, key) for o in others)}")
    name = "prefix hit ratio higher" if higher else "TTFT p90 lower"
    return Check(f"{aware}: {name} than {' and '.join(BLIND)} on every seed", passed,
                 "; ".join(shown))


def _value(value: Optional[float], key: str) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if key == "prefix_hit_ratio" else f"{value:.2f} s"


def checks(rows: Rows) -> List[Check]:
    """The cache-aware routers find more cached and answer sooner than the
    others, on every seed (where the rows hold all four, with prefix caches)."""
    if any(r.summary.as_dict().get("prefix_hit_ratio") is None for _, r in rows):
        return []
    out = [_better(rows, aware, key, higher) for aware in AWARE
           for key, higher in (("prefix_hit_ratio", True), ("ttft_p90", False))]
    return [c for c in out if c is not None]


def means(rows: Rows, key: str) -> Dict[str, Tuple[float, Optional[float]]]:
    """Mean over seeds of figure ``key`` and its standard error, per router
    (routers whose figure is undefined on some seed are left out)."""
    values: Dict[str, List[Any]] = {}
    for _, r in rows:
        values.setdefault(r.summary["router"], []).append(r.summary.as_dict().get(key))
    return {router: memory_runs.mean_se(v) for router, v in values.items()
            if v and all(x is not None for x in v)}


def _mean(pair: Tuple[float, Optional[float]], fmt: str) -> str:
    mean, se = pair
    return fmt.format(mean) + ("" if se is None else " +- " + fmt.replace("+", "").format(se))


def notes(rows: Rows, params: Dict[str, Any]) -> List[str]:
    """The arrival rate, each router's means over the seeds, and how the two
    cache-aware routers compare."""
    if not rows:
        return []
    first = rows[0][1].summary
    vp, hit, vd = mean_sizes(params)
    cache = "no KV cache" if params["kv"] is None else \
        f"M = {params['kv']:,} KV tokens per engine"
    out = [f"{first['rate']:.2f} req/s = {params['load']:g} x {params['engines']} x "
           f"lambda*_c, lambda*_c = {first['lambda_star_c']:.2f} req/s per engine "
           f"(E[vp] = {vp:g}, E[c] = {hit:g}, E[vd] = {vd:g} tokens); {cache}"]
    hits, ttft = means(rows, "prefix_hit_ratio"), means(rows, "ttft_p90")
    spread, slope = means(rows, "tokens_spread"), means(rows, "pending_slope")
    seeds = len(by_seed(rows))
    for router in dict.fromkeys(r.summary["router"] for _, r in rows):
        parts = [f"hit {_mean(hits[router], '{:.3f}')}" if router in hits else "",
                 f"TTFT p90 {_mean(ttft[router], '{:.2f}')} s" if router in ttft else "",
                 f"tokens per engine spread {_mean(spread[router], '{:.1%}')}"
                 if router in spread else "",
                 f"pending slope {_mean(slope[router], '{:+.2f}')} req/s"
                 if router in slope else ""]
        out.append(f"{router} (mean of {seeds} seed{'s' if seeds > 1 else ''}): "
                   + ", ".join(p for p in parts if p))
    if set(AWARE) <= set(hits) and set(AWARE) <= set(ttft):
        a, s = AWARE
        wins = sum(v[s]["ttft_p90"] < v[a]["ttft_p90"] for v in by_seed(rows).values()
                   if a in v and s in v)
        out.append(f"{s} against {a}: hit {hits[s][0]:.3f} vs {hits[a][0]:.3f}, TTFT p90 "
                   f"{ttft[s][0]:.2f} vs {ttft[a][0]:.2f} s (lower on {wins} of {seeds} "
                   f"seed{'s' if seeds > 1 else ''})")
    return out


#: Number formats of the table's columns (others: two decimals).
FORMATS = {"prefix_hit_ratio": "{:.3f}", "preemptions": "{:d}", "evictions": "{:d}",
           "tokens_min": "{:,d}", "tokens_max": "{:,d}", "tokens_spread": "{:.1%}",
           "pending_slope": "{:+.2f}", "verdict": "{}", "completed": "{:d}"}
#: The table: summary key, heading and format of each column.
COLUMNS: Sequence[Column] = [(key, heading, FORMATS.get(key, "{:.2f}")) for key, heading in (
    ("prefix_hit_ratio", "hit ratio"), ("ttft_p50", "TTFT p50 s"), ("ttft_p90", "TTFT p90 s"),
    ("ttft_p99", "TTFT p99 s"), ("preemptions", "preempted"), ("evictions", "evictions"),
    ("tokens_min", "tokens/engine min"), ("tokens_max", "max"), ("tokens_spread", "spread"),
    ("pending_slope", "pending slope/s"), ("verdict", "verdict"), ("completed", "done"))]


#: The engine's keys (its defaults those of the module's docstring), the
#: routers', the load's and the workload's.
PARAMS: Dict[str, Param] = {
    **engine_params(bmax=prefix_runs.BMAX, kmax=None, kv=CACHE, kv_block=prefix_runs.KV_BLOCK,
                    prefix=True),
    "engines": Param("int", ENGINES, "number of identical engines K", low=1),
    "router": Param("str", "all", f"router (all: {', '.join(ROUTERS)})",
                    tuple(router_names()) + ("all",)),
    "prefix_weight": Param("float", WEIGHT, "prefix-score's weight w of the hit against the "
                           "backlog", low=0.0, high=1.0),
    "load": Param("float", LOAD, "arrival rate as a fraction of K lambda*_c (capacity with "
                  "every group's prefix cached)", above=0.0),
    "prefix_groups": Param("int", GROUPS, "prefix groups G", low=1, high=MAX_GROUPS),
    **{name: replace(PREFIX_PARAMS[name], default=value, quiet_default=False)
       for name, value in (("zipf", ZIPF), ("shared", SHARED))},
    "vp": Param("custom", SUFFIX, "each prompt's own tokens after the shared ones",
                reader=read_size, forms=f"a size law: {SIZE_FORMS}"),
    "vd": Param("custom", DECODE, "output tokens per request", reader=read_size,
                forms=f"a size law: {SIZE_FORMS}"),
    "hash_block": PREFIX_PARAMS["hash_block"],
    "requests": Param("int", REQUESTS, "requests per run", low=1),
    "seeds": Param("int", SEEDS, "runs per router, seeds from --seed on", low=1)}

EXPERIMENT = register(Experiment(
    name="prefix-routing", summary="K engines with prefix caches behind routers that do or "
    "do not read them: hit ratio and TTFT", params=PARAMS, run=run, checks=checks,
    columns=COLUMNS, notes=notes, network=True, options=OPTIONS, seeded=True))
