"""Speed of capacity planning (SPEC 8.10, E8.6 "Speed"): the whole
``plan_engines`` call of E8.6 and what early stopping saves on FAIL probes.

Run by hand (not part of the test suite):  python benchmarks/plan.py [--quick]

1. ``plan_engines`` of E8.6 at full size (39 req/s, 3 replications of 3600
   measured requests a round, up to 20), per router, with ``early_stop`` on and
   off: wall and CPU seconds, ``K_min`` (the same answer either way?) and the
   seconds spent in FAIL probes.  SPEC asks for the whole call in under 5
   minutes on one core.
2. ``plan`` of E8.5 at full size (5 replications of 3000 requests a round), per
   scheduler, with ``early_stop`` on and off: goodput, ``hi``, crossing, time.
3. FAIL probes with ``early_stop`` on against off: every simulated FAIL probe
   of parts 1 and 2 (early stopping on) and E8.6's K = 2 probe per router
   (below K_lb, which the search decides without simulation), each run both
   ways with the same rules: decisions and the ratio of the seconds.  SPEC asks
   early stopping to cut them at least in half, with the same answer.

CPU seconds (``time.process_time``) are printed beside wall seconds: the
machine may be shared, and CPU time is what one core would take alone.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import replace
from typing import Any, Callable, Dict, List, Sequence, Tuple, TypeVar

from llmqueue.experiments import engines, goodput
from llmqueue.planning import EngineSpec, plan, plan_engines
from llmqueue.planning.probe import FAIL, Probe, Rules, probe
from llmqueue.planning.replicate import Task

T = TypeVar("T")
TARGET, CONFIDENCE = 0.9, 0.95
#: A FAIL probe to time: its name, replication settings, rate, engines and rules.
Case = Tuple[str, Task, float, int, Rules]


def timed(call: Callable[..., T], *args: Any, **kwargs: Any) -> Tuple[T, float, float]:
    """``call(*args, **kwargs)``, its wall seconds and its CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = call(*args, **kwargs)
    return out, time.perf_counter() - wall, time.process_time() - cpu


def task(p: Dict[str, Any], spec: EngineSpec, k: int, router: str) -> Task:
    """The replication settings ``plan`` and ``plan_engines`` build for ``p``."""
    return Task(goodput.traffic(p), spec, goodput.slo(p), 1.0, 0, 0,
                math.ceil(0.1 * p["requests"]), p["requests"], TARGET, "joint", True, k, router)


def fails(name: str, p: Dict[str, Any], spec: EngineSpec, router: str,
          probes: Sequence[Probe]) -> List[Case]:
    """The simulated FAIL probes among ``probes``, as cases to time."""
    rules = Rules(TARGET, CONFIDENCE, p["reps"], p["max_reps"])
    return [(name, task(p, spec, q.engines, router), q.rate, q.engines, rules)
            for q in probes if q.reps and q.decision == FAIL]


def part_one(e: Dict[str, Any]) -> List[Case]:
    """E8.6's ``plan_engines`` per router, early stopping on and off."""
    print(f"1. plan_engines of E8.6: {e['rate']:g} req/s, {e['reps']} x {e['requests']} "
          f"requests a round (up to {e['max_reps']})\n")
    print(f"{'router':>10} {'early':>5} {'K_min':>5}  {'probes (K: decision reps)':<40} "
          f"{'wall s':>7} {'cpu s':>7} {'FAIL s':>7}")
    spec = goodput.engine(e, e["scheduler"])
    cases: List[Case] = []
    for router in engines.ROUTERS:
        runs = {}
        for early in (True, False):
            r, wall, cpu = timed(plan_engines, e["rate"], goodput.traffic(e), spec,
                                 goodput.slo(e), TARGET, router, reps=e["reps"],
                                 max_reps=e["max_reps"], n_requests=e["requests"],
                                 early_stop=early, progress=False)
            runs[early] = (r, wall, cpu)
            probes = ", ".join(f"{q.engines}: {q.decision} {q.reps}" for q in r.probes
                               if q.reps)
            spent = sum(q.seconds for q in r.probes if q.reps and q.decision == FAIL)
            print(f"{router:>10} {'on' if early else 'off':>5} {str(r.k_min):>5}  "
                  f"{probes:<40} {wall:7.1f} {cpu:7.1f} {spent:7.1f}")
        (on, won, con), (off, woff, coff) = runs[True], runs[False]
        print(f"{'':>10} same K_min: {on.k_min == off.k_min}; the call with early stopping "
              f"takes {won / woff:.2f} of the wall time and {con / coff:.2f} of the CPU time")
        cases += fails(f"E8.6 {router}", e, spec, router, on.probes)
        rules = Rules(TARGET, CONFIDENCE, e["reps"], e["max_reps"])
        cases.append((f"E8.6 {router} K=2", task(e, spec, 2, router), e["rate"], 2, rules))
    print("(SPEC: the whole call in under 5 minutes on one core)\n")
    return cases


