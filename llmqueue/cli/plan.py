"""The ``llmqueue plan`` subcommand (docs/model.md §7.7-7.9): an engine's goodput under an
SLO, and with ``--engines-for RATE`` the fewest engines for a rate.

The engine and workload are ``--set`` parameters of ``run single``
(``scheduler``, ``bmax``, ``kmax``, ``chunked``, the latency keys
``latency=staircase|step|roofline`` with ``c``, ``a``, ``b0`` or ``gpu``,
``model``, ``tp``, ``efficiency``, and ``vp``/``vd`` as size laws: ``N``,
``uniform:LO:HI``, ``geometric:MEAN``, ``lognormal:MEAN:CV``,
``empirical:FILE``), read as ``run single`` reads them, with
``arrival=poisson|gamma:CV`` (Poisson by default), and the KV cache keys
(``kv=TOKENS|auto``, ...), which add the memory bound ``lambda_kv``.  ``--tbt``
gates each request's largest inter-token gap.  An SLO infeasible at zero load
is a statement, not an error (exit 0).

Prefix groups (``prefix_groups=G``, ``shared=S``, ``zipf=s``, ``hash_block=H``,
with ``vp`` the suffix law) give prompts shared heads; with ``prefix=on`` (and
``kv``) the probes run a prefix cache on requests with content ids and the
bounds read the effective prompt (:mod:`llmqueue.planning.hits`).  Sessions
are refused: see :data:`SESSIONS`.
"""

from __future__ import annotations

import argparse
import csv
import math
from typing import Any, Dict, List, Optional, Tuple

from llmqueue import experiments
from llmqueue.cli import settings
from llmqueue.cli.report import strict_json, table
from llmqueue.common import files, validation
from llmqueue.experiments.base import engine_kwargs
from llmqueue.experiments.traffic import hash_block_of, size_law
from llmqueue.network.routers import check_traffic, router_names
from llmqueue.planning.engines import plan_engines, pool_limit
from llmqueue.planning.hits import cached_bounds
from llmqueue.planning.plan import PlanResult, bounds_of, check_slo, plan, shown_quantile
from llmqueue.planning.spec import EngineSpec, Traffic, arrival_cv
from llmqueue.sweeps.executors import open_executor
from llmqueue.theory.slo import SLO

#: Keys of `run single` a plan does not take: it searches the rate and draws its
#: own requests.
REFUSED = ("rate", "gap", "initial")
#: Keys of sessions, which a plan cannot take: a session's next turn arrives a
#: think time after its previous one finishes, so its requests are no unit-rate
#: stream whose gaps a plan could scale by the rate it probes.
SESSIONS = ("sessions", "turns", "think", "message", "system")
#: Keys of prefix groups that mean nothing without ``prefix_groups``.
GROUP_KEYS = ("shared", "zipf", "hash_block")


def add_parser(sub: "argparse._SubParsersAction") -> None:
    """Add ``plan`` to the command's subparsers."""
    p = sub.add_parser("plan", help="goodput of an engine under an SLO (and the fewest "
                                    "engines for a rate)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="an engine or workload parameter of `run single` (repeatable); "
                        "vp/vd take size laws, arrival=poisson|gamma:CV")
    for name in ("ttft", "tpot", "tbt", "e2e"):
        p.add_argument(f"--{name}", type=float, help=f"{name.upper()} threshold (s)")
    p.add_argument("--target", type=float, default=0.9, help="attainment target (0.9)")
    p.add_argument("--mode", default="joint", help="joint (default) or quantile")
    p.add_argument("--reps", type=int, default=5, help="replications per round (5)")
    p.add_argument("--requests", type=int, default=2000, help="measured requests (2000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (0)")
    p.add_argument("--price", type=float, help="$ per GPU-hour: adds the cost")
    p.add_argument("--engines-for", type=float, metavar="RATE",
                   help="also find the fewest engines for RATE requests/s")
    p.add_argument("--router", default="jsq-tokens",
                   help=f"router of --engines-for: {', '.join(router_names())}")
    p.add_argument("--workers", type=int, help="run replications on N processes")
    p.add_argument("--dask", metavar="ADDRESS", help="run replications on a Dask cluster")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--csv", metavar="FILE", help="write the probes as CSV")
    p.add_argument("--plot", metavar="FILE", help="PNG of attainment and latency vs rate")
    p.set_defaults(handler=cmd_plan)


