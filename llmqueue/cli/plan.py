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

With a KV cache the output opens with how the requests fit it, said once
(:mod:`llmqueue.planning.fit`: the weights and KV pool with ``kv=auto``, the
largest request that fits, the share that never can, which count as
misses); a workload none of whose requests fits is infeasible at every rate
(exit 0, as an SLO infeasible at zero load).  A note says when memory
(``lambda_kv``) is the smallest bound.

``--grid KEY=V1,V2`` (repeatable, the syntax of ``sweep --grid``) plans every
combination of the values (GPUs x tp x models, ...): configurations that
cannot run (the model does not fit the GPUs, ``tp`` does not divide the
heads, no request fits the KV cache) are skipped with the reason, the others
planned and shown in one table, the cheapest that meets the SLO first
(:mod:`llmqueue.planning.compare`), and ``--plot`` draws one bar chart
(:func:`~llmqueue.plotting.plans.plot_plans`).  ``--price`` is one number or
one per GPU type (``H100=2.21,H200=3.5``).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import math
import warnings
from typing import Any, Dict, Iterator, List, Optional, Tuple

from llmqueue import experiments
from llmqueue.cli import settings
from llmqueue.cli.report import strict_json, table
from llmqueue.common import files, validation
from llmqueue.experiments.base import engine_kwargs
from llmqueue.experiments.traffic import hash_block_of, size_law
from llmqueue.network.routers import router_names
from llmqueue.planning.compare import (RANKINGS, Configuration, check_pool, gpu_of,
                                       plan_configuration, price_for, rank, ranking,
                                       read_prices, table_columns, table_row)
from llmqueue.planning.engines import plan_engines
from llmqueue.planning.fit import NeverFitWarning, diagnose, memory_note, memory_of_settings
from llmqueue.planning.plan import PlanResult, check_slo, mode_text, plan, shown_quantile
from llmqueue.planning.spec import EngineSpec, Traffic, arrival_cv
from llmqueue.sweeps import grid as grids
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
    p.add_argument("--mode", default="joint", metavar="joint|quantile",
                   help="how attainment is judged: joint (default), the share of requests "
                        "meeting every gated threshold at once must reach --target; "
                        "quantile, each gated metric's --target quantile must be within its "
                        "threshold (0.99 reads p99, 0.9 p90). The table shows the latencies "
                        "at p90 in joint mode, at that quantile in quantile mode")
    p.add_argument("--reps", type=int, default=5, help="replications per round (5)")
    p.add_argument("--requests", type=int, default=2000, help="measured requests (2000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (0)")
    p.add_argument("--price", metavar="USD|GPU=USD,...",
                   help="$ per GPU-hour: adds the cost; one number, or one per GPU type "
                        "(H100=2.21,H200=3.5) for a --grid over gpu")
    p.add_argument("--engines-for", type=float, metavar="RATE",
                   help="also find the fewest engines for RATE requests/s")
    p.add_argument("--router", default="jsq-tokens",
                   help=f"router of --engines-for: {', '.join(router_names())}")
    p.add_argument("--workers", type=int, help="run replications on N processes")
    p.add_argument("--dask", metavar="ADDRESS", help="run replications on a Dask cluster")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--csv", metavar="FILE", help="write the probes as CSV")
    p.add_argument("--plot", metavar="FILE", help="PNG of attainment and latency vs rate "
                                                  "(with --grid: bars per configuration)")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2|START:STOP:STEP",
                   help="plan every combination of these values (repeatable, as sweep "
                        "--grid), e.g. --grid gpu=H100,H200 --grid tp=1,2,4: one table, the "
                        "cheapest that meets the SLO first, and one figure")
    p.set_defaults(handler=cmd_plan)


def configure(pairs: List[str]) -> tuple:
    """``(EngineSpec, Traffic)`` from ``--set`` pairs."""
    p, traffic = resolved(pairs)
    return engine_of(p), traffic


def engine_of(p: Dict[str, Any]) -> EngineSpec:
    """The engine of :func:`resolved` parameters (a model that does not fit its
    GPUs, or a ``tp`` that does not divide its heads, is a ValueError)."""
    kw = engine_kwargs(p)
    return EngineSpec(kw["policy"], kw["bmax"], kw["kmax"], kw["latency"], kw["chunked"],
                      kw["kv"])


