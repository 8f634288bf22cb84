"""A small LRU prefix cache against Che's approximation.

Requests come from G = 200 prefix groups of Zipf popularity (s = 0.8): each
prompt is its group's 512 shared tokens (32 hash blocks of 16) followed by
64 tokens of its own (4 blocks nobody reuses), and it decodes 16 tokens.
Poisson arrivals at 0.3 of the capacity **without** the cache
(3342.9 / 592 x 0.3 = 1.694 req/s): a light load whatever the hits, so the
residents hold little memory and the cache's size M decides what it keeps.
The engine is sarathi with bmax = 512, no kmax, the staircase and a KV cache
of M tokens in blocks of 16, which evicts the least recently used block.

Che's approximation (:func:`~llmqueue.theory.prefix.che`) finds the
characteristic time T of an LRU cache of C hash blocks from
``sum_g n_g (1 - exp(-lambda p_g T)) + lambda E[u] T = C`` and predicts the
hit ratio ``sum_g p_g (1 - exp(-lambda p_g T)) n_g H / E[vp]``, with
C = floor((M - R) / H) and R the KV tokens the residents hold of their own.
Here a resident's prompt is all cache entries once computed (its hits, and
each block it completes, which becomes an entry), so what it holds of its
own is the KV of its output and of a partial last prompt block:
``ceil((vp + vd) / B) B - floor(vp / H) H`` tokens from the end of its
prefill to its finish.  R is that, summed over the request log and divided by
the measured span (Little's law), about 20 tokens at this load; a prompt
chunk is its own only during the iteration that computes it, left out.
(The run's ``kv_mean``, about 800-1000 tokens, is not R: it counts the
residents' prompts, which are cache entries, in use, and part of C.)

Che's model has no cold start, so the simulated ``prefix_hit_ratio`` is that
of the second half of each run of 20,000 requests (a warm-up of half the
arrivals' span).  At M = 20,000, 50,000, 100,000 and 400,000 tokens the two
agree within 0.02, and both rise with M towards 512 / 576 = 0.889, the share
of a prompt that every group's cached prefix would save.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result
from llmqueue.experiments import memory_runs as mr
from llmqueue.experiments.base import Check, Column, Experiment, Param, Rows, register
from llmqueue.experiments.prefix_runs import BMAX, KV_BLOCK, LATENCY, serve
from llmqueue.models.prefixes import PrefixGroups, zipf_popularity
from llmqueue.theory import capacity
from llmqueue.theory.prefix import che

GROUPS = 200
ZIPF = 0.8
SHARED = 512                  # tokens a group's prompts share
SUFFIX = 64                   # each prompt's own tokens
DECODE = 16
LOAD = 0.3                    # of the capacity without the cache
REQUESTS = 20_000
CACHES = (20_000, 50_000, 100_000, 400_000)
#: Simulated against predicted hit ratio: within this (absolute).
TOLERANCE = 0.02
#: What ``llmqueue list`` says it runs.
SUMMARY = ("an LRU prefix cache of 20,000 to 400,000 tokens against Che's approximation "
           "(200 Zipf groups, light load)")
#: The ``--set`` parameters: the cache sizes and the requests per run.
PARAMS: Dict[str, Param] = {
    "caches": Param("str", ",".join(str(m) for m in CACHES),
                    "comma-separated cache sizes M (KV tokens)"),
    "count": Param("int", REQUESTS, "requests per run (the second half measured)", low=2)}


def rate() -> float:
    """Arrivals per second: :data:`LOAD` of Theorem 2's capacity without the cache."""
    return LOAD * capacity.lambda_star(BMAX, SHARED + SUFFIX, DECODE, LATENCY)


def prediction(M: float, resident: float) -> Tuple[float, float, int]:
    """Che's ``(hit ratio, T in s, C in hash blocks)`` for a cache of ``M``
    tokens of which the residents hold ``resident`` of their own."""
    blocks = max(0, math.floor((M - resident) / KV_BLOCK))
    n = SHARED // KV_BLOCK
    unique = (SHARED + SUFFIX) // KV_BLOCK - n
    found = che(rate(), zipf_popularity(GROUPS, ZIPF), n, unique, blocks, KV_BLOCK,
                SHARED + SUFFIX)
    return found.hit_ratio, found.time, blocks


