"""The ``llmqueue sweep`` and ``llmqueue plot`` subcommands."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List, Optional, Sequence

from llmqueue import experiments
from llmqueue.cli import settings
from llmqueue.cli.report import strict_json, table
from llmqueue.common import files, validation
from llmqueue.sweeps import grid as grids
from llmqueue.sweeps.executors import open_executor
from llmqueue.sweeps.runner import Row, figure_columns, read_rows, summarize, sweep, varying

#: (figure, column title) of the sweep's table: mean +- 95% half-width.
TABLE = [("pending_mean", "pending mean"), ("throughput_tokens_per_s", "tokens/s"),
         ("ttft_p99", "ttft p99 (s)"), ("backlog_slope", "backlog slope (tok/s)")]


def add_parsers(sub: "argparse._SubParsersAction") -> None:
    """Add ``sweep`` and ``plot`` to the command's subparsers."""
    p = sub.add_parser("sweep", help="run a scenario over a parameter grid and seeds")
    p.add_argument("scenario")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2|START:STOP:STEP",
                   help="values of a parameter (repeatable; a range includes STOP)")
    p.add_argument("--scheduler", help="schedulers to compare, comma-separated")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="fix a scenario parameter (repeatable)")
    p.add_argument("--seeds", type=int, default=1, help="replicates per grid point")
    p.add_argument("--seed", type=int, default=0, help="base seed of the run seeds")
    p.add_argument("--horizon", type=float, help="simulated seconds")
    p.add_argument("--warmup", type=float, default=0.0,
                   help="simulated seconds left out of each run's summary")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, help="processes (default: one per CPU)")
    where.add_argument("--dask", metavar="ADDRESS",
                       help="a Dask scheduler address, or 'local' to start a local cluster")
    p.add_argument("--dask-workers", type=int, help="workers of --dask local")
    p.add_argument("--out", metavar="FILE.csv",
                   help="write every run's rows to this CSV as it finishes (a new file; "
                        "with --resume, add to it)")
    p.add_argument("--resume", action="store_true", help="skip the runs already in --out")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=cmd_sweep)
    q = sub.add_parser("plot", help="plot a sweep's CSV: a figure against grid keys")
    q.add_argument("csv")
    q.add_argument("--x", required=True, metavar="KEY[,KEY2]",
                   help="grid key of the x axis; two keys draw a heat map")
    q.add_argument("--y", required=True, metavar="FIGURE", help="summary figure to plot")
    q.add_argument("--hue", metavar="KEY", help="grid key that tells the lines apart")
    q.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                   help="keep only rows with this value (repeatable)")
    q.add_argument("--out", metavar="PNG", help="image file (default: CSV-FIGURE.png)")
    q.set_defaults(handler=cmd_plot)


def cmd_sweep(args: argparse.Namespace) -> None:
    """Run the sweep, write the CSV, print a table (or JSON) of the grid points."""
    scenario = experiments.get(args.scenario)
    grid: Dict[str, List[object]] = {}
    for spec in args.grid:
        name, sep, text = spec.partition("=")  # vLLM's names as --set takes them
        key, values = grids.parse(scenario, settings.canonical(name.strip()) + sep + text
                                  if sep else spec)
        if key in grid:
            raise ValueError(f"grid {key}: given twice")
        grid[key] = values
    fixed = settings.pairs(args.set, "--set")
    schedulers = _names(args.scheduler)
    if args.dask is None and args.dask_workers is not None:
        raise ValueError("--dask-workers sizes --dask local only")
    workers = args.dask_workers if args.dask is not None else args.workers
    written, read = experiments.files_named([*fixed.items(), *((k, v) for k, values in
                                                              grid.items() for v in values)])
    files.check_outputs(written + ([("out", args.out)] if args.out else []), read)
    rows: List[Row] = []
    try:
        with open_executor(workers, args.dask) as executor:
            rows = sweep(scenario, grid, args.seeds, schedulers=schedulers, fixed=fixed,
                         horizon=args.horizon, warmup=args.warmup, base_seed=args.seed,
                         executor=executor, out=args.out, resume=args.resume,
                         progress=False if args.json else None)  # JSON: no bar
    except KeyboardInterrupt:
        kept = f"; finished runs are in {args.out} (continue with --resume)" if args.out else ""
        print(f"llmqueue: interrupted{kept}", file=sys.stderr)
        raise SystemExit(130) from None
    points = summarize(rows)
    if args.json:
        print(strict_json({"scenario": scenario.name, "grid": grid, "seeds": args.seeds,
                          "base_seed": args.seed, "rows": rows, "points": points}))
    else:
        print(_table(rows, points))


