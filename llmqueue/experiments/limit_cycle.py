"""The worst-case limit cycle of greedy admission (docs/model.md §6.8.4, Ao-Dong model).

The type and cache of docs/model.md §6.8.3 ((20, 200) tokens, M = 100,000) with a
constant iteration time tau = 1 s (``Staircase(c=1, a=0, b0=1)``), so a
second is an iteration and throughput is completions per iteration.
Saturated: 3,000 requests at t = 0, then Poisson arrivals at 1.5 M / g per
iteration.

* ``restart="scratch"`` (a preempted request loses its decoded tokens):
  greedy admission falls into a cycle where its residents grow in step until
  the cache is full at their peak, so a cohort of M / (vp + vd) finishes every
  vd + 1 iterations: M / ((vd + 1)(vp + vd)) = 2.261 completions per
  iteration (prototype 2.247), not the fixed point M / g = 4.146; the share
  (vp + vd/2) / (vp + vd) = 0.545 of it, close to the paper's "up to 50 %";
* WAIT(4), same restart: exactly 4 per iteration once warm, never a preemption;
* ``restart="keep"``: greedy stays near the fixed point (prototype 4.108): a
  preempted request resumes where it stopped, so the loss is only the recompute
  work, free under a constant time and paid in time under §6.8.3's linear one.

Figures over the second half of the run (default 4,000 iterations; docs/model.md's
prototype ran 20,000): completions per iteration (the mean over whole cycles
of vd + 1 iterations, and the least and most in one iteration), preemptions
per iteration, recompute fraction, KV utilization.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np

from llmqueue.common.units import TICKS_PER_SECOND
from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result
from llmqueue.experiments import memory_runs as mr
from llmqueue.experiments.base import Check, Param, Rows
from llmqueue.experiments.greedy_memory import (INITIAL, M, SATURATION, VD, VP, label, policy,
                                                serve, theory)
from llmqueue.models.arrivals import Poisson
from llmqueue.models.latency import Staircase
from llmqueue.models.workload import Workload, compose
from llmqueue.theory.greedy import limit_cycle_rate, limit_cycle_share

TAU = 1.0                              # seconds per iteration
CONSTANT = Staircase(c=TAU, a=0, b0=1)
HORIZON = 4000.0                       # iterations (seconds)
#: The rows: (policy, restart).
ROWS: Tuple[Tuple[str, str], ...] = (("greedy", "scratch"), ("wait", "scratch"),
                                     ("greedy", "keep"))
#: docs/model.md §6.8.4's prototype figures [S] and the tolerances of the checks.
PROTOTYPE_SCRATCH = 2.247              # completions per iteration, greedy scratch
PROTOTYPE_KEEP = 4.108                 # completions per iteration, greedy keep
CYCLE_TOL = 0.02                       # relative, greedy scratch against M / ((vd+1)(vp+vd))
KEEP_TOL = 0.05                        # relative, greedy keep against the fixed point M / g
#: The table: completions per iteration (mean over whole cycles, least, most),
#: preemptions, recompute and KV use over the second half.
COLUMNS = [("completions_per_iteration", "done/iter", "{:.3f}"),
           ("completions_min", "least", "{:d}"), ("completions_max", "most", "{:d}"),
           ("preemptions_per_iteration", "preempt/iter", "{:.2f}"),
           ("recompute_fraction", "recomputed", "{:.1%}"), ("kv_utilization", "KV used", "{:.1%}"),
           ("batches", "iterations", "{:d}")]


def workload(seed: int, initial: int = INITIAL) -> Workload:
    """Saturated arrivals: ``initial`` requests at t = 0, then Poisson at
    1.5 times the fixed point M / g per iteration."""
    rate = SATURATION * theory(CONSTANT)["fixed_point"] / TAU
    return compose(Poisson(rate), VP, VD, seed=seed, initial=initial)


def completions(result: Result) -> Tuple[np.ndarray, np.ndarray]:
    """``(end s, completions)`` of every iteration of a run recorded with
    ``batches=True`` and ``requests=True``: the requests that finished at its end."""
    if result.batch_log is None or result.request_log is None:
        raise ValueError("completions needs a run recorded with batches=True and requests=True")
    ends = np.array([b.start + b.duration for b in result.batch_log], dtype=np.int64)
    done = np.array([r.finished for r in result.request_log if r.finished is not None],
                    dtype=np.int64)
    at = np.searchsorted(ends, done)
    counts = np.bincount(at[at < len(ends)], minlength=len(ends))
    return ends / TICKS_PER_SECOND, counts


def cycle_figures(result: Result, horizon: float) -> Dict[str, Any]:
    """Completions per iteration over the second half of a run of ``horizon``
    s: the mean over its last whole cycles of ``vd + 1`` iterations (greedy's
    cohorts finish together once a cycle, so a window that cuts a cycle would
    be off by up to a cohort) and the least and most in one iteration."""
    ends, counts = completions(result)
    late = counts[ends > horizon / 2]
    whole = late[len(late) % (VD + 1):]
    return {"completions_per_iteration": float(whole.mean()) if whole.size else None,
            "cycles": len(whole) // (VD + 1),
            "completions_min": int(late.min()) if late.size else None,
            "completions_max": int(late.max()) if late.size else None}


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """Greedy with ``restart=scratch``, WAIT(4) with ``scratch`` and greedy with
    ``keep``, on the same arrivals."""
    horizon = options.horizon or HORIZON
    rows: Rows = []
    for name, restart in ROWS:
        result = serve(workload(options.seed or 0, params["initial"]), policy(name), horizon,
                       latency=CONSTANT, restart=restart, requests=True,
                       timeseries=options.timeseries)
        result.add_figures(policy=name, restart=restart, **cycle_figures(result, horizon))
        if not options.requests:
            result.request_log = None
        if not options.batches:
            result.batch_log = result.kv_log = None
        rows.append((f"{label(name)} {restart}", result))
    return rows


def _found(rows: Rows) -> Dict[Tuple[str, str], Any]:
    return {(r.summary["policy"], r.summary["restart"]): r.summary for _, r in rows}


def checks(rows: Rows) -> List[Check]:
    """docs/model.md §6.8.4's three expectations, for the rows present."""
    cycle, point = limit_cycle_rate(M, VP, VD), theory(CONSTANT)["fixed_point"]
    out = []
    for (name, restart), s in _found(rows).items():
        rate = s["completions_per_iteration"]
        row = f"{label(name)} {restart}"
        if rate is None:
            out.append(Check(f"{row}: figures defined", False, "too short a run: no whole "
                             f"cycle of {VD + 1} iterations in the second half"))
            continue
        got = f"{rate:.3f} per iteration"
        if name == "wait":
            exact = s["completions_min"] == s["completions_max"] == 4 and s["preemptions"] == 0
            out.append(Check(f"{row}: exactly 4 completions in every iteration of the second "
                             "half, no preemption", exact,
                             f"{s['completions_min']}..{s['completions_max']} per iteration, "
                             f"{s['preemptions']} preemptions"))
        elif restart == "scratch":
            out.append(Check(f"{row}: M/((vd+1)(vp+vd)) = {cycle:.3f} per iteration "
                             f"(+-{CYCLE_TOL:.0%}; prototype {PROTOTYPE_SCRATCH})",
                             abs(rate - cycle) <= CYCLE_TOL * cycle, got))
        else:
            out.append(Check(f"{row}: near the fixed point M/g = {point:.3f} (+-{KEEP_TOL:.0%}; "
                             f"prototype {PROTOTYPE_KEEP})", abs(rate - point) <= KEEP_TOL * point,
                             got))
    return out


