"""The ``llmqueue compare`` subcommand: several schedulers on one trace.

``llmqueue compare TRACE [--scheduler a,b,c] [--set KEY=VALUE ...]
[--horizon S] [--json]`` replays the trace file (as ``run trace`` does, with
its ``--set`` keys: the engine, ``speedup``, ``limit``...) once per scheduler,
every scheduler on the same requests, and prints one row each: requests
done, tokens/s, TTFT and TPOT p50/p90/p99 and the verdict of the backlog's
drift over the second half of the arrivals, then the replay line (any
rescaling) and each scheduler's drift.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List

from llmqueue import experiments
from llmqueue.cli import settings
from llmqueue.cli.report import report, strict_json
from llmqueue.common import progress
from llmqueue.engine.options import RunOptions
from llmqueue.experiments.azure import SCHEDULERS
from llmqueue.experiments.base import Rows
from llmqueue.policies.builtin import make_policy


def add_parser(sub: "argparse._SubParsersAction") -> None:
    """Add ``compare`` to the command's subparsers."""
    p = sub.add_parser("compare", help="replay a trace under several schedulers: latency "
                       "percentiles, throughput and a verdict each")
    p.add_argument("trace", metavar="TRACE",
                   help="trace file: CSV arrival,prefill,decode[,class], Azure 2023 CSV, "
                        "or Mooncake .jsonl")
    p.add_argument("--scheduler", metavar="A,B,...",
                   help=f"schedulers to compare, comma-separated (default: {','.join(SCHEDULERS)})")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a parameter of `run trace` (repeatable; `llmqueue run trace -h` "
                        "lists them): the engine, speedup=X, limit=N...")
    p.add_argument("--horizon", type=float, help="simulated seconds (default: until every "
                                                 "request has finished)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=cmd_compare)


def scheduler_names(text: str) -> List[str]:
    """``--scheduler``'s comma-separated names, each one a known scheduler."""
    names = [name.strip() for name in text.split(",")]
    if "" in names:
        raise ValueError(f"--scheduler takes names separated by commas; got {text!r}")
    if len(set(names)) < len(names):
        raise ValueError(f"--scheduler names a scheduler twice; got {text!r}")
    for name in names:
        make_policy(name)  # fail before any run on an unknown name
    return names


def cmd_compare(args: argparse.Namespace) -> None:
    """Replay the trace under each scheduler; print the table (or JSON)."""
    experiment = experiments.get("trace")
    values = settings.pairs(args.set)
    for key, how in (("path", "the trace is compare's TRACE argument"),
                     ("scheduler", "give the schedulers with --scheduler A,B,...")):
        if key in values:
            raise ValueError(f"--set {key} is not read by compare: {how}")
    names = scheduler_names(args.scheduler) if args.scheduler is not None else list(SCHEDULERS)
    if args.horizon is not None and not args.horizon > 0:
        raise ValueError(f"--horizon must be a number > 0; got {args.horizon}")
    given = {**values, "path": args.trace}
    params = {name: experiment.resolve({**given, "scheduler": name}) for name in names}
    options = RunOptions(horizon=args.horizon)
    rows: Rows = []
    with progress.runs_shown(not args.json and sys.stderr.isatty()):
        for name in names:
            rows += experiment.execute(params[name], options)
    first = params[names[0]]
    shown: Dict[str, Any] = {**{k: v for k, v in first.items() if k != "scheduler"},
                             "schedulers": names, "horizon": args.horizon}
    if args.json:
        replay = {k: v for k, v in rows[0][1].params["replay"].items() if k != "note"}
        print(strict_json({"command": "compare", "trace": args.trace, "params": shown,
                           "replay": {**replay, "line": rows[0][1].params["replay"]["note"]},
                           "rows": [result.row(label) for label, result in rows]}))
        return
    run = rows[0][1].params
    print(f"{args.trace} under {len(names)} scheduler{'s' if len(names) > 1 else ''}, each on "
          f"the same requests: bmax = {run['bmax']}, kmax = {run['kmax']}, {run['latency']}"
          + (f", horizon {args.horizon:g} s" if args.horizon else "") + "\n")
    print(report(experiment, rows, first))
    print("\nverdict: the backlog's drift over the second half of the arrivals (stable, "
          "unstable or inconclusive), as `llmqueue run` checks a run's second half")