def configure(pairs: List[str]) -> tuple:
    """``(EngineSpec, Traffic)`` from ``--set`` pairs."""
    values = settings.pairs(pairs)
    for key in REFUSED:
        if key in values:
            raise ValueError(f"{key} cannot be set for plan: the plan searches the rate "
                             "and draws its own requests")
    for key in SESSIONS:
        if key in values:
            raise ValueError(f"{key} cannot be set for plan: a session's turns arrive a think "
                             "time after the previous turn finishes (closed loops), not as a "
                             "stream a plan can scale to each rate; plan prefix_groups=G, or "
                             "run sessions with `run single`")
    arrival = values.pop("arrival", "poisson")
    p = experiments.REGISTRY["single"].resolve(values)
    if p["first_token"] != "decode":  # an engine preset sets it
        raise ValueError("first_token=prefill cannot be planned: plan's replications run the "
                         "paper's model; set first_token=decode")
    kw = engine_kwargs(p)
    engine = EngineSpec(kw["policy"], kw["bmax"], kw["kmax"], kw["latency"], kw["chunked"],
                        kw["kv"])
    vp, vd, cv = size_law("vp", p["vp"]), size_law("vd", p["vd"]), arrival_cv(arrival)
    if p["prefix_groups"] is not None:
        traffic = Traffic.prefix_groups(p["prefix_groups"], p["shared"], vp, vd, p["zipf"], cv,
                                        hash_block_of(p))
        return engine, traffic
    for key in GROUP_KEYS:
        if key in values:
            raise ValueError(f"{key} needs prefix_groups=G (the prompts' shared heads); "
                             "got no prefix_groups")
    if p["prefix"]:
        raise ValueError("prefix=on needs a workload whose prompts share heads: set "
                         "prefix_groups=G and shared=S (vp is then each prompt's own suffix)")
    return engine, Traffic(vp, vd, cv)


def _fmt(x: Optional[float], spec: str = "{:.4g}") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else spec.format(x)


def _measured(r: PlanResult) -> str:
    """``; hit ratio at lo ...`` when the plan's pass at ``lo`` measured hits."""
    ratio, hit = r.at_lo.get("prefix_hit_ratio"), r.at_lo.get("mean_hit") or [None]
    if not ratio:
        return ""
    return (f"; measured at lo: hit ratio {_fmt(ratio[0], '{:.3f}')} +- "
            f"{_fmt(ratio[1], '{:.3f}')}, mean hit {_fmt(hit[0], '{:.4g}')} tokens")


def _row(r: PlanResult) -> Dict[str, Any]:
    b, at = r.bounds, r.at_lo
    key = shown_quantile(r.mode, r.target)[0]
    cost = r.cost
    return {"label": f"{r.config['scheduler']} bmax={r.config['bmax']} "
                     f"kmax={r.config['kmax']}",
            "lambda_tok": b.lambda_tok, "lambda_slot": b.lambda_slot, "lambda_kv": b.lambda_kv,
            "A_0": b.attainment_zero_load,
            "goodput": f"{r.goodput:.4g} [{r.lo:.4g}, {r.hi:.4g}]",
            "crossing": r.crossing, "per_gpu": r.per_gpu_goodput,
            "A_lo": f"{_fmt(at.get('attainment'), '{:.3f}')} +- {_fmt(at.get('hw'), '{:.3f}')}",
            "ttft": (at.get(f"ttft_{key}") or [None])[0],
            "tpot": (at.get(f"tpot_{key}") or [None])[0],
            "busy": (at.get("busy_fraction") or [None])[0],
            "probes": sum(1 for p in r.probes if p.reps), "wall": r.seconds,
            "per_hour": None if cost is None else cost.per_hour,
            "per_m_out": None if cost is None else cost.per_million_output}


def columns(r: PlanResult) -> List[Tuple[str, str, str]]:
    """The plan table's columns; the latencies at the quantile the result's
    mode judges (:func:`~llmqueue.planning.plan.shown_quantile`)."""
    shown = shown_quantile(r.mode, r.target)[1]
    return [("lambda_tok", "lambda_tok", "{:.4g}"), ("lambda_slot", "lambda_slot", "{:.4g}"),
            ("lambda_kv", "lambda_kv", "{:.4g}"),
            ("A_0", "A_0", "{:.3f}"), ("goodput", "goodput [lo, hi]", "{}"),
            ("crossing", "crossing", "{:.4g}"), ("per_gpu", "per GPU", "{:.4g}"),
            ("A_lo", "A at lo", "{}"), ("ttft", f"TTFT {shown} s", "{:.3f}"),
            ("tpot", f"TPOT {shown} s", "{:.3f}"), ("busy", "busy", "{:.2f}"),
            ("probes", "probes", "{}"), ("wall", "wall s", "{:.1f}"),
            ("per_hour", "$/h", "{:.2f}"), ("per_m_out", "$/M out", "{:.3f}")]