def part_two(g: Dict[str, Any]) -> List[Case]:
    """E8.5's ``plan`` per scheduler, early stopping on and off."""
    print(f"2. plan of E8.5: {g['reps']} x {g['requests']} requests a round (up to "
          f"{g['max_reps']})\n")
    print(f"{'scheduler':>17} {'early':>5} {'goodput':>8} {'hi':>7} {'crossing':>8} "
          f"{'probes':>6} {'wall s':>7} {'cpu s':>7} {'FAIL s':>7}")
    cases: List[Case] = []
    for name in goodput.SCHEDULERS:
        spec = goodput.engine(g, name)
        for early in (True, False):
            r, wall, cpu = timed(plan, goodput.traffic(g), spec, goodput.slo(g), TARGET,
                                 reps=g["reps"], max_reps=g["max_reps"],
                                 n_requests=g["requests"], early_stop=early, progress=False)
            spent = sum(q.seconds for q in r.probes if q.reps and q.decision == FAIL)
            crossing = "-" if r.crossing is None else f"{r.crossing:.3f}"
            print(f"{name:>17} {'on' if early else 'off':>5} {r.goodput:8.3f} {r.hi:7.3f} "
                  f"{crossing:>8} {sum(1 for q in r.probes if q.reps):6d} {wall:7.1f} "
                  f"{cpu:7.1f} {spent:7.1f}")
            if early:
                cases += fails(f"E8.5 {name}", g, spec, "jsq-tokens", r.probes)
    print()
    return cases


def part_three(cases: List[Case]) -> None:
    """Each FAIL probe with early stopping on and off."""
    print("3. FAIL probes, early stopping on against off (same rules, same seeds)\n")
    print(f"{'probe':>26} {'rate':>7} {'K':>2} {'on: decision reps stopped':>26} "
          f"{'off: decision reps':>19} {'on s':>6} {'off s':>6} {'off/on':>6}")
    sums = [0.0, 0.0, 0.0, 0.0]
    same = True
    for name, base, rate, k, rules in cases:
        on, w_on, c_on = timed(probe, base, rate, k, rules)
        off, w_off, c_off = timed(probe, replace(base, early_stop=False), rate, k, rules)
        same &= on.decision == off.decision
        for i, v in enumerate((w_on, w_off, c_on, c_off)):
            sums[i] += v
        print(f"{name:>26} {rate:7.3f} {k:2d} {f'{on.decision} {on.reps} {on.stopped}':>26} "
              f"{f'{off.decision} {off.reps}':>19} {w_on:6.2f} {w_off:6.2f} "
              f"{w_off / w_on:6.1f}")
    print(f"\nall {len(cases)} probes: {sums[0]:.1f} s with early stopping, {sums[1]:.1f} s "
          f"without ({sums[1] / sums[0]:.1f}x; CPU {sums[2]:.1f} s against {sums[3]:.1f} s: "
          f"{sums[3] / sums[2]:.1f}x); same decisions: {same}  (SPEC: at least 2x, same answer)")


def main() -> None:
    """The three parts, full size (``--quick``: a tenth of the requests)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the requests")
    scale = 10 if parser.parse_args().quick else 1
    e = engines.EXPERIMENT.resolve({})
    g = goodput.EXPERIMENT.resolve({})
    for p in (e, g):
        p["requests"] //= scale
    cases = part_one(e)
    cases += part_two(g)
    part_three(cases)


if __name__ == "__main__":
    main()
