"""The ``llmqueue calibrate`` subcommand: fit the roofline's efficiency to
whole-run throughput measurements, print each row's error with the fit and
with a fit that never saw it, and write a profile that ``--set
efficiency=PATH`` reads (:mod:`llmqueue.experiments.calibration`)."""

from __future__ import annotations

import argparse
from typing import Any, Dict, List

from llmqueue.cli.report import strict_json, table
from llmqueue.cli.settings import pairs
from llmqueue.common import files, progress


def add_parser(sub: "argparse._SubParsersAction") -> None:
    """Add ``calibrate`` to the command's subparsers."""
    from llmqueue.experiments.calibration import BOUNDS, FREE, HOLDOUTS
    p = sub.add_parser("calibrate", help="fit the roofline's efficiency to published or "
                                         "measured offline throughput")
    p.add_argument("--measurements", metavar="FILE", default=None,
                   help="a measurement file as validate reads: CSV or vLLM JSON (default: "
                        "TensorRT-LLM's published H100 offline rows, shipped with llmqueue)")
    p.add_argument("--free", default=",".join(FREE), metavar="FIELD,...",
                   help=f"efficiency fields to fit (default: {','.join(FREE)}; allowed: "
                        f"{', '.join(BOUNDS)}), each kept inside its physical bounds")
    p.add_argument("--holdout", default="row", choices=HOLDOUTS,
                   help="cross-validation: predict each row from a fit without it (row) or "
                        "without every row of its model (model); default: row")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="an offline-batch key for every row, as validate takes it")
    p.add_argument("--profile", metavar="FILE", default=None,
                   help="write the fitted efficiency to FILE (.json) for "
                        "--set efficiency=FILE")
    p.add_argument("--plot", metavar="FILE", default=None,
                   help="draw the fit's and the unseen rows' predictions against the "
                        "measurements into FILE")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=cmd_calibrate)


#: The table ``calibrate`` prints.
COLUMNS = [("model", "model", "{}"), ("gpu", "gpu", "{}"), ("tp", "tp", "{}"),
           ("isl", "in", "{}"), ("osl", "out", "{}"),
           ("output_tokens_per_s", "measured tok/s", "{:.0f}"),
           ("fitted", "fitted tok/s", "{:.0f}"), ("fitted_error", "error", "{:+.1%}"),
           ("unseen", "unseen tok/s", "{:.0f}"), ("unseen_error", "unseen error", "{:+.1%}")]


def written_plot(outputs: List[Any]) -> bool:
    """Whether ``--plot`` is among the outputs."""
    return any(name == "--plot" for name, _ in outputs)


def _fields(text: str) -> List[str]:
    return [f.strip() for f in text.split(",") if f.strip()]


def cmd_calibrate(args: argparse.Namespace) -> None:
    """Fit, cross-validate, report and write the profile."""
    from llmqueue.experiments.calibration import BOUNDS, calibrate, profile
    from llmqueue.experiments.measurements import SHIPPED, read_measurements
    path = args.measurements or SHIPPED
    overrides = dict(pairs(args.set, "--set"))
    if "efficiency" in overrides:
        raise ValueError("--set efficiency is what calibrate fits; leave it out")
    outputs = [("--profile", args.profile and files.file_name("--profile", args.profile)),
               ("--plot", args.plot and files.figure_path(args.plot, "--plot"))]
    outputs = [(name, value) for name, value in outputs if value]
    files.check_outputs(outputs, [("--measurements", path)])
    rows = read_measurements(path)
    if written_plot(outputs) and args.holdout == "model" and \
            len({m.model.lower() for m in rows}) < 2:
        raise ValueError("--plot draws each row as a fit without its model predicts it: "
                         "--holdout model needs rows of two models or more (or use "
                         "--holdout row)")
    with progress.bar(None, "step", shown=None if not args.json else False,
                      desc="calibrate", leave=False) as bar:
        def tick(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)
        result = calibrate(rows, overrides, _fields(args.free), args.holdout, tick)
    data: Dict[str, Any] = profile(result, path, overrides)
    written = dict(outputs)
    if written.get("--profile"):
        with files.writing(written["--profile"], "--profile"), \
                open(written["--profile"], "w", encoding="utf-8") as handle:
            handle.write(strict_json(data) + "\n")
    if written.get("--plot"):
        from llmqueue.plotting import plot_validation, save
        save(plot_validation(result.rows, data["unseen"], overrides, key="unseen",
                             title="Calibrated offline throughput, each row predicted by a "
                                   "fit that never saw it"), written["--plot"])
    if args.json:
        print(strict_json(data))
        return
    print(table([{"label": r["line"], **r} for r in result.rows], COLUMNS))
    print()
    eff = result.efficiency
    at = set(result.at_bounds())
    for name in result.free:
        lo, hi = BOUNDS[name]
        print(f"  {name} = {getattr(eff, name):.4g}  (bounds {lo:g} to {hi:g}"
              f"{'; at a bound' if name in at else ''})")
    fitted, unseen = result.summary("fitted"), result.summary("unseen")
    print(f"\n{fitted['rows']} rows: fitted median |error| {fitted['median_abs_error']:.1%}, "
          f"largest {fitted['max_abs_error']:.1%}")
    if unseen["rows"]:
        print(f"unseen (each predicted by a fit without its {args.holdout}): median |error| "
              f"{unseen['median_abs_error']:.1%}, largest {unseen['max_abs_error']:.1%}")
    if result.skipped:
        print(f"skipped {len(result.skipped)} row(s) at a request rate (lines "
              f"{', '.join(map(str, result.skipped))}): validate them with the profile")
    if written.get("--profile"):
        print(f"profile written to {written['--profile']}: use --set "
              f"efficiency={written['--profile']}")