def notes(rows: Rows, params: Dict[str, Any]) -> List[str]:
    """The closed forms and the scratch / keep contrast."""
    cycle, point = limit_cycle_rate(M, VP, VD), theory(CONSTANT)["fixed_point"]
    lines = [f"Theory: fixed point M/g = {point:.3f} completions per iteration; greedy's limit "
             f"cycle under restart=scratch M/((vd+1)(vp+vd)) = {cycle:.3f}, a share "
             f"(vp + vd/2)/(vp + vd) = {limit_cycle_share(VP, VD):.3f} of it."]
    found = _found(rows)
    scratch, keep = found.get(("greedy", "scratch")), found.get(("greedy", "keep"))
    a = None if scratch is None else scratch["completions_per_iteration"]
    b = None if keep is None else keep["completions_per_iteration"]
    if a is not None and b is not None and keep is not None:
        lines.append(
            f"Contrast: with restart=scratch greedy completes {a:.3f} per iteration "
            f"({a / point:.1%} of M/g): a preempted request loses its decoded tokens, the "
            f"residents regrow in step and the cache fills at their peak. With restart=keep it "
            f"completes {b:.3f} ({b / point:.1%}): a victim resumes where it stopped, so the "
            f"loss is only the recompute ({keep['recompute_fraction']:.0%} of processed tokens "
            f"here), free under a constant time and paid as longer iterations under model §6.8.3's "
            "linear time (the storms).")
    wait = found.get(("wait", "scratch"))
    if wait is not None and wait["completions_per_iteration"] is not None:
        lines.append(f"WAIT(4) starts exactly 4 whole prompts per iteration and never preempts: "
                     f"{wait['completions_per_iteration']:.3f} per iteration, "
                     f"{wait['completions_min']}..{wait['completions_max']} in every iteration "
                     "of the second half.")
    return lines


EXPERIMENT = mr.register_memory(
    name="limit-cycle",
    summary="model §6.8.4: greedy admission's worst-case limit cycle (restart=scratch, tau = 1) "
            "against WAIT(4) and restart=keep",
    params={"initial": Param("int", INITIAL, "requests at t = 0", low=1)},
    run=run, checks=checks, columns=COLUMNS, notes=notes, horizon=HORIZON, recordings=True)