def cmd_plan(args: argparse.Namespace) -> None:
    """Run ``plan`` (and ``plan_engines``) and report."""
    engine, traffic = configure(args.set)
    if args.plot:  # the file the figure will be: the one the output guard checks
        args.plot = files.figure_path(args.plot, "--plot")
    outputs = [(f"--{k}", getattr(args, k)) for k in ("csv", "plot") if getattr(args, k)]
    given = [(k, v) for k, _, v in (pair.partition("=") for pair in args.set)]
    files.check_outputs(outputs, files.named_files(given))
    slo = SLO(ttft=args.ttft, tpot=args.tpot, tbt=args.tbt, e2e=args.e2e)
    common = dict(mode=args.mode, reps=args.reps, n_requests=args.requests, seed=args.seed)
    if args.workers is not None:
        validation.positive_int("--workers", args.workers)
    if args.router != "jsq-tokens" and args.engines_for is None:
        raise ValueError(f"--router {args.router} routes the pool of --engines-for: give "
                         "--engines-for RATE too")
    if args.engines_for is not None:  # refuse a pool beyond the limit before the plan runs
        validation.positive_number("--engines-for", args.engines_for)
        check_traffic(args.router, ids=traffic.groups is not None and engine.kv is not None
                      and engine.kv.prefix)
        checked = check_slo(slo, traffic)
        bounds = cached_bounds(bounds_of(traffic, engine, checked, args.seed), traffic, engine,
                               checked, args.seed, args.requests)[0]
        pool_limit(args.engines_for, bounds, args.target)
    with open_executor(args.workers if args.workers or args.dask else 1, args.dask) as pool:
        result = plan(traffic, engine, slo, args.target, executor=pool, price=args.price,
                      **common)
        engines = None
        if args.engines_for is not None and not result.infeasible:
            engines = plan_engines(args.engines_for, traffic, engine, slo, args.target,
                                   args.router, result.goodput or None, executor=pool,
                                   price=args.price, **common)
    if args.csv:
        probes = [p.as_dict() for p in result.probes] + \
            ([p.as_dict() for p in engines.probes] if engines else [])
        with files.writing(args.csv, "--csv"), open(args.csv, "w", newline="") as handle:
            out = csv.DictWriter(handle, fieldnames=list(probes[0]) if probes else ["rate"])
            out.writeheader()
            out.writerows(probes)
    if args.plot:
        from llmqueue.plotting import save
        from llmqueue.plotting.capacity import plot_capacity
        save(plot_capacity(result), args.plot)
    if args.json:
        doc = result.as_dict()
        if engines is not None:
            doc["k_min"] = engines.k_min
            doc["engines_for"] = engines.as_dict()
        print(strict_json(doc))
        return
    if result.infeasible:
        print(f"The SLO {dict(slo.gated)} is {result.reason}.")
        return
    print(f"plan ({result.mode} attainment, target {result.target}): {traffic.describe()}")
    print(table([_row(result)], columns(result)))
    if result.hits is not None:
        print(result.hits.line(result.bounds) + _measured(result))
    if result.reason:
        print(f"note: {result.reason}")
    if engines is not None:
        print(f"\nfewest engines for {engines.rate:g} req/s behind {engines.router}: "
              f"K_min = {engines.k_min} (K_lb = {engines.k_lb}), load per engine "
              f"{_fmt(engines.load, '{:.3f}')}"
              + ("" if engines.cost is None else
                 f", ${engines.cost.per_hour:.2f}/h, "
                 f"${engines.cost.per_million_output:.3f}/M output tokens")
              + (" (non-monotone)" if engines.non_monotone else ""))
        if engines.hits is not None:
            print(f"note: K_lb reads E[hit] = {engines.hits.mean_hit:.4g} tokens per request, "
                  f"{engines.hits.note}")
        for note in engines.notes:
            print(f"note: {note}")