def resolved(pairs: List[str]) -> Tuple[Dict[str, Any], Traffic]:
    """The parameters of ``--set`` pairs, read as ``run single`` reads them, and
    the traffic they describe (bad input is a ValueError)."""
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
    vp, vd, cv = size_law("vp", p["vp"]), size_law("vd", p["vd"]), arrival_cv(arrival)
    if p["prefix_groups"] is not None:
        traffic = Traffic.prefix_groups(p["prefix_groups"], p["shared"], vp, vd, p["zipf"], cv,
                                        hash_block_of(p))
        return p, traffic
    for key in GROUP_KEYS:
        if key in values:
            raise ValueError(f"{key} needs prefix_groups=G (the prompts' shared heads); "
                             "got no prefix_groups")
    if p["prefix"]:
        raise ValueError("prefix=on needs a workload whose prompts share heads: set "
                         "prefix_groups=G and shared=S (vp is then each prompt's own suffix)")
    return p, Traffic(vp, vd, cv)


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


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The plan's one warning that requests never fit is printed as its fit line."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NeverFitWarning)
        yield


def _checked(args: argparse.Namespace, named: List[Tuple[str, str]]) -> SLO:
    """The checks every plan makes before it runs (outputs, workers, router);
    the SLO."""
    if args.plot:  # the file the figure will be: the one the output guard checks
        args.plot = files.figure_path(args.plot, "--plot")
    outputs = [(f"--{k}", getattr(args, k)) for k in ("csv", "plot") if getattr(args, k)]
    files.check_outputs(outputs, files.named_files(named))
    if args.workers is not None:
        validation.positive_int("--workers", args.workers)
    if args.router != "jsq-tokens" and args.engines_for is None:
        raise ValueError(f"--router {args.router} routes the pool of --engines-for: give "
                         "--engines-for RATE too")
    if args.engines_for is not None:
        validation.positive_number("--engines-for", args.engines_for)
    return SLO(ttft=args.ttft, tpot=args.tpot, tbt=args.tbt, e2e=args.e2e)


def _common(args: argparse.Namespace) -> Dict[str, Any]:
    return dict(mode=args.mode, reps=args.reps, n_requests=args.requests, seed=args.seed)


def cmd_plan(args: argparse.Namespace) -> None:
    """Run ``plan`` (and ``plan_engines``) and report; with ``--grid``, for each
    configuration (:func:`cmd_grid`)."""
    if args.grid:
        cmd_grid(args)
        return
    p, traffic = resolved(args.set)
    engine = engine_of(p)
    price = price_for(read_prices(args.price), gpu_of(p))
    slo = _checked(args, [(k, v) for k, _, v in (pair.partition("=") for pair in args.set)])
    common = _common(args)
    if args.engines_for is not None:  # refuse a pool beyond the limit before the plan runs
        check_pool(args.engines_for, traffic, engine, slo, args.target, args.seed,
                   args.requests, args.router)
    fit = diagnose(traffic, engine, memory_of_settings(p), args.seed)
    with open_executor(args.workers if args.workers or args.dask else 1, args.dask) as pool, \
            _quiet():
        result = plan(traffic, engine, slo, args.target, executor=pool, price=price, **common)
        engines = None
        if args.engines_for is not None and not result.infeasible:
            engines = plan_engines(args.engines_for, traffic, engine, slo, args.target,
                                   args.router, result.goodput or None, executor=pool,
                                   price=price, **common)
    if args.csv:
        _write_csv(args.csv, [p.as_dict() for p in result.probes] +
                   ([p.as_dict() for p in engines.probes] if engines else []))
    if args.plot:
        from llmqueue.plotting import save
        from llmqueue.plotting.capacity import plot_capacity
        save(plot_capacity(result), args.plot)
    if args.json:
        doc = result.as_dict()
        doc["fit"] = None if fit is None else fit.as_dict()
        doc["judged"] = mode_text(result.mode, result.target)
        if engines is not None:
            doc["k_min"] = engines.k_min
            doc["engines_for"] = engines.as_dict()
        print(strict_json(doc))
        return
    said = "" if fit is None else f"fit: {fit.statement()} "
    if result.infeasible:
        why = result.reason  # the fit's share, said once
        if fit is not None and fit.exact and fit.ceiling < result.target:
            why = (f"infeasible at every rate: at most {fit.ceiling:.4g} of requests can meet "
                   f"it (target {result.target})")
        print(f"{said}The SLO {dict(slo.gated)} is {why}.")
        return
    if fit is not None:
        print(said.rstrip())
    print(f"plan ({mode_text(result.mode, result.target)}): {traffic.describe()}")
    print(table([_row(result)], columns(result)))
    if result.hits is not None:
        print(result.hits.line(result.bounds) + _measured(result))
    if result.reason:
        print(f"note: {result.reason}")
    for note in filter(None, [memory_note(result.bounds, fit)]):  # memory binds
        print(f"note: {note}")
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


