"""Speed benchmark of the KV-cache memory model (SPEC 7): the same run with
and without a cache, in one process.

Run by hand (not part of the test suite):  python benchmarks/memory.py [--quick]

Each case runs with ``kv=None`` and with a ``KV`` cache, alternately, five
times each, and prints the best wall time of each and their ratio (issue #14
asks for at most 1.5x).  "roomy" caches never bind (the cost of the accounting alone); "binding"
caches preempt (the run is then a different run, shown for scale).
"""

from __future__ import annotations

import argparse
from typing import Callable, List, NamedTuple, Optional, Tuple

import llmqueue as q
from benchmarks.bench import POINT_C, alternate, azure_like


class Case(NamedTuple):
    """One configuration, run with and without ``kv``."""

    name: str
    workload: Callable[[], q.Workload]
    kv: q.KV
    horizon: Optional[float]
    policy: str = "sarathi"
    bmax: Optional[int] = 128
    kmax: Optional[int] = 100


def cases(quick: bool) -> List[Case]:
    """Point C (uniform sizes) and the Azure-like mixture (varied sizes)."""
    scale = 0.1 if quick else 1.0
    count = int(20000 * scale)
    return [
        Case("point C sarathi-128, roomy", lambda: POINT_C, q.KV(capacity_tokens=200_000),
             5000 * scale),
        Case("point C sarathi-128, blocks of 16", lambda: POINT_C,
             q.KV(capacity_tokens=200_000, block_size=16), 5000 * scale),
        Case("point C vllm-128, prompt mode", lambda: POINT_C,
             q.KV(capacity_tokens=200_000, block_size=16, admission="prompt"), 5000 * scale,
             policy="vllm"),
        Case("point C sarathi-128, binding 38k", lambda: POINT_C,
             q.KV(capacity_tokens=38_000), 5000 * scale),
        Case(f"azure-like {count} requests, roomy", lambda: azure_like(count),
             q.KV(capacity_tokens=2_000_000), None, bmax=512, kmax=256),
        Case(f"azure-like {count} requests, blocks of 16", lambda: azure_like(count),
             q.KV(capacity_tokens=2_000_000, block_size=16), None, bmax=512, kmax=256),
    ]


def timed(case: Case, rounds: int = 5) -> Tuple[float, float]:
    """Best wall times of ``case`` without and with its cache, the two runs
    alternating ``rounds`` times (a slow spell of a shared machine then hits
    both alike, and the best of each is its quiet-machine time)."""
    plain, memory = alternate([
        lambda kv=kv: q.simulate(case.workload(), case.policy, bmax=case.bmax, kmax=case.kmax,
                                 horizon=case.horizon, kv=kv) for kv in (None, case.kv)], rounds)
    return plain, memory


def main() -> None:
    """Run every case and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of each case")
    quick = parser.parse_args().quick
    print(f"{'case':<44} {'kv=None s':>9} {'kv s':>8} {'ratio':>6}")
    for case in cases(quick):
        plain, memory = timed(case)
        print(f"{case.name:<44} {plain:>9.3f} {memory:>8.3f} {memory / plain:>5.2f}x",
              flush=True)


if __name__ == "__main__":
    main()
