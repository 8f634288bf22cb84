"""The ``llmqueue`` command: list scenarios and schedulers, run a scenario."""

from __future__ import annotations

import argparse
import os
import re
import sys
import warnings
from typing import List, NoReturn, Optional, Sequence, Tuple

from llmqueue import experiments
from llmqueue.cli import calibrate as calibrate_cli
from llmqueue.cli import capacity as capacity_cli
from llmqueue.cli import compare as compare_cli
from llmqueue.cli import validate as validate_cli
from llmqueue.cli import latency as latency_cli
from llmqueue.cli import mlperf as mlperf_cli
from llmqueue.cli import plan as plan_cli
from llmqueue.cli import sweep as sweep_cli
from llmqueue.cli.report import report, strict_json
from llmqueue.cli.script import quiet_stdout
from llmqueue.cli.settings import ALIASES, overrides
from llmqueue.common import files, progress, validation
from llmqueue.engine.options import RunOptions
from llmqueue.experiments.base import Experiment, Rows
from llmqueue.policies.builtin import make_policy, policy_names


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise ValueError(message)


def build_parser() -> argparse.ArgumentParser:
    """The command-line grammar."""
    from llmqueue import __version__
    parser = _Parser(prog="llmqueue", description=(
        "Simulate how LLM inference servers schedule work (a SimPy queueing model). "
        "Start with 'llmqueue list', then 'llmqueue run NAME' ('llmqueue run NAME -h' "
        "lists its parameters)."))
    parser.add_argument("--version", action="version", version=f"llmqueue {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("list", help="scenarios and schedulers, one line each")
    run = sub.add_parser("run", help="run a scenario", add_help=False)
    run.add_argument("-h", "--help", action="store_true",
                     help="show this help (with NAME: the scenario's parameters) and exit")
    run.add_argument("scenario", nargs="?", metavar="NAME", help="a scenario of `llmqueue list`")
    run.set_defaults(run_parser=run)
    run.add_argument("--scheduler", help="scheduler name or module:attribute")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="set a scenario parameter (repeatable; vLLM's names "
                          f"{', '.join(ALIASES)} are {', '.join(ALIASES.values())})")
    run.add_argument("--horizon", type=float, help="simulated seconds")
    run.add_argument("--seed", type=int, help="random seed")
    run.add_argument("--warmup", type=float, metavar="S",
                     help="simulated seconds at the start left out of the summary")
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument("--timeseries", metavar="FILE", help="CSV time,pending,backlog")
    run.add_argument("--batches", metavar="FILE", help="CSV of every iteration")
    run.add_argument("--requests", metavar="FILE", help="CSV of every request")
    run.add_argument("--plot", metavar="FILE", help="PNG of pending over time")
    run.add_argument("--chrome-trace", metavar="FILE",
                     help="the iterations as a Chrome trace-event JSON (open in Perfetto)")
    run.add_argument("--max-pending", type=int, metavar="N",
                     help="stop a run once more than N requests are pending (verdict "
                          "'diverged'); single-engine scenarios")
    fit = sub.add_parser("fit", help="fit staircase and linear batch-time models to samples")
    fit.add_argument("file", help="CSV with the header tokens,seconds")
    fit.add_argument("--b0", type=int, help="staircase step width (default: searched)")
    fit.add_argument("--json", action="store_true", help="print one JSON object")
    sweep_cli.add_parsers(sub)
    latency_cli.add_parser(sub)
    plan_cli.add_parser(sub)
    validate_cli.add_parser(sub)
    calibrate_cli.add_parser(sub)
    mlperf_cli.add_parser(sub)
    compare_cli.add_parser(sub)
    cap = sub.add_parser("capacity", help="token capacity, lambda* and the load, "
                         "with Theorem 2's verdict per scheduler")
    cap.add_argument("--scheduler", help="give only this scheduler's verdict")
    cap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="a parameter of `run single` (repeatable)")
    cap.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def _per_row(path: str, label: str, many: bool) -> str:
    if not many:
        return path
    stem, ext = os.path.splitext(path)
    safe = re.sub(r"[^\w.+-]+", "-", label).strip("-")  # labels like "colocated/total"
    return f"{stem}-{safe}{ext}"


#: The flags of ``run`` that ask for each :class:`~llmqueue.engine.options.RunOptions`
#: field (``--batches FILE`` keeps the batch log...), as ``run NAME --help`` lists them.
OPTION_FLAGS = {"batches": "--batches (--chrome-trace)", "timeseries": "--timeseries (--plot)",
                "max_pending": "--max-pending"}

