"""Plain-text tables of run summaries."""

from __future__ import annotations

import json
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from llmqueue.experiments.base import Check, Experiment, Rows
from llmqueue.theory.stability import binding_bound

#: (summary key, column title, format) of the default table.
COLUMNS: List[Tuple[str, str, str]] = [
    ("pending_mean", "pending mean", "{:.1f}"),
    ("pending_max", "pending max", "{:d}"),
    ("pending_final", "final", "{:d}"),
    ("decode_batch_mean", "decode batch", "{:.1f}"),
    ("mixed_fraction", "mixed", "{:.0%}"),
    ("decode_only_fraction", "decode-only", "{:.0%}"),
    ("prefill_only_fraction", "prefill-only", "{:.0%}"),
    ("throughput_tokens_per_s", "tokens/s", "{:.0f}"),
    ("completed", "done", "{:d}"),
]

#: The default table of a trace replay (rows with ``replay_verdict``): the
#: latencies a user compares schedulers by, and whether each kept up.
REPLAY_COLUMNS: List[Tuple[str, str, str]] = [
    ("pending_mean", "pending mean", "{:.1f}"),
    ("throughput_tokens_per_s", "tokens/s", "{:.0f}"),
    ("output_tokens_per_s", "output tok/s", "{:.0f}"),
    ("ttft_p50", "TTFT p50 s", "{:.3f}"),
    ("ttft_p90", "p90", "{:.3f}"),
    ("ttft_p99", "p99", "{:.3f}"),
    ("tpot_p50", "TPOT p50 s", "{:.3f}"),
    ("tpot_p90", "p90", "{:.3f}"),
    ("tpot_p99", "p99", "{:.3f}"),
    ("completed", "done", "{:d}"),
    ("replay_verdict", "verdict", "{}"),
]

#: Columns the default table adds for rows with a KV cache (docs/model.md §6.7).
MEMORY_COLUMNS: List[Tuple[str, str, str]] = [
    ("kv_utilization", "KV used", "{:.0%}"),
    ("kv_max", "KV max", "{:d}"),
    ("preemptions", "preempted", "{:d}"),
    ("recompute_fraction", "recomputed", "{:.1%}"),
]

#: The column the default table adds when a cache rejected requests that can never fit it.
IGNORED_COLUMN: Tuple[str, str, str] = ("ignored", "ignored", "{:d}")


def strict_json(doc: Any) -> str:
    """``doc`` as strict JSON (RFC 8259): ``NaN`` and infinities, which
    ``json.dumps`` would write as invalid tokens, become ``null``; tuples
    become lists and anything else JSON cannot hold becomes its text."""
    return json.dumps(_finite(doc), allow_nan=False, default=str)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item) and getattr(value, "shape", None) == ():
        return _finite(item())
    return value


def cell(value: object, fmt: str) -> str:
    """One formatted cell; ``-`` where a figure is undefined."""
    return "-" if value is None else fmt.format(value)


def table(rows: Sequence[Dict[str, Any]],
          columns: Sequence[Tuple[str, str, str]] = COLUMNS) -> str:
    """Rows (with a ``label``) as an aligned text table."""
    header = ["row"] + [title for _, title, _ in columns]
    body = [[str(r["label"])] + [cell(r.get(key), fmt) for key, _, fmt in columns]
            for r in rows]
    widths = [max(len(line[i]) for line in [header] + body) for i in range(len(header))]
    lines = [header, ["-" * w for w in widths]] + body
    return "\n".join("  ".join(text.ljust(w) if i == 0 else text.rjust(w)
                               for i, (text, w) in enumerate(zip(line, widths)))
                     for line in lines)


