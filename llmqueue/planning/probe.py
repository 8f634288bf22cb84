"""One probe of ``plan`` (docs/model.md §7.7 item 4): replications at one rate (and one
number of engines), the decision PASS / FAIL / boundary, and the drift check.

Replication attainments ``A_r`` (or the upper bounds ``U_r`` of runs stopped
early) give ``mean``, ``s`` and ``hw = t_{R-1,(1+confidence)/2} s / sqrt(R)``:

* FAIL if ``mean + hw < target``;
* PASS if no run stopped early, ``mean - hw >= target`` and the drift check
  passes;
* else ``reps`` more replications up to ``max_reps``; still undecided: boundary.

Drift check (pooled over the replications), before a PASS: the window's
second half has a lower attainment than its first by more than the 95 %
half-width of the mean difference **and** the mean backlog slope over the
window is positive at the 95 % level (t across replications).  Both signals
say the runs are too short to decide: a run that starts empty at a high but
stable load shows them while it fills.  So the probe is run again with
:data:`LONGER` times the measured requests (the same seeds: common random
numbers), up to :data:`LONGEST` times, and decided by the rules above once the
drift is gone; it FAILs ("diverging") only if the drift persists at the
longest runs.  (Failing at once failed stable loads: docs/model.md §7.10, E8.6's three engines
behind ``jsq-tokens`` at 0.94 of their capacity, attainment 0.973.)
"""

from __future__ import annotations

import math
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from typing import Any, List, Optional, Sequence, Tuple

from llmqueue.planning.replicate import Run, Task, run_replication
from llmqueue.theory.stats import t975

PASS, FAIL, BOUNDARY = "pass", "fail", "boundary"
#: Each re-run of a drifting probe measures this many times more requests ...
LONGER = 2
#: ... up to this many times the plan's own.
LONGEST = 8


