"""Multi-turn sessions reuse their own transcripts: prefix caching's hits,
TTFT and prefill work, with a large and a small cache.

1,000 sessions arrive Poisson at 0.5 per second; each has a geometric number
of turns (mean 5), thinks an exponential 10 s (mean) after each answer, and
sends messages of geometric length (mean 64 tokens); each answer is geometric
(mean 128 tokens); no system prompt.  Turn k + 1's prompt is the whole
transcript so far (turn k's prompt, its answer and the new message), so with
the prefix cache on it finds all of it cached but the new message, if nothing
evicted it in between.  The engine of :mod:`~llmqueue.experiments.prefix_runs`
(sarathi, bmax 512, no kmax, blocks and hash blocks of 16 tokens) runs the
same sessions with the cache on and off (``prefix=False``, the sessions
without their ids), with a KV cache of M = 10^6 tokens (never full) and of
M = 20,000 tokens (full: preemptions, and cached blocks evicted).

Per row, means over the seeds (``seeds`` runs from ``--seed`` on) with their
standard errors: the hit ratio (first starts' hit tokens over their prompt
tokens), TTFT p50 and p90, prefill tokens computed per request (recomputes
included), preemptions, the hit tokens of restarts after a preemption
(``recompute_hit_tokens``) and evictions; the cache rows add TTFT p90 and
prefill per request as fractions of the no-cache run of the same M (each
seed's ratio, then their mean).

Checks: with M = 10^6 the cache cuts TTFT p90 and prefill per request on
every seed; with M = 20,000 the hit ratio falls below M = 10^6's and
preemptions appear.  At the reference sizes the figures are also held to an
independent stepper's (:data:`REFERENCE`), each within its tolerance widened
by two standard errors of our mean over the seeds (the two means are of
different seeds; per-seed spread is large at M = 20,000: preemptions range
over 1,650-2,420 in seeds 0-6).
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result, Summary
from llmqueue.experiments import memory_runs as mr
from llmqueue.experiments.base import Check, Column, Experiment, Param, Rows, register
from llmqueue.experiments.prefix_runs import serve
from llmqueue.models.sessions import Sessions
from llmqueue.models.sizes import Geometric

SESSIONS = 1000
RATE = 0.5                    # sessions per second
TURNS = Geometric(5)
THINK = 10.0                  # s, mean (exponential)
MESSAGE = Geometric(64)
DECODE = Geometric(128)
LARGE = 10**6                 # KV tokens: never full
SMALL = 20_000                # KV tokens: full, preempts and evicts
SEEDS = 3

#: An independent stepper's figures at the reference sizes (1,000 sessions at
#: 0.5/s, M = 10^6 and 20,000, 3 seeds): ``key -> (value, tolerance)``; keys
#: are ``"<figure>@<M>"``.
REFERENCE: Dict[str, Tuple[float, float]] = {
    f"prefix_hit_ratio@{LARGE}": (0.917, 0.006),
    f"ttft_ratio@{LARGE}": (0.087, 0.016),
    f"prefill_ratio@{LARGE}": (0.083, 0.006),
    f"prefix_hit_ratio@{SMALL}": (0.083, 0.021),
    f"preemptions@{SMALL}": (2110.0, 200.0),
    f"recompute_hit_tokens@{SMALL}": (1.69e6, 0.2e6)}
#: Standard errors of our mean (over the seeds) added to a reference tolerance.
SE_WIDTH = 2.0

#: Figures averaged over the seeds (each with ``<key>_se``); cache rows only after ``None``.
FIGURES = ("ttft_p50", "ttft_p90", "prefill_per_request", "preemptions", "requests",
           "kv_utilization")
CACHE_FIGURES = ("prefix_hit_ratio", "recompute_hit_tokens", "evictions", "ttft_ratio",
                 "prefill_ratio")


def sessions(params: Dict[str, Any], seed: int) -> Sessions:
    """The sessions of ``params`` (``sessions`` of them at ``rate`` per second)."""
    return Sessions(params["rate"], params["sessions"], TURNS, THINK, MESSAGE, DECODE,
                    seed=seed)


def figures(result: Result) -> Dict[str, Any]:
    """One run's figures: its summary's, prefill tokens computed per request
    (a run without the prefix cache: every prompt once plus the recomputed
    tokens) and the requests served.  Needs the request log."""
    s, log = result.summary, result.request_log
    if log is None:
        raise ValueError("figures needs a run recorded with requests=True")
    computed = s.get("prefill_computed_tokens")
    if computed is None:
        computed = sum(r.vp for r in log if r.prefill_done is not None) + s["recomputed_tokens"]
    out = {key: s.get(key) for key in FIGURES + CACHE_FIGURES[:3]}
    out.update(requests=len(log), prefill_per_request=computed / max(1, len(log)),
               sessions_completed=s.get("sessions_completed"), sessions_cut=s.get("sessions_cut"))
    return out


def merge(runs: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Means over the seeds of every figure the runs define, each with its
    standard error ``<key>_se`` (``None`` with one seed), and the per-seed
    values of the ratios (``<key>s``)."""
    out: Dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs]
        if any(v is None for v in values):
            out[key], out[f"{key}_se"] = None, None
            continue
        out[key], out[f"{key}_se"] = mr.mean_se(values)
        if key.endswith("_ratio") and key != "prefix_hit_ratio":
            out[f"{key}s"] = [float(v) for v in values]
    return out


