"""The ``llmqueue mlperf`` subcommand: MLPerf Inference's Llama-2-70B
scenarios simulated for a system of engine copies (``offline``, ``server``,
``interactive``), optionally calibrated on a measured Offline figure; or a
file of published results predicted row by row (``--measurements``)
(:mod:`llmqueue.experiments.mlperf`, :mod:`llmqueue.experiments.mlperf_table`)."""

from __future__ import annotations

import argparse
import os
from typing import Any, Dict

from llmqueue.cli.report import strict_json, table
from llmqueue.cli.settings import pairs
from llmqueue.common import files, progress, validation

#: The results file ``--measurements`` reads when given ``shipped``.
SHIPPED = os.path.join(os.path.dirname(os.path.dirname(__file__)), "experiments", "data",
                       "mlperf_llama2_70b_v4.1_nvidia.csv")


def add_parser(sub: "argparse._SubParsersAction") -> None:
    """Add ``mlperf`` to the command's subparsers."""
    from llmqueue.experiments.mlperf import SCENARIOS
    p = sub.add_parser("mlperf", help="MLPerf Llama-2-70B: Offline, Server and Interactive "
                                      "capacity of a system, or a results file predicted")
    p.add_argument("scenario", nargs="?", choices=SCENARIOS,
                   help="the scenario to simulate (leave out with --measurements)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting of the system or of one engine copy: gpu, gpus, tp, "
                        "precision, kv_cache_dtype, kmax (max batch size), bmax (max_num_"
                        "tokens), chunked, kv_cache_free_gpu_mem_fraction, "
                        "gpu_memory_utilization, engine, efficiency, samples, outputs, split, "
                        "seconds, reps, seed; model (another model's name or the path of its "
                        "Hugging Face config.json) replaces Llama-2-70B")
    p.add_argument("--offline-tokens-per-s", type=float, default=None, metavar="X",
                   help="the system's measured Offline output tokens/s: fit one speed factor "
                        "so the simulated Offline equals it, then predict with it")
    p.add_argument("--measurements", metavar="FILE", default=None,
                   help="predict every row of a results file (columns as the shipped one; "
                        "'shipped': NVIDIA's v4.1 results, shipped with llmqueue)")
    p.add_argument("--plot", metavar="FILE", default=None,
                   help="with --measurements: predicted against measured into FILE")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=cmd_mlperf)


def cmd_mlperf(args: argparse.Namespace) -> None:
    """Run a scenario, or predict a results file."""
    overrides = dict(pairs(args.set, "--set"))
    if (args.scenario is None) == (args.measurements is None):
        raise ValueError("give either a scenario (offline, server, interactive) or "
                         "--measurements FILE: one of the two")
    if args.measurements is not None:
        if args.offline_tokens_per_s is not None:
            raise ValueError("--offline-tokens-per-s is for one system; with --measurements "
                             "each row is calibrated on its system's Offline row")
        _table(args, overrides)
        return
    if args.plot:
        raise ValueError("--plot draws a results file's predictions: give --measurements")
    _scenario(args, overrides)