def cmd_plot(args: argparse.Namespace) -> None:
    """Draw lines with confidence bands, or a heat map for two keys."""
    rows = read_rows(args.csv)
    if not rows:
        raise ValueError(f"{args.csv} holds no run yet (a header only): nothing to plot")
    for key, value in settings.pairs(args.where, "--where").items():
        if rows and key not in rows[0]:
            raise ValueError(f"--where {key}: no such column in {args.csv}")
        rows = [r for r in rows if str(r[key]) == value or _same(r[key], value)]
        if not rows:
            raise ValueError(f"--where {key}={value}: no row of {args.csv} has it")
    from llmqueue.plotting import plot_heat, plot_lines, save
    from llmqueue.plotting.sweep import default_path

    if args.y in rows[0] and not any(validation.is_number(r[args.y]) for r in rows):
        raise ValueError(f"--y {args.y}: no row of {args.csv} has a number there "
                         "(text or empty): nothing to plot")
    keys = _names(args.x) or []
    path = files.figure_path(args.out or default_path(args.csv, args.y), "--out")
    files.check_outputs([("--out", path)], [("csv", args.csv)])
    known = experiments.REGISTRY.get(str(rows[0].get("scenario")))
    params = known.params if known is not None else None  # for axis labels
    if len(keys) == 1:
        fig = plot_lines(rows, keys[0], args.y, hue=args.hue, params=params)
    elif len(keys) == 2 and args.hue is None:
        fig = plot_heat(rows, keys[0], keys[1], args.y, params=params)
    else:
        raise ValueError(f"--x takes one grid key (lines, optional --hue) or two (a heat "
                         f"map, no --hue); got {args.x!r}")
    print(save(fig, path))


def _table(rows: Sequence[Row], points: Sequence[Row]) -> str:
    if not points:
        return "no runs"
    keys = varying(points) or ["label"]
    shown = [f for f, _ in TABLE if f in figure_columns(list(rows[0]))]
    lines = []
    for p in points:
        line: Dict[str, Any] = {"label": " ".join(f"{k}={p[k]}" for k in keys),
                                   "n": str(p["n"])}
        for fig in shown:
            half = p["backlog_slope_mean_se"] if fig == "backlog_slope" else p[f"{fig}_ci95"]
            line[fig] = _plus_minus(p[f"{fig}_mean"], half)
        lines.append(line)
    titles = dict(TABLE)
    return table(lines, [("n", "seeds", "{}")] + [(f, titles[f] + (" +- se" if
                 f == "backlog_slope" else " +- 95%"), "{}") for f in shown])


def _plus_minus(mean: Optional[float], half: Optional[float]) -> Optional[str]:
    if mean is None:
        return None
    return f"{mean:.4g}" if half is None else f"{mean:.4g} +- {half:.3g}"


def _names(text: Optional[str]) -> Optional[List[str]]:
    if text is None:
        return None
    names = [n.strip() for n in text.split(",")]
    if "" in names:
        raise ValueError(f"empty name in {text!r}")
    return names


def _same(value: Any, text: str) -> bool:
    try:
        return float(value) == float(text)
    except (TypeError, ValueError):
        return False