def drift_notes(rows: Rows, params: Mapping[str, Any]) -> List[str]:
    """One line per run: backlog drift, measured verdict, Theorem 2's prediction."""
    out = []
    for label, result in rows:
        s = result.summary
        if s.get("diverged_at") is not None:
            out.append(f"{label}: diverged: {s['pending_final']} requests pending at "
                       f"t = {s['diverged_at']:.2f} s (the run stopped there)")
            continue
        if s.get("ignored"):
            out.append(f"{label}: {s['ignored']} of {s['arrivals']} requests ignored: they "
                       "can never fit the KV cache (model §6.1), and the figures are of the others")
        if s.get("verdict") is None or s.get("backlog_slope") is None:
            continue
        theory = "" if s.get("predicted") is None else \
            f"; theory: {s['predicted']} (load {s['load']:.3f}{memory_note(s)})"
        out.append(f"{label}: backlog slope {s['backlog_slope']:+.1f} +- "
                   f"{s['backlog_slope_se']:.1f} tokens/s over the second half: "
                   f"{s['verdict']}{theory}")
    out.extend(replay_notes(rows))
    out.extend(prefix_notes(rows))
    return out


def replay_notes(rows: Rows) -> List[str]:
    """For trace replays: the replay line (what was replayed, any rescaling),
    then one line per run: the backlog's drift over the second half of the
    arrivals, its verdict and Theorem 2's prediction at the trace's mean rate."""
    out: List[str] = []
    for label, result in rows:
        s, info = result.summary, result.params.get("replay")
        if info is None or "replay_verdict" not in s:
            continue
        if not out:
            out.append(info["note"])
        theory = "" if s.get("predicted") is None else \
            f"; theory at the mean rate: {s['predicted']} (load {s['load']:.3f}{memory_note(s)})"
        drift = "too few arrivals to tell" if s.get("replay_slope") is None else (
            f"backlog slope {s['replay_slope']:+.1f} +- {s['replay_slope_se']:.1f} tokens/s")
        out.append(f"{label}: over the second half of the arrivals: {drift}: "
                   f"{s['replay_verdict']}{theory}")
    return out


def prefix_notes(rows: Rows) -> List[str]:
    """One line per run with a prefix cache: its hits, and Theorem 2 at the
    prompt tokens really computed."""
    out = []
    for label, result in rows:
        s = result.summary
        if s.get("prefix_hit_ratio") is None:
            continue
        line = (f"{label}: prefix cache: {s['prefix_hit_ratio']:.1%} of the prompt tokens found "
                f"cached at first starts, {s['evictions']} evictions")
        if s.get("load_effective") is not None:
            line += (f"; with these hits the load is {s['load_effective']:.3f} (capacity "
                     f"{s['lambda_star_effective']:.4g} req/s)")
        out.append(line)
    return out


def memory_note(s: Mapping[str, Any]) -> str:
    """Where a KV cache or the slots bind the joint capacity, the rate they
    bind at (docs/model.md §6.6: the prediction then counts it)."""
    bound = binding_bound(s)
    if bound is None:
        return ""
    rate, resource = bound
    return f"; {resource} {'binds' if resource == 'memory' else 'bind'} at {rate:.4g} req/s"


def report(experiment: Experiment, rows: Rows, params: Mapping[str, Any],
           checks: Optional[List[Check]] = None) -> str:
    """What ``llmqueue run`` prints for ``rows``: the experiment's table, its
    checks (PASS/FAIL; computed when not given) and its notes (the drift notes
    by default).  Scenario scripts print the same."""
    if checks is None:
        checks = experiment.checks(rows) if experiment.checks is not None else []
    shown = [result.row(label) for label, result in rows]
    columns = experiment.columns
    if columns is None:  # the default table, with the memory figures where a cache ran
        replay = any("replay_verdict" in r for r in shown)
        memory = any("kv_utilization" in r for r in shown)
        columns = (REPLAY_COLUMNS if replay else COLUMNS) + (MEMORY_COLUMNS if memory else [])
        if any(r.get("ignored") for r in shown):
            columns = columns + [IGNORED_COLUMN]
    lines = [table(shown, columns)]
    lines += [f"{'PASS' if c.passed else 'FAIL'}  {c.name}: {c.detail}" for c in checks]
    notes = (experiment.notes or drift_notes)(rows, dict(params))
    if notes:
        lines += [""] + notes
    return "\n".join(lines)
