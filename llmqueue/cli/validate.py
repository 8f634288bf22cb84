"""The ``llmqueue validate`` subcommand: published throughput measurements
against llmqueue's predictions, row by row, with the median and largest
error (:mod:`llmqueue.experiments.measurements`)."""

from __future__ import annotations

import argparse

from llmqueue.cli.report import strict_json, table
from llmqueue.cli.settings import pairs
from llmqueue.common import files


def add_parser(sub: "argparse._SubParsersAction") -> None:
    """Add ``validate`` to the command's subparsers."""
    p = sub.add_parser("validate", help="predict published throughput measurements and "
                                        "print the errors")
    p.add_argument("--measurements", metavar="FILE", default=None,
                   help="a CSV of engine,model,gpu,tp,precision,isl,osl,requests,"
                        "output_tokens_per_s, or vLLM benchmark_serving result JSON (give its "
                        "gpu, tp and precision with --set) (default: TensorRT-LLM's "
                        "published H100 offline rows, shipped with llmqueue)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="an offline-batch key for every row, e.g. engine=none (llmqueue's "
                        "own defaults instead of the engine's), efficiency=ideal")
    p.add_argument("--plot", metavar="FILE", default=None,
                   help="draw predicted against measured into FILE")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=cmd_validate)


#: The table ``validate`` prints.
COLUMNS = [("engine", "engine", "{}"), ("model", "model", "{}"), ("gpu", "gpu", "{}"),
           ("tp", "tp", "{}"), ("isl", "in", "{}"), ("osl", "out", "{}"),
           ("output_tokens_per_s", "measured tok/s", "{:.0f}"),
           ("predicted", "predicted tok/s", "{:.0f}"), ("error", "error", "{:+.1%}")]


def cmd_validate(args: argparse.Namespace) -> None:
    """Simulate every row of the measurement file and print the errors."""
    from llmqueue.experiments.measurements import SHIPPED, predict, read_measurements, summary
    path = args.measurements or SHIPPED
    overrides = dict(pairs(args.set, "--set"))
    plot = args.plot and files.figure_path(args.plot, "--plot")
    if plot:
        files.check_outputs([("--plot", plot)], [("--measurements", path)])
    rows = [predict(m, overrides) for m in read_measurements(path)]
    stats = summary(rows)
    if plot:
        from llmqueue.plotting import plot_validation, save
        save(plot_validation(rows, stats, overrides), plot)
    if args.json:
        print(strict_json({"measurements": path, "set": overrides, **stats, "rows": rows}))
        return
    print(table([{"label": i + 1, **r} for i, r in enumerate(rows)], COLUMNS))
    print(f"\n{stats['rows']} rows: median |error| {stats['median_abs_error']:.1%}, "
          f"largest {stats['max_abs_error']:.1%}")
