"""The ``llmqueue`` command: list scenarios and schedulers, run a scenario."""

from __future__ import annotations

import argparse
import os
import re
import sys
import textwrap
import warnings
from typing import Any, Dict, List, NoReturn, Optional, Sequence, Tuple

from llmqueue import experiments
from llmqueue.cli import latency as latency_cli
from llmqueue.cli import plan as plan_cli
from llmqueue.cli import sweep as sweep_cli
from llmqueue.cli.report import report, strict_json, table
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
                     help="set a scenario parameter (repeatable)")
    run.add_argument("--horizon", type=float, help="simulated seconds")
    run.add_argument("--seed", type=int, help="random seed")
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
    cap = sub.add_parser("capacity", help="token capacity, lambda* and the load, "
                         "with Theorem 2's verdict per scheduler")
    cap.add_argument("--scheduler", help="give only this scheduler's verdict")
    cap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="a parameter of `run single` (repeatable)")
    cap.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def _overrides(pairs: Sequence[str], scheduler: Optional[str]) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set takes KEY=VALUE; got {pair!r}")
        out[key.strip()] = value.strip()
    if scheduler is not None:
        if out.get("scheduler", scheduler) != scheduler:
            raise ValueError(f"scheduler given twice: --scheduler {scheduler} and --set "
                             f"scheduler={out['scheduler']}; give it once")
        out["scheduler"] = scheduler
    return out


def _per_row(path: str, label: str, many: bool) -> str:
    if not many:
        return path
    stem, ext = os.path.splitext(path)
    safe = re.sub(r"[^\w.+-]+", "-", label).strip("-")  # labels like "colocated/total"
    return f"{stem}-{safe}{ext}"


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
        lines.append(f"  {'':<{width}}  {p.help}")
    honoured = experiment.options if experiment.seeded else experiment.options - {"seed"}
    options = ", ".join(sorted(honoured)) or "none"
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
    params = experiment.resolve(_overrides(args.set, args.scheduler))
    if params.get("scheduler") is not None:
        make_policy(params["scheduler"])  # fail early on an unknown name
    if args.horizon is not None and not args.horizon > 0:
        raise ValueError(f"--horizon must be a number > 0; got {args.horizon}")
    if args.seed is not None and args.seed < 0:
        raise ValueError(f"--seed must be an integer >= 0; got {args.seed}")
    if args.max_pending is not None:
        validation.positive_int("--max-pending", args.max_pending)
    options = RunOptions(horizon=args.horizon, seed=args.seed,
                         batches=bool(args.batches or args.chrome_trace),
                         requests=bool(args.requests),
                         timeseries=bool(args.timeseries or args.plot),
                         max_pending=args.max_pending)
    written, inputs = experiments.files_named(_overrides(args.set, None).items())
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
    if args.plot:
        from llmqueue.plotting import plot_pending, save
        setting = ", ".join(f"{k} = {v}" for k, v in shown.items() if v not in (None, ""))
        title = textwrap.fill(f"{experiment.name}: pending requests over time ({setting})", 100)
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


def cmd_capacity(args: argparse.Namespace) -> None:
    """Theorem 2's figures for the engine and workload of ``run single``."""
    from llmqueue.experiments.base import engine_kwargs, memory_capacity
    from llmqueue.experiments.single import arrival_rate
    from llmqueue.experiments.traffic import mean_sizes
    from llmqueue.models.latency import tokens_time
    from llmqueue.theory import capacity as theory
    from llmqueue.theory.shapes import at_mean_context
    from llmqueue.theory.stability import predict, with_memory
    p = experiments.REGISTRY["single"].resolve(_overrides(args.set, args.scheduler))
    if p["bmax"] is None:
        raise ValueError("bmax must be an integer >= 1 for capacity figures; got none "
                         "(an unlimited budget has no full batch)")
    latency = engine_kwargs(p)["latency"]
    vp, vd = mean_sizes(p)
    bmax, kmax = p["bmax"], validation.optional_positive_int("kmax", p["kmax"])
    rate = arrival_rate(p)
    names = [p["scheduler"]] if args.scheduler else [  # wait needs a KV cache
        name for name in policy_names() if p["kv"] is not None
        or not getattr(make_policy(name), "needs_kv", False)]
    verdicts: Dict[str, Dict[str, Any]] = {}
    for name in names:
        wc = make_policy(name, chunked=p["chunked"]).work_conserving
        verdicts[name] = {"work_conserving": wc,
                          "predicted": predict(rate, vp, vd, work_conserving=wc, bmax=bmax,
                                               kmax=kmax, latency=latency)}
    seen: Any = at_mean_context(latency, vp, vd)  # not of the batch size alone: at the mix
    doc = {"token_capacity": theory.token_capacity(bmax, seen),
           "peak_token_rate": theory.peak_token_rate(bmax, seen),
           "batch_time": tokens_time(seen, bmax),
           "lambda_star": theory.lambda_star(bmax, vp, vd, seen),
           "rate": rate, "tokens_per_request": vp + vd,
           "load": theory.load(rate, bmax, vp, vd, seen),
           "fluid_slope": theory.fluid_slope(rate, bmax, vp, vd, seen),
           "approximate": seen is not latency,
           "params": p, "verdicts": verdicts}
    memory = memory_capacity(p, p["vp"], p["vd"], latency)
    doc.update(memory)
    for verdict in verdicts.values():  # where memory binds, above it is unstable (SPEC 7.6)
        verdict["predicted"] = with_memory(verdict["predicted"], rate, memory)
    if args.json:
        print(strict_json(doc))
        return
    print(f"engine: bmax = {bmax}, kmax = {kmax}, {latency!r}\n"
          f"workload: {rate:.4g} req/s x ({p['vp']} + {p['vd']}) tokens = "
          f"{rate * (vp + vd):.1f} tokens/s offered\n"
          f"{_full_batch(seen, bmax) if doc['approximate'] else ''}"
          f"token capacity  bmax / t_bmax = {bmax} / {doc['batch_time']:.5g} s = "
          f"{doc['token_capacity']:.1f} tokens/s (a work-conserving scheduler in overload)\n"
          f"peak token rate max b / t_b   = {doc['peak_token_rate']:.1f} tokens/s "
          f"({'at the mix' if doc['approximate'] else 'no scheduler serves faster'})\n"
          f"lambda*         = {doc['lambda_star']:.4g} req/s\n"
          f"load            = {doc['load']:.4f} of capacity; fluid backlog slope "
          f"{doc['fluid_slope']:.1f} tokens/s\n")
    if "mu_mem" in doc:
        print(memory_lines(doc) + "\n")
    print(table([{"label": n, "wc": "yes" if v["work_conserving"] else "no",
                  "predicted": v["predicted"]} for n, v in verdicts.items()],
                [("wc", "work-conserving", "{}"),
                 ("predicted", "predicted (Theorem 2" + (", memory)" if memory else ")"), "{}")]))