#: Options of ``run`` that name a CSV written per row (``--requests``: ``Result.write_requests``).
LOGS = ("--timeseries", "--batches", "--requests")

def _outputs(args: argparse.Namespace, labels: Sequence[str]) -> List[Tuple[str, str]]:
    """The files ``run`` writes, ``(option, path)``: each log for each row
    label (the labels' own files when there are several), then ``--plot``."""
    out = [(option, _per_row(getattr(args, option[2:]), label, len(labels) > 1))
           for label in labels for option in LOGS if getattr(args, option[2:])]
    single = [("--plot", args.plot), ("--chrome-trace", args.chrome_trace)]
    return out + [(option, path) for option, path in single if path]


def cmd_list() -> None:
    """Print scenarios and schedulers."""
    for name, scenario in experiments.REGISTRY.items():
        print(f"scenario   {name:<18} {scenario.summary}")
    for name in policy_names():
        print(f"scheduler  {name:<18} {_first_sentence(make_policy(name).__doc__ or '')}")


def _first_sentence(doc: str) -> str:
    """A docstring's first sentence on one line."""
    text = " ".join(doc.split("\n\n")[0].split()).replace("``", "")
    end = text.find(". ")
    return text if end < 0 else text[:end + 1]


def experiment_help(experiment: Experiment) -> str:
    """What ``llmqueue run NAME --help`` adds: the experiment's summary, its
    ``--set`` parameters (type, default, meaning) and the options it honours."""
    lines = [f"{experiment.name}: {experiment.summary}", "", "parameters (--set KEY=VALUE):"]
    width = max((len(name) for name in experiment.params), default=0)
    for name, p in experiment.params.items():
        allowed = f"; one of {', '.join(p.choices)}" if p.choices else ""
        default = str(p.default).lower() if p.default is None or isinstance(p.default, bool) \
            else p.default
        lines.append(f"  {name:<{width}}  {p.describe()}{allowed}; default {default}")
        vllm = [alias for alias, key in ALIASES.items() if key == name]
        lines.append(f"  {'':<{width}}  {p.help}" + (f" (vLLM: {vllm[0]})" if vllm else ""))
    honoured = experiment.options if experiment.seeded else experiment.options - {"seed"}
    options = ", ".join(sorted(OPTION_FLAGS.get(name, f"--{name}") for name in honoured)) \
        or "none"
    horizon = "until its requests finish" if experiment.horizon is None \
        else f"{experiment.horizon:g} s"
    lines += ["", f"options it honours: {options}; default horizon: {horizon}"]
    return "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> None:
    """Run an experiment and print or write what was asked for."""
    if args.help:
        print(args.run_parser.format_help())
        if args.scenario is not None:
            print(experiment_help(experiments.get(args.scenario)))
        return
    if args.scenario is None:
        raise ValueError("run needs a scenario NAME; allowed: "
                         f"{', '.join(experiments.REGISTRY)}")
    experiment: Experiment = experiments.get(args.scenario)
    params = experiment.resolve(overrides(args.set, args.scheduler))
    if params.get("scheduler") is not None:
        make_policy(params["scheduler"])  # fail early on an unknown name
    if args.horizon is not None and not args.horizon > 0:
        raise ValueError(f"--horizon must be a number > 0; got {args.horizon}")
    if args.seed is not None and args.seed < 0:
        raise ValueError(f"--seed must be an integer >= 0; got {args.seed}")
    if args.max_pending is not None:
        validation.positive_int("--max-pending", args.max_pending)
    if args.warmup is not None:
        validation.nonnegative_number("--warmup", args.warmup)
        if args.warmup and (args.horizon or experiment.horizon) is None:
            raise ValueError(f"--warmup needs a horizon: {experiment.name} runs until its "
                             "requests finish; give --horizon too")
    args.plot = args.plot and files.figure_path(args.plot, "--plot")  # the file written
    hits = bool(args.chrome_trace and params.get("prefix"))  # a trace's hits: the request log
    options = RunOptions(horizon=args.horizon, seed=args.seed,
                         batches=bool(args.batches or args.chrome_trace),
                         requests=bool(args.requests or hits),
                         timeseries=bool(args.timeseries or args.plot),
                         max_pending=args.max_pending, warmup=args.warmup or 0.0)
    implied = {"batches": "--chrome-trace" if args.chrome_trace and not args.batches else "",
               "timeseries": "--plot" if args.plot and not args.timeseries else "",
               "requests": "--chrome-trace" if hits and not args.requests else ""}
    experiment.check_options(options, {k: flag for k, flag in implied.items() if flag})
    written, inputs = experiments.files_named(overrides(args.set, None).items())
    files.check_outputs(_outputs(args, [""]) + written, inputs)
    with progress.runs_shown(not args.json and sys.stderr.isatty()):
        rows: Rows = experiment.execute(params, options)
    files.check_outputs(_outputs(args, [label for label, _ in rows]) + written, inputs)
    for label, result in rows:
        for option in LOGS:
            if getattr(args, option[2:]):
                path = _per_row(getattr(args, option[2:]), label, len(rows) > 1)
                with files.writing(path, option):
                    getattr(result, f"write_{option[2:]}")(path)  # Result.write_requests...
    if args.chrome_trace:
        from llmqueue.engine.timeline import write_chrome_trace
        with files.writing(args.chrome_trace, "--chrome-trace"):
            write_chrome_trace(rows, args.chrome_trace)
    shown = {**params, "horizon": args.horizon or experiment.horizon, "seed": args.seed}
    if args.warmup:
        shown["warmup"] = args.warmup
    if args.plot:
        from llmqueue.plotting import plot_pending, save
        changed = [f"{k} = {v}" for k, v in shown.items() if v not in (None, "") and (
            k not in experiment.params or experiment.params[k].default != v)]
        title = f"Pending requests over time: {', '.join([experiment.name, *changed])}"
        save(plot_pending(rows, title, kmax=params.get("kmax")), args.plot)
    summaries = [result.row(label) for label, result in rows]
    checks = experiment.checks(rows) if experiment.checks is not None else []
    if args.json:
        doc = {"scenario": experiment.name, "params": shown, "rows": summaries}
        if checks:
            doc["checks"] = [{"name": c.name, "passed": c.passed, "detail": c.detail}
                             for c in checks]
        print(strict_json(doc))
    else:
        print(report(experiment, rows, params, checks))


