"""Speed benchmark of prefix caching (SPEC 10): the same run with the cache
and without it, in one process.

Run by hand (not part of the test suite):  python benchmarks/prefix.py [--quick]

Each case runs its workload without prefix ids on ``KV(prefix=False)`` and
with them on ``KV(prefix=True)``, alternately, three times each, and prints
the best wall time of each, their ratio (issue #31 asks for at most 1.5x on
E10.2's workload) and each run's iterations, since the cache changes the run
itself: hits remove prefill work, so at one rate the cached run is lighter,
and a run with the cache steps every iteration (no skip-ahead).
"""

from __future__ import annotations

import argparse
from typing import Any, Callable, Dict, List, NamedTuple

import llmqueue as q
from benchmarks.bench import alternate
from llmqueue.models import PrefixGroups, Sessions
from llmqueue.models.sizes import Geometric
from llmqueue.theory.prefix import lambda_star_cached

#: SPEC E10.2's capacity with every group's 1024-token prefix cached (req/s).
LAMBDA_C = lambda_star_cached(512, 1152, 128, 1024)


class Case(NamedTuple):
    """One workload, run without and with the prefix cache."""

    name: str
    workload: Callable[[], Any]
    kv_tokens: int


def groups(rate: float, count: int) -> PrefixGroups:
    """E10.2's prefix groups at ``rate`` requests/s."""
    return PrefixGroups(8, 1.0, 1024, Geometric(128), Geometric(128), rate=rate, count=count,
                        seed=1)


def cases(quick: bool) -> List[Case]:
    """E10.2 at 0.9 of its capacity with the cache, at 0.9 of the capacity
    without it (both runs stable), and E10.4's sessions."""
    n = 400 if quick else 4000
    return [
        Case(f"E10.2 groups, {n} requests at 0.9 lambda*_c", lambda: groups(0.9 * LAMBDA_C, n),
             2_000_000),
        Case(f"E10.2 groups, {n} requests at 0.18 lambda*_c",
             lambda: groups(0.18 * LAMBDA_C, n), 2_000_000),
        Case(f"E10.4 sessions, {n // 10} sessions", lambda: Sessions(
            0.5, n // 10, Geometric(5), 10.0, Geometric(64), Geometric(128), seed=1),
             1_000_000),
    ]


def run(case: Case, prefix: bool, batches: Dict[bool, int]) -> None:
    """One run of ``case``, with the cache or without; its iterations go to ``batches``."""
    work = case.workload()
    s = q.simulate(work if prefix else work.without_ids(), bmax=512, kmax=None,
                   kv=q.KV(capacity_tokens=case.kv_tokens, block_size=16, prefix=prefix)).summary
    batches[prefix] = s["batches"]


def main() -> None:
    """Run every case and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of each case")
    quick = parser.parse_args().quick
    print(f"{'case':<44} {'plain s':>8} {'prefix s':>8} {'ratio':>6} {'iterations':>17}")
    for case in cases(quick):
        batches: Dict[bool, int] = {}
        plain, cached = alternate([lambda c=case, p=prefix, b=batches: run(c, p, b)
                                   for prefix in (False, True)], rounds=3)
        print(f"{case.name:<44} {plain:>8.3f} {cached:>8.3f} {cached / plain:>5.2f}x "
              f"{batches[False]:>8} {batches[True]:>8}", flush=True)


if __name__ == "__main__":
    main()