def _full_batch(seen: Any, bmax: int) -> str:
    """The line that says how ``capacity`` prices the full batch of a model
    not priced by its batch size alone (:class:`~llmqueue.theory.shapes.MeanContext`)."""
    from llmqueue.theory.shapes import mix_decode, needs_context
    d = mix_decode(bmax, seen.mean_prefill, seen.mean_decode)
    if needs_context(seen.latency):
        shape = (f"{bmax - d} prefill tokens (one chunk at context {seen.chunk_ctx:g}) + "
                 f"{d} decodes (at context {seen.decode_ctx:g}): the workload's mix at its "
                 "mean contexts")
    else:
        shape = f"{bmax - d} prefill tokens (one chunk) + {d} decodes: the workload's mix"
    return (f"full batch      {shape}, so every figure below is approximate (SPEC 8.6) and "
            "loads within 10% of 1 are a boundary\n")


def memory_lines(doc: Dict[str, Any]) -> str:
    """``llmqueue capacity``'s memory block (SPEC 7.6): the figures of
    :func:`~llmqueue.experiments.base.memory_capacity` with their formulas."""
    lines = [f"KV cache        M = {doc['kv_capacity']:,} tokens; E[g] = {doc['kv_area']:,.0f} "
             f"token-iterations per request; b* = M E[vp+vd] / E[g] = {doc['b_star']:.1f} "
             "tokens per iteration",
             f"mu_mem          M / (t(b*) E[g]) = {doc['mu_mem']:.4g} req/s"]
    if doc.get("fits") is False:
        lines.append(f"no request fits  vp + vd = {doc['tokens_per_request']:,} tokens, more than "
                     "the cache holds for one request: every request is ignored (SPEC 7.1)")
    if doc.get("delta") is not None:
        lines.append(f"stable side     mu_mem (1 - delta) = {doc['mu_mem_stable']:.4g} req/s "
                     f"(delta = (vp + vd) / M = {doc['delta']:.4f})")
    if doc.get("lambda_kmax") is not None:
        lines.append(f"slots           lambda_kmax = {doc['lambda_kmax']:.4g} req/s")
    if doc.get("lambda_joint") is not None:
        lines.append(f"joint capacity  {doc['lambda_joint']:.4g} req/s: {doc['binding']} binds")
    else:
        lines.append(f"joint capacity  {doc['mu_mem']:.4g} req/s: memory binds (no budget)")
    if doc.get("wait_n") is not None:
        fits = doc["lambda_wait"] is not None
        lines.append(f"WAIT            quota n = {doc['wait_n']}, steady KV n g = "
                     f"{doc['wait_kv']:,.0f} tokens: "
                     + (f"lambda_WAIT = {doc['lambda_wait']:.4g} req/s" if fits else
                        "more than M, so WAIT would preempt (threshold_error): "
                        + ("no quota fits" if doc["wait_n"] == 1 else
                           "this quota does not fit (without wait_n: the largest that does)")))
    return "\n".join(lines)


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
            cmd_capacity(args)
        else:
            cmd_run(args)
    except BrokenPipeError:  # the reader went away (``llmqueue list | head -1``)
        _quiet_stdout()
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


def _quiet_stdout() -> None:
    """Point standard output at the null device, so the interpreter's last
    flush of what the closed pipe did not take raises nothing more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no file behind it (a captured stdout)
        pass


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