def _scenario(args: argparse.Namespace, overrides: Dict[str, str]) -> None:
    from llmqueue.experiments import mlperf
    if args.offline_tokens_per_s is not None:
        validation.positive_number("--offline-tokens-per-s", args.offline_tokens_per_s)
    s = mlperf.system(overrides)
    shown = not args.json
    run = mlperf.offline(s)
    eff = s.efficiency
    calibration = None
    if args.offline_tokens_per_s is not None:
        factor = mlperf.calibrate_speed(run, args.offline_tokens_per_s)
        eff = mlperf.faster(eff, factor)
        calibration = {"measured_offline_tokens_per_s": args.offline_tokens_per_s,
                       "speed_factor": factor, "efficiency": eff.as_dict()}
    offline = {"tokens_per_s": run.tokens_per_s(eff), "samples_per_s": run.samples_per_s(eff),
               "samples_per_copy": run.samples, "preemptions_per_copy": run.preemptions}
    data: Dict[str, Any] = {"scenario": args.scenario, "copies": s.copies,
                            "settings": _jsonable(s.params), "calibration": calibration,
                            "offline": offline}
    if args.scenario != "offline":
        result = mlperf.capacity(s, args.scenario, run, eff, progress=None if shown else False)
        data["result"] = mlperf.figures(s, result)
        data["plan"] = result.as_dict()
    if args.json:
        print(strict_json(data))
        return
    p = s.params
    model = "" if p["model"] == mlperf.PARAMS["model"].default else f" workload on {p['model']}"
    print(f"MLPerf Llama-2-70B{model} on {p['gpus']} x {p['gpu']}: {s.copies} engine copies of tp="
          f"{p['tp']} ({p['engine']} settings: max batch {p['kmax']}, max_num_tokens "
          f"{p['bmax']}, chunked {p['chunked']}, precision {p['precision']}, KV "
          f"{p['kv_cache_dtype']}, efficiency {p['efficiency']})")
    if calibration:
        print(f"calibrated: speed factor {calibration['speed_factor']:.4f} makes the simulated "
              f"Offline {offline['tokens_per_s']:,.0f} output tokens/s (measured "
              f"{args.offline_tokens_per_s:,.0f})")
    print(f"Offline: {offline['tokens_per_s']:,.0f} output tokens/s, "
          f"{offline['samples_per_s']:,.2f} samples/s ({run.samples:,} samples per copy)")
    if args.scenario == "offline":
        return
    r, limits = data["result"], mlperf.LIMITS[args.scenario]
    share = r["tokens_per_s"] / offline["tokens_per_s"]
    print(f"{args.scenario.capitalize()}: {r['tokens_per_s']:,.0f} output tokens/s, "
          f"{r['samples_per_s']:,.2f} samples/s ({r['rate_per_copy']:.3f} per copy; it fails "
          f"at {_rate(r['bracket_per_copy'][1])}), {share:.3f} of Offline")
    if r["ttft_p99_s"] is not None:
        print(f"  p99 TTFT {r['ttft_p99_s']:.3f} s (limit {limits.ttft:g} s), p99 TPOT "
              f"{r['tpot_p99_s'] * 1e3:.1f} ms (limit {float(limits.tpot or 0) * 1e3:g} ms)")
    if r["reason"]:
        print(f"  the search ended {r['reason']} (per copy)")


def _rate(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}"


def _jsonable(params: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v if isinstance(v, (str, int, float, bool, type(None))) else str(v)
            for k, v in params.items()}


#: The table ``--measurements`` prints.
COLUMNS = [("system", "system", "{}"), ("scenario", "scenario", "{}"),
           ("tokens_per_s", "measured tok/s", "{:.0f}"),
           ("predicted_tokens_per_s", "predicted tok/s", "{:.0f}"),
           ("error", "error", "{:+.1%}"), ("calibrated_on", "calibrated on", "{:.0f}"),
           ("predicted_ttft_p99_s", "p99 TTFT s", "{:.3f}"),
           ("predicted_tpot_p99_s", "p99 TPOT s", "{:.3f}"),
           ("unsupported", "unsupported", "{}")]


def _table(args: argparse.Namespace, overrides: Dict[str, str]) -> None:
    from llmqueue.experiments.mlperf_rows import read_mlperf
    from llmqueue.experiments.mlperf_table import predict_file, summary
    path = SHIPPED if args.measurements == "shipped" else args.measurements
    plot = args.plot and files.figure_path(args.plot, "--plot")
    if plot:
        files.check_outputs([("--plot", plot)], [("--measurements", path)])
    rows = read_mlperf(path, "--measurements")
    with progress.bar(len(rows), "row", shown=False if args.json else None, desc="mlperf",
                      leave=False) as bar:
        out = predict_file(rows, overrides, lambda done, total: bar.update(done - bar.n))
    stats = summary(out)
    if plot:
        from llmqueue.experiments.measurements import summary as errors
        from llmqueue.plotting import plot_validation, save
        done = [r for r in out if r["error"] is not None]
        if not done:
            raise ValueError("--plot: no row of the file could be predicted")
        save(plot_validation(done, errors(done), overrides, key="predicted_tokens_per_s",
                             measured="tokens_per_s", group="scenario",
                             title="MLPerf Llama-2-70B (Server calibrated on Offline), "
                                   "predicted against published"), plot)
    if args.json:
        print(strict_json({"measurements": path, "set": overrides, **stats, "rows": out}))
        return
    print(table([{"label": r["line"], **{k: (v[:28] if k == "system" and v else v)
                                         for k, v in r.items()}} for r in out], COLUMNS))
    print()
    for name, s in stats["scenarios"].items():
        print(f"{name}: {s['rows']} rows, median |error| {s['median_abs_error']:.1%}, "
              f"largest {s['max_abs_error']:.1%}")
    if stats["unsupported"]:
        print(f"{stats['unsupported']} row(s) unsupported (see the last column)")