def _write_csv(path: str, probes: List[Dict[str, Any]]) -> None:
    with files.writing(path, "--csv"), open(path, "w", newline="") as handle:
        out = csv.DictWriter(handle, fieldnames=list(probes[0]) if probes else ["rate"])
        out.writeheader()
        out.writerows(probes)


def grid_of(args: argparse.Namespace) -> List[Dict[str, str]]:
    """The configurations of ``--grid`` (each a dict key -> text), with the
    parser of ``sweep --grid``; a key also given by ``--set`` is refused."""
    scenario = experiments.REGISTRY["single"]
    given = settings.pairs(args.set)
    grid: Dict[str, List[object]] = {}
    for spec in args.grid:
        key, values = grids.parse(scenario, spec)
        if key in grid:
            raise ValueError(f"--grid {key}: given twice")
        if key in given:
            raise ValueError(f"{key} is given by --set and by --grid; give it once")
        grid[key] = values
    return [{k: "none" if v is None else str(v) for k, v in point.items()}  # as --set takes
            for point in grids.expand(grid)]


def cmd_grid(args: argparse.Namespace) -> None:
    """Plan every configuration of ``--grid``; one table (the cheapest that
    meets the SLO first), one figure, one JSON document."""
    points = grid_of(args)
    read = [resolved(args.set + [f"{k}={v}" for k, v in point.items()]) for point in points]
    gpus = [gpu_of(p) for p, _ in read]
    prices = read_prices(args.price)
    priced = [price_for(prices, gpu, gpus) for gpu in gpus]
    named = [(k, v) for k, _, v in (pair.partition("=") for pair in args.set)] + \
        [(k, v) for point in points for k, v in point.items()]
    slo = _checked(args, named)
    check_slo(slo)
    configs: List[Configuration] = []
    with open_executor(args.workers if args.workers or args.dask else 1, args.dask) as pool, \
            _quiet():
        for point, (p, traffic), price in zip(points, read, priced):
            try:
                engine: Any = engine_of(p)
                memory = memory_of_settings(p)
            except ValueError as exc:  # it cannot run on its GPUs: skipped, with the reason
                engine, memory = str(exc), None
            configs.append(plan_configuration(
                point, gpu_of(p), engine, traffic, slo, args.target, rate=args.engines_for,
                router=args.router, memory=memory, price=price, tp=int(p.get("tp") or 1),
                executor=pool, **_common(args)))
    skipped = [c for c in configs if c.skipped is not None]
    if len(skipped) == len(configs):
        raise ValueError("no configuration can be planned: " +
                         "; ".join(f"{c.label}: {c.skipped}" for c in skipped))
    ranked = rank(configs, args.engines_for)
    by = ranking(configs, args.engines_for)
    if args.csv:
        _write_csv(args.csv, [{"configuration": c.label, **p.as_dict()} for c in ranked
                              for p in (c.result.probes if c.result is not None else ())] +
                   [{"configuration": c.label, **p.as_dict()} for c in ranked
                    for p in (c.engines.probes if c.engines is not None else ())])
    if args.plot:
        from llmqueue.plotting import save
        from llmqueue.plotting.plans import plot_plans
        save(plot_plans(ranked, args.engines_for, by), args.plot)
    if args.json:
        print(strict_json({"mode": args.mode, "target": args.target,
                           "judged": mode_text(args.mode, args.target),
                           "engines_for": args.engines_for, "ranking": by,
                           "ranked_by": RANKINGS[by],
                           "configurations": [c.as_dict() for c in ranked + skipped]}))
        return
    workloads = {traffic.describe() for _, traffic in read}
    print(f"plan of {len(configs)} configurations ({mode_text(args.mode, args.target)}): "
          + (workloads.pop() if len(workloads) == 1 else "workloads as each configuration sets"))
    for c in ranked:
        if c.fit is not None and c.fit.never > 0:
            print(f"fit {c.label}: {c.fit.statement()}")
    rows = [table_row(i + 1 if c.meets else None, c) for i, c in enumerate(ranked)]
    print(table(rows, table_columns(args.engines_for is not None,
                                    any(c.per_hour is not None for c in ranked))))
    print(f"ranked by {RANKINGS[by]}; those that do not meet the SLO last. binds: the "
          "smallest rate bound (tok: compute, slot: kmax slots, kv: KV memory)")
    for c in ranked:
        for note in c.notes:
            print(f"note {c.label}: {note}")
    for c in skipped:
        print(f"skipped {c.label}: {c.skipped}")