def t_cdf(x: float, df: int) -> float:
    """Student's t distribution function with ``df`` >= 1 degrees of freedom
    (closed forms for whole ``df``: Abramowitz and Stegun 26.7.3-4)."""
    theta = math.atan(x / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        a = s * total
    else:
        total = 0.0
        if df > 1:
            term = total = 1.0
            for k in range(1, (df - 1) // 2):
                term *= c2 * (2 * k) / (2 * k + 1)
                total += term
            total *= s * math.cos(theta)
        a = 2 / math.pi * (theta + total)
    return (1 + a) / 2


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (0.5 < p < 1) of Student's t with ``df`` degrees of
    freedom; the table of :func:`~llmqueue.theory.stats.t975` at 0.975."""
    if abs(p - 0.975) < 1e-12:
        return t975(df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def mean_hw(values: Sequence[float], confidence: float) -> Tuple[float, float]:
    """Mean and half-width ``t_{n-1,(1+confidence)/2} s / sqrt(n)`` (0 for one value)."""
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, 0.0
    s = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, t_quantile((1 + confidence) / 2, n - 1) * s / math.sqrt(n)


def diverging(runs: Sequence[Run]) -> bool:
    """docs/model.md §7.7's drift check: the second half of the window worse than the
    first beyond the 95 % half-width of the mean difference, and the backlog
    slope positive at the 95 % level; both pooled over ``runs``."""
    if len(runs) < 2:
        return False
    diff, hw = mean_hw([r.first_half - r.second_half for r in runs], 0.95)
    slopes = [r.backlog_slope for r in runs if r.backlog_slope is not None]
    if len(slopes) < 2:
        return False
    slope, shw = mean_hw(slopes, 0.95)
    return diff > hw and slope - shw > 0


@dataclass(frozen=True)
class Probe:
    """One probe: ``rate`` (req/s) on ``engines`` engines, ``reps`` replications
    (0: decided by a bound, no simulation), mean attainment ``mean`` with
    half-width ``hw``, the ``decision``, runs ``stopped`` early, simulated
    requests and seconds, a ``note`` and the runs themselves; ``seconds`` of
    wall time are left out of comparisons (same arguments, same probe)."""

    rate: float
    engines: int
    reps: int
    mean: Optional[float]
    hw: Optional[float]
    decision: str
    stopped: int = 0
    simulated_requests: int = 0
    simulated_time: float = 0.0
    note: str = ""
    runs: Tuple[Run, ...] = field(default=(), repr=False, compare=False)
    seconds: float = field(default=0.0, compare=False)

    def as_dict(self) -> dict:
        """The probe as one JSON-ready row."""
        return {"rate": self.rate, "engines": self.engines, "reps": self.reps,
                "attainment": self.mean, "hw": self.hw, "decision": self.decision,
                "stopped_early": self.stopped, "simulated_requests": self.simulated_requests,
                "simulated_time": self.simulated_time, "note": self.note,
                "seconds": self.seconds}


def _run_all(tasks: List[Task], executor: Optional[Executor], bar: Any) -> List[Run]:
    """Run ``tasks`` here or on ``executor``; results in task order."""
    if executor is None:
        out = []
        for task in tasks:
            out.append(run_replication(task))
            if bar is not None:
                bar.update()
        return out
    futures = [executor.submit(run_replication, task) for task in tasks]
    out = []
    for future in futures:
        out.append(future.result())
        if bar is not None:
            bar.update()
    return out


@dataclass(frozen=True)
class Rules:
    """The decision settings shared by every probe of a plan."""

    target: float
    confidence: float
    reps: int
    max_reps: int


def probe(base: Task, rate: float, engines: int, rules: Rules,
          executor: Optional[Executor] = None, bar: Any = None,
          above_bound: bool = False) -> Probe:
    """Decide ``rate`` on ``engines`` engines (``base`` gives everything else;
    replication ``r`` uses seed ``(base.seed, r)`` whatever the rate).
    ``above_bound``: the rate is above an approximate capacity (a context
    model's ``lambda_tok``), where a short run that starts empty can pass in
    its transient (E8.4's roofline at 1.1 of it, 500 requests: attainment
    0.99 where a long run grows): a PASS then counts only on runs of
    :data:`LONGEST` times the requests."""
    wall = time.perf_counter()
    spent: List[Run] = []  # every run, those of shorter tries too (their cost counts)
    scale = 1
    while True:
        task = replace(base, rate=rate, engines=engines, n_meas=base.n_meas * scale)
        decision, mean, hw, runs = _decide(task, rules, executor, bar)
        spent.extend(runs)
        if decision == PASS and above_bound and scale < LONGEST:
            scale = LONGEST  # a pass above the capacity must hold on long runs
            continue
        if decision != PASS or not diverging(runs):
            note = "within statistical resolution" if decision == BOUNDARY else ""
            break
        if scale >= LONGEST:
            decision = FAIL
            note = f"diverging at {scale}x the requests: the drift persists"
            break
        scale *= LONGER  # too short to decide: longer runs, the same seeds
    if scale > 1 and decision != FAIL:
        why = ("above the approximate capacity" if above_bound and scale == LONGEST
               else "a drift at shorter ones")
        note = f"{note or 'decided'} on runs of {scale}x the requests ({why})"
    return Probe(rate, engines, len(runs), mean, hw, decision, sum(r.stopped for r in runs),
                 sum(r.simulated_requests for r in spent),
                 sum(r.simulated_time for r in spent), note, tuple(runs),
                 time.perf_counter() - wall)


def _decide(base: Task, rules: Rules, executor: Optional[Executor],
            bar: Any) -> Tuple[str, float, float, List[Run]]:
    """Replications of ``base`` (``reps`` at a time, up to ``max_reps``) until
    the attainments decide: ``(decision, mean, hw, runs)``, PASS before the
    drift check."""
    runs: List[Run] = []
    mean = hw = 0.0
    while len(runs) < rules.max_reps:
        count = min(rules.reps, rules.max_reps - len(runs))
        tasks = [replace(base, replication=len(runs) + i) for i in range(count)]
        if bar is not None:
            bar.set_description(f"rate {base.rate:.4g}/s, K={base.engines}")
        runs.extend(_run_all(tasks, executor, bar))
        mean, hw = mean_hw([r.attainment for r in runs], rules.confidence)
        if mean + hw < rules.target:
            return FAIL, mean, hw, runs
        if not any(r.stopped for r in runs) and mean - hw >= rules.target:
            return PASS, mean, hw, runs
    return BOUNDARY, mean, hw, runs