def resident_tokens(result: Result, start: float, end: float) -> float:
    """R: the mean KV tokens the residents of ``[start, end]`` held that no
    cache entry covers (see the module docstring), from the request log."""
    held = 0.0
    for r in result.requests():
        if r.prefill_done is None:
            continue
        begin, stop = max(r.prefill_done, start), min(end if r.finished is None
                                                      else r.finished, end)
        if stop > begin:
            own = -(-(r.vp + r.vd) // KV_BLOCK) * KV_BLOCK - r.vp // KV_BLOCK * KV_BLOCK
            held += own * (stop - begin)
    return held / (end - start)


def measure(M: int, count: int, seed: int) -> Result:
    """One run of ``count`` requests on the shared engine until its last
    arrival, its first half a warm-up, with Che's prediction at the measured
    R added."""
    work = PrefixGroups(GROUPS, ZIPF, SHARED, SUFFIX, DECODE, rate=rate(), count=count,
                        seed=seed, hash_block=KV_BLOCK)
    span = max(a.time for a in work)
    result = serve(work, M, horizon=span, warmup=span / 2, requests=True)
    resident = resident_tokens(result, span / 2, span)
    hit, time, blocks = prediction(M, resident)
    simulated = result.summary["prefix_hit_ratio"]
    result.add_figures(kv=M, rate=rate(), span=span, resident_tokens=resident,
                       capacity_blocks=blocks, che_time=time, che_hit_ratio=hit,
                       gap=None if simulated is None else simulated - hit,
                       hit_bound=SHARED // KV_BLOCK * KV_BLOCK / (SHARED + SUFFIX))
    return result


def caches_of(text: str) -> List[int]:
    """``"20000,50000"`` as cache sizes (whole tokens, at least a hash block)."""
    values = mr.parse_numbers("caches", text)
    if not all(v == int(v) and v >= KV_BLOCK for v in values):
        raise ValueError(f"caches must be comma-separated whole numbers of tokens >= "
                         f"{KV_BLOCK}; got {text!r}")
    return sorted(int(v) for v in values)


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """One row per cache size, smallest first, all on the same arrivals."""
    return [(f"M={M:,}", measure(M, params["count"], options.seed or 0))
            for M in caches_of(params["caches"])]


def curve(rows: Rows, points: int = 200) -> Tuple[np.ndarray, np.ndarray]:
    """Che's hit ratio on a fine grid of cache sizes around the rows' (tokens,
    log-spaced), at the mean R of the rows."""
    sizes = [r.summary["kv"] for _, r in rows]
    resident = float(np.mean([r.summary["resident_tokens"] for _, r in rows]))
    grid = np.geomspace(min(sizes) / 2, max(sizes) * 2, points)
    return grid, np.array([prediction(M, resident)[0] for M in grid])


def checks(rows: Rows) -> List[Check]:
    """Simulated against Che at every M; both rise with M."""
    s = [(label, r.summary) for label, r in rows]
    out = [Check(f"simulated hit ratio within {TOLERANCE:g} of Che's at every M",
                 all(v["gap"] is not None and abs(v["gap"]) <= TOLERANCE for _, v in s),
                 "; ".join(f"{label}: {_ratio(v['prefix_hit_ratio'])} against "
                           f"{v['che_hit_ratio']:.4f}" for label, v in s))]
    if len(s) > 1:
        for key, name in (("prefix_hit_ratio", "simulated"), ("che_hit_ratio", "Che's")):
            values = [v[key] for _, v in s]
            out.append(Check(f"{name} hit ratio rises with M",
                             all(a is not None and b is not None and b > a
                                 for a, b in zip(values, values[1:])),
                             " < ".join(_ratio(x) for x in values)))
    return out


def _ratio(value: Any) -> str:
    return "-" if value is None else f"{value:.4f}"


def notes(rows: Rows, params: Dict[str, Any]) -> List[str]:
    """The load and how R was measured."""
    if not rows:
        return []
    s = rows[0][1].summary
    resident = ", ".join(f"{r.summary['resident_tokens']:.0f}" for _, r in rows)
    held = ", ".join(f"{r.summary['kv_mean']:.0f}" for _, r in rows)
    return [f"{s['rate']:.3f} req/s, {params['count']:,} requests over {s['span']:.0f} s; "
            "hit ratios of the second half",
            f"R: KV tokens of the residents' own (their outputs), by Little's law over the "
            f"request log: {resident} tokens (kv_mean, which also counts the prompts the "
            f"residents hold as cache entries: {held})",
            f"every group's prefix cached would save {s['hit_bound']:.4f} of the prompt tokens"]


COLUMNS: Sequence[Column] = [
    ("kv", "M tokens", "{:,d}"), ("capacity_blocks", "C blocks", "{:,d}"),
    ("resident_tokens", "R tokens", "{:.0f}"), ("che_time", "T s", "{:.1f}"),
    ("che_hit_ratio", "Che", "{:.4f}"), ("prefix_hit_ratio", "simulated", "{:.4f}"),
    ("gap", "gap", "{:+.4f}"), ("evictions", "evictions", "{:,d}"),
    ("preemptions", "preempted", "{:d}")]


EXPERIMENT = register(Experiment(
    "prefix-che", SUMMARY, PARAMS, run, seeded=True, options=frozenset({"seed"}),
    checks=checks, columns=COLUMNS, notes=notes))