def cmd_fit(args: argparse.Namespace) -> None:
    """Fit a staircase and a linear model to measured (tokens, seconds) samples."""
    from llmqueue.theory.fit import fit_linear, fit_staircase, read_samples
    tokens, seconds = read_samples(args.file)
    stair, line = fit_staircase(tokens, seconds, args.b0), fit_linear(tokens, seconds)
    if args.json:
        print(strict_json({"file": args.file, "samples": stair.samples,
                          "staircase": stair.as_dict(), "linear": line.as_dict()}))
        return
    s, lin = stair.model, line.model
    print(f"{stair.samples} samples from {args.file}")
    print(f"staircase  t = {s.c * 1e3:.3f} ms + {s.a * 1e3:.3f} ms * ceil(b / {s.b0})"
          f"   R^2 = {stair.r2:.4f}")
    print(f"linear     t = {lin.c * 1e3:.3f} ms + {lin.per_token * 1e3:.5f} ms * b"
          f"   R^2 = {line.r2:.4f}")


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point; returns the exit code (2 for bad input)."""
    _user_modules_last()
    shown, warnings.formatwarning = warnings.formatwarning, _one_line_warning
    try:
        args = build_parser().parse_args(argv)
        if args.command == "list":
            cmd_list()
        elif args.command == "fit":
            cmd_fit(args)
        elif hasattr(args, "handler"):
            args.handler(args)
        elif args.command == "capacity":
            capacity_cli.cmd_capacity(args)
        else:
            cmd_run(args)
    except BrokenPipeError:  # the reader went away (``llmqueue list | head -1``)
        quiet_stdout()
        return 141  # 128 + SIGPIPE, as a shell reports a tool stopped by a closed pipe
    except (ValueError, OSError, OverflowError) as exc:
        text = " ".join(str(exc).splitlines())  # one line, whatever a file name holds
        print(f"llmqueue: error: {text}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("llmqueue: interrupted (files already written are kept)", file=sys.stderr)
        return 130
    finally:
        warnings.formatwarning = shown
    return 0


def _user_modules_last() -> None:
    """Let ``--scheduler module:attribute`` import a module of the working
    directory, after every installed package: a ``tqdm.py`` or ``matplotlib.py``
    lying there must not shadow the project's own dependencies."""
    here = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", here)] + [here]


def _one_line_warning(message: Warning | str, category: type, filename: str, lineno: int,
                      line: Optional[str] = None) -> str:
    """Warnings on the command line: one line each, without the source line."""
    text = " ".join(str(message).split())
    return f"llmqueue: warning: {text} ({category.__name__})\n"


if __name__ == "__main__":
    sys.exit(main())
