"""Prefix caching on the Mooncake traces: the hit ratio counted from each file
against replays on an engine that never waits.

Mooncake's FAST'25 release gives, for every request, the content ids of its
prompt's 512-token blocks (``hash_ids``): two requests whose ``i``-th ids are
equal share their first ``(i + 1) 512`` tokens.  Counting, request by request,
the leading blocks already seen in requests that arrived strictly earlier
gives the **ideal hit ratio** (:func:`~llmqueue.theory.prefix.ideal_hit_ratio`,
``H = 512``), with no simulation: 0.3733 of the conversation file's prompt
tokens and 0.6504 of the synthetic file's.  The conversation file's
timestamps come in 3-second steps, about ten requests an instant, and
requests of one instant cannot share what none of them has computed yet.

A replay of each file, timestamps as given, on an engine that never waits
(every iteration 1 µs whatever its size, a budget of 10^6 tokens, no kmax)
with an unlimited prefix cache (10^12 KV tokens in blocks of 16) finishes
every request long before the next arrival instant, so it finds exactly that
share cached: its ``prefix_hit_ratio`` lies within 0.005 below the ideal and
never more than 0.0005 above it.  With a cache of M = 3,000,000 tokens, least
recently used blocks are evicted and the hit ratio falls to about 0.14 and
0.32.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence

from llmqueue.engine.kv import KV
from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result
from llmqueue.engine.simulate import simulate
from llmqueue.experiments.azure import TRACES
from llmqueue.experiments.base import Check, Column, Experiment, Param, Rows, register
from llmqueue.models.latency import Staircase
from llmqueue.models.traces import read_trace
from llmqueue.models.workload import Workload
from llmqueue.theory.prefix import ideal_hit_ratio

#: ``../shared/traces/mooncake`` beside the repository: the two files of the release.
FOLDER = os.path.join(TRACES, "mooncake")
FILES = ("conversation_trace.jsonl", "synthetic_trace.jsonl")
#: The engine that never waits: 1 µs per iteration, no budget or slot limit that binds.
LATENCY = Staircase(c=1e-6, a=0)
BMAX = 10**6
KV_BLOCK = 16
#: An unlimited cache: no block is ever evicted.
UNLIMITED_CACHE = 10**12
#: M: the limited cache (tokens).
CACHE = 3_000_000
#: Each whole file's (ideal hit ratio counted from it, hit ratio an independent
#: stepper replays with M = :data:`CACHE`), to 4 decimals.
REFERENCE = {"conversation_trace.jsonl": (0.3733, 0.1436),
             "synthetic_trace.jsonl": (0.6504, 0.3210)}
DIGITS = 0.00005   # a figure given to 4 decimals
BELOW = 0.005      # the unlimited replay may find this much less than the ideal
ABOVE = 0.0005     # ... and never more than this above it
ABOUT = 0.01       # the limited cache against the reference figure: "about"
#: What ``llmqueue list`` says it runs.
SUMMARY = ("prefix caching on the Mooncake traces: the ideal hit ratio against replays "
           "with an unlimited and a 3,000,000-token cache")
#: The ``--set`` parameters: the traces, the limited cache, a shorter replay.
PARAMS: Dict[str, Param] = {
    "path": Param("str", "", f"a Mooncake .jsonl file, or a folder holding {' and '.join(FILES)} "
                  "(default: ../shared/traces/mooncake)"),
    "kv": Param("int", CACHE, "the limited cache M (KV tokens)", low=KV_BLOCK),
    "limit": Param("int-or-none", None, "replay only the first N requests of each file", low=1)}


def trace_files(path: str) -> List[str]:
    """The traces ``path`` names: a folder's :data:`FILES`, or one file.  A
    missing file is a one-line ValueError naming it."""
    path = str(path)
    folder = path or FOLDER
    names = [os.path.join(folder, f) for f in FILES] if not path or os.path.isdir(path) \
        else [path]
    for name in names:
        if not os.path.isfile(name):
            raise ValueError(f"path: {os.path.normpath(name)} is absent; give a folder "
                             f"holding {' and '.join(FILES)}, or one Mooncake .jsonl file, "
                             "with --set path=... (the default folder, ../shared/traces/"
                             "mooncake beside the repository, is not in a fresh clone)")
    return names


def replay(workload: Workload, M: int) -> Result:
    """``workload`` on the engine that never waits with a prefix cache of ``M``
    KV tokens in blocks of :data:`KV_BLOCK`, until every request has finished."""
    return simulate(workload, "sarathi", bmax=BMAX, kmax=None, latency=LATENCY,
                    kv=KV(capacity_tokens=M, block_size=KV_BLOCK, prefix=True))


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """Two rows per trace file: the replay with the unlimited cache, then with
    ``kv`` tokens, each with the file's ideal hit ratio beside its own."""
    out: Rows = []
    for path in trace_files(params["path"]):
        trace = read_trace(path, format="mooncake")
        workload = trace.workload(limit=params["limit"])
        assert trace.hash_block is not None  # a Mooncake file names its hash block
        ideal = ideal_hit_ratio(workload, trace.hash_block)
        name = os.path.basename(path)
        whole = workload.count == len(trace)
        reference = REFERENCE.get(name) if whole else None
        stem = name.split("_")[0] if name in REFERENCE else name
        for M in (UNLIMITED_CACHE, params["kv"]):
            result = replay(workload, M)
            unlimited = M == UNLIMITED_CACHE
            hit = result.summary["prefix_hit_ratio"]
            result.add_figures(
                trace=name, requests=workload.count, whole_file=whole, kv=M,
                unlimited=unlimited, hash_block=trace.hash_block, ideal_hit_ratio=ideal,
                gap=None if hit is None else hit - ideal,
                reference_ideal=reference[0] if reference else None,
                reference_hit=reference[1] if reference and M == CACHE else None)
            out.append((f"{stem} {'unlimited' if unlimited else f'M={M:,}'}", result))
    return out


