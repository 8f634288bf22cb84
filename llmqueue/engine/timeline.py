"""A run's iterations as a Chrome trace-event timeline (Perfetto, chrome://tracing).

:func:`chrome_trace` turns the batch logs of labelled results into the JSON
object format of the Trace Event specification: one process (track) per
engine run, each iteration a complete event (``"ph": "X"``) named by its kind
(``mixed``, ``decode``, ``prefill``) with its tokens and members as arguments;
with a KV cache, preemptions are instant events and the KV in use a counter;
with a prefix cache (and the request log kept), each request's first start
that found its prompt's head cached is an instant event ``prefix hit`` with
its ``cached_tokens``, and its iteration's arguments list the ``hits``.
Times are microseconds, the format's unit.  Merged rows of a network (its
``total``, which repeats its engines' iterations) are left out.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Sequence, Tuple

from llmqueue.engine.results import Batch, Result


def _kind(b: Batch) -> str:
    if b.decode_tokens and b.prefill_tokens:
        return "mixed"
    return "decode" if b.decode_tokens else "prefill"


def _members(b: Batch) -> str:
    return " ".join([f"{rid}:d" for rid in b.decode] + [f"{rid}:p{n}" for rid, n in b.prefill])


def _hits(result: Result) -> Dict[Any, int]:
    """``cached_tokens`` of each request of ``result`` whose first start hit."""
    log = result.request_log or ()
    return {r.rid: r.memory.cached for r in log
            if getattr(r.memory, "cached", None)}


def chrome_trace(rows: Sequence[Tuple[str, Result]]) -> Dict[str, Any]:
    """The trace-event document of ``rows`` (``(label, result)``, each run with
    its batch log kept); a ``ValueError`` if a run has none."""
    events: List[Dict[str, Any]] = []
    pid = 0
    for label, result in rows:
        if "engines" in result.params:  # a network's merged row: its engines are tracks
            continue
        log = result.batch_log
        if log is None:
            raise ValueError(f"row {label!r} kept no batch log; run it with batches=True")
        pid += 1
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": label}})
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": "iterations"}})
        kv_log = result.kv_log
        hits = _hits(result)
        for i, b in enumerate(log):
            ts = b.start / 1000
            args: Dict[str, Any] = {"prefill_tokens": b.prefill_tokens,
                                    "decode_tokens": b.decode_tokens, "requests": b.requests,
                                    "members": _members(b)}
            memory = kv_log[i] if kv_log else None
            if memory is not None:
                args.update(memory._asdict())
            starts = [(rid, hits.pop(rid)) for rid, _ in b.prefill if rid in hits] if hits else ()
            if starts:
                args["hits"] = " ".join(f"{rid}:{tokens}" for rid, tokens in starts)
            events.append({"name": _kind(b), "cat": "iteration", "ph": "X", "ts": ts,
                           "dur": b.duration / 1000, "pid": pid, "tid": 0, "args": args})
            for rid, tokens in starts:
                events.append({"name": "prefix hit", "cat": "memory", "ph": "i", "s": "t",
                               "ts": ts, "pid": pid, "tid": 0,
                               "args": {"request": rid, "cached_tokens": tokens}})
            if memory is not None:
                events.append({"name": "kv", "ph": "C", "ts": ts, "pid": pid,
                               "args": {"tokens": memory.kv_tokens}})
                if memory.preemptions:
                    events.append({"name": "preemption", "cat": "memory", "ph": "i", "s": "t",
                                   "ts": ts, "pid": pid, "tid": 0,
                                   "args": {"count": memory.preemptions}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(rows: Sequence[Tuple[str, Result]], path: str) -> None:
    """Write :func:`chrome_trace` of ``rows`` to ``path``."""
    doc = chrome_trace(rows)
    with open(path, "w") as handle:
        json.dump(doc, handle, separators=(",", ":"))