def label_of(M: int, prefix: bool) -> str:
    """A row's label: the cache size and whether the prefix cache is on."""
    return f"M={M:,} " + ("cache" if prefix else "no cache")


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """For each M (``large``, then ``small``), the same sessions with the
    prefix cache and without, ``seeds`` seeds from ``--seed`` on; the rows
    keep the first seed's TTFTs (and its request log with ``--requests``)."""
    base = options.seed or 0
    rows: Rows = []
    for M in (params["large"], params["small"]):
        runs: Dict[bool, List[Dict[str, Any]]] = {True: [], False: []}
        first: Dict[bool, Result] = {}
        for seed in range(base, base + params["seeds"]):
            work = sessions(params, seed)
            for prefix in (True, False):
                result = serve(work if prefix else work.without_ids(), M, prefix,
                               requests=True)
                runs[prefix].append(figures(result))
                first.setdefault(prefix, result)
        for on, off in zip(runs[True], runs[False]):
            on["ttft_ratio"] = on["ttft_p90"] / off["ttft_p90"]
            on["prefill_ratio"] = on["prefill_per_request"] / off["prefill_per_request"]
        for prefix in (True, False):
            kept = first[prefix]
            summary = Summary.from_mapping({
                "kv": M, "prefix": prefix, "sessions": params["sessions"],
                "rate": params["rate"], "seeds": params["seeds"], **merge(runs[prefix])})
            rows.append((label_of(M, prefix),
                         Result(summary, kept.params,
                                request_log=kept.request_log if options.requests else None,
                                ttft=kept.ttft, tpot=kept.tpot)))
    return rows


def reference_sizes(rows: Rows) -> bool:
    """Whether ``rows`` ran at the reference sizes (where :data:`REFERENCE` applies)."""
    s = rows[0][1].summary if rows else None
    return s is not None and s["sessions"] == SESSIONS and s["rate"] == RATE and \
        {r.summary["kv"] for _, r in rows} == {LARGE, SMALL}


#: The reference figures' names in the checks.
NAMES = {"prefix_hit_ratio": "hit ratio", "ttft_ratio": "TTFT p90 over the no-cache run's",
         "prefill_ratio": "prefill per request over the no-cache run's",
         "preemptions": "preemptions", "recompute_hit_tokens": "hit tokens at restarts"}


def _number(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.4g}"


def _reference(s: Summary, key: str) -> Check:
    """``key`` of cache row ``s`` against :data:`REFERENCE`."""
    target, tol = REFERENCE[f"{key}@{s['kv']}"]
    se = s.get(f"{key}_se")
    width = tol + SE_WIDTH * (se or 0.0)
    value = s[key]
    return Check(f"M={s['kv']:,}: {NAMES[key]} about {_number(target)} (+- {_number(tol)}, "
                 f"+- {_number(width)} with {SE_WIDTH:g} standard errors over the seeds)",
                 value is not None and abs(value - target) <= width,
                 "-" if value is None else _number(value)
                 + ("" if se is None else f" +- {_number(se)}"))