def checks(rows: Rows) -> List[Check]:
    """The ideal of each whole reference file to 4 decimals; the unlimited
    replays at the ideal; the limited ones not above it, and near the
    reference figure where there is one."""
    out = []
    for label, result in rows:
        s = result.summary
        hit, ideal = s["prefix_hit_ratio"], s["ideal_hit_ratio"]
        if s["unlimited"]:
            if s["reference_ideal"] is not None:
                out.append(Check(f"{label}: ideal hit ratio counted from the file",
                                 abs(ideal - s["reference_ideal"]) <= DIGITS,
                                 f"{ideal:.4f} against {s['reference_ideal']:.4f}"))
            out.append(Check(f"{label}: simulated hit ratio at the ideal (from {BELOW:g} "
                             f"below to {ABOVE:g} above)",
                             hit is not None and ideal - BELOW <= hit <= ideal + ABOVE,
                             f"{_ratio(hit)} against {ideal:.4f}"))
        else:
            out.append(Check(f"{label}: no more than the ideal (LRU evictions lose hits)",
                             hit is not None and hit <= ideal + ABOVE,
                             f"{_ratio(hit)} against {ideal:.4f}, {s['evictions']:,} "
                             "evictions"))
            if s["reference_hit"] is not None:
                out.append(Check(f"{label}: about the reference replay (within {ABOUT:g})",
                                 hit is not None and abs(hit - s["reference_hit"]) <= ABOUT,
                                 f"{_ratio(hit)} against {s['reference_hit']:.4f}"))
    return out


def _ratio(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.4f}"


def notes(rows: Rows, params: Dict[str, Any]) -> List[str]:
    """What each file's rows say, in words."""
    out = []
    for label, result in rows:
        s = result.summary
        if s["unlimited"]:
            out.append(f"{s['trace']}: {s['requests']:,} requests"
                       f"{'' if s['whole_file'] else ' (the first of the file)'}; "
                       f"{s['ideal_hit_ratio']:.2%} of the prompt tokens were seen before "
                       f"(hash blocks of {s['hash_block']} tokens)")
        else:
            out.append(f"{label}: a cache of {s['kv']:,} tokens keeps "
                       f"{(s['prefix_hit_ratio'] or 0.0) / s['ideal_hit_ratio']:.0%} of the "
                       f"ideal hits ({s['evictions']:,} entries evicted, at most "
                       f"{s['cache_entries_max']:,} held)")
    return out


COLUMNS: Sequence[Column] = [
    ("ideal_hit_ratio", "ideal", "{:.4f}"), ("prefix_hit_ratio", "simulated", "{:.4f}"),
    ("gap", "simulated - ideal", "{:+.4f}"), ("evictions", "evictions", "{:,d}"),
    ("cache_entries_max", "entries max", "{:,d}"), ("completed", "done", "{:,d}")]


EXPERIMENT = register(Experiment(
    "prefix-mooncake", SUMMARY, PARAMS, run, options=frozenset(),
    checks=checks, columns=COLUMNS, notes=notes))