def checks(rows: Rows) -> List[Check]:
    """The directions the cache must show, then (at the reference sizes) the
    reference figures."""
    found = {(r.summary["kv"], r.summary["prefix"]): r.summary for _, r in rows}
    large, small = max(k for k, _ in found), min(k for k, _ in found)
    big, tight = found.get((large, True)), found.get((small, True))
    out: List[Check] = []
    if big is not None:
        out.append(Check(f"M={large:,}: the cache cuts TTFT p90 and prefill per request on "
                         "every seed", all(x < 1 for x in big["ttft_ratios"] +
                                           big["prefill_ratios"]),
                         f"TTFT p90 ratios {_ratios(big['ttft_ratios'])}, prefill ratios "
                         f"{_ratios(big['prefill_ratios'])}"))
    if big is not None and tight is not None and small < large:
        out.append(Check(f"M={small:,}: the hit ratio falls below M={large:,}'s and "
                         "preemptions appear",
                         tight["prefix_hit_ratio"] < big["prefix_hit_ratio"]
                         and tight["preemptions"] > 0,
                         f"hit ratio {tight['prefix_hit_ratio']:.4f} against "
                         f"{big['prefix_hit_ratio']:.4f}, {tight['preemptions']:,.0f} "
                         "preemptions per run"))
    if reference_sizes(rows) and big is not None and tight is not None:
        out += [_reference(s, key) for s in (big, tight) for key in CACHE_FIGURES +
                ("preemptions",) if f"{key}@{s['kv']}" in REFERENCE]
    return out


def _ratios(values: Sequence[float]) -> str:
    return "/".join(f"{v:.3f}" for v in values)


def notes(rows: Rows, params: Dict[str, Any]) -> List[str]:
    """What the runs are, and what the two caches show."""
    found = {(r.summary["kv"], r.summary["prefix"]): r.summary for _, r in rows}
    out = [f"{params['sessions']:,} sessions at {params['rate']:g}/s, {params['seeds']} seed"
           f"{'s' if params['seeds'] > 1 else ''}; figures are means over the seeds (+- their "
           "standard error); ratios are each seed's cache run over its no-cache run, averaged."]
    for M in sorted({k for k, _ in found}, reverse=True):
        on, off = found.get((M, True)), found.get((M, False))
        if on is None or off is None:
            continue
        out.append(f"M={M:,}: the cache finds {on['prefix_hit_ratio']:.1%} of first starts' "
                   f"prompts cached; TTFT p90 {on['ttft_p90']:.3g} s against "
                   f"{off['ttft_p90']:.3g} s ({on['ttft_ratio']:.3f}), prefill "
                   f"{on['prefill_per_request']:.1f} against {off['prefill_per_request']:.1f} "
                   f"tokens per request ({on['prefill_ratio']:.3f}); "
                   f"{on['preemptions']:,.0f} preemptions against {off['preemptions']:,.0f}, "
                   f"{on['recompute_hit_tokens']:,.0f} tokens hit at restarts, "
                   f"{on['evictions']:,.0f} cached blocks evicted.")
    out.append("Why: a turn's prompt is the transcript so far, so a cache that keeps it for "
               "the think time spares all of it but the new message. A small cache is full "
               "of the residents' own blocks: a thinking session's blocks are evicted before "
               "its next turn, and preempted requests find part of their own work cached "
               "when they restart (recompute hits).")
    if not reference_sizes(rows):
        out.append("The reference figures apply at 1,000 sessions at 0.5/s with "
                   f"M = {LARGE:,} and {SMALL:,}: not checked here.")
    return out


COLUMNS: Sequence[Column] = [
    ("requests", "requests", "{:,.0f}"), ("prefix_hit_ratio", "hit ratio", "{:.4f}"),
    ("ttft_p50", "TTFT p50 s", "{:.3g}"), ("ttft_p90", "TTFT p90 s", "{:.3g}"),
    ("ttft_ratio", "p90 ratio", "{:.3f}"),
    ("prefill_per_request", "prefill/req", "{:.1f}"), ("prefill_ratio", "ratio", "{:.3f}"),
    ("preemptions", "preemptions", "{:,.0f}"),
    ("recompute_hit_tokens", "restart hits", "{:,.0f}"), ("evictions", "evictions", "{:,.0f}")]

EXPERIMENT = register(Experiment(
    name="prefix-sessions",
    summary="multi-turn sessions with and without the prefix cache, M = 10^6 and 20,000 "
            "tokens: hits, TTFT p90, prefill per request, preemptions",
    params={"sessions": Param("int", SESSIONS, "sessions per run", low=1),
            "rate": Param("float", RATE, "sessions per second", low=1e-6),
            "seeds": Param("int", SEEDS, "runs per row, seeds from --seed on", low=1),
            "large": Param("int", LARGE, "the large KV cache M (tokens)", low=16),
            "small": Param("int", SMALL, "the small KV cache M (tokens)", low=16)},
    run=run, checks=checks, columns=COLUMNS, notes=notes, seeded=True,
    options=frozenset({"seed", "requests"})))
