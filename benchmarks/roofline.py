"""Speed benchmark: a context-aware roofline run against the same run on the
staircase (SPEC 8.2: the engine keeps the batch context incrementally and still
skips ahead over identical batches, summing each iteration's own time).

Run by hand (not part of the test suite):  python benchmarks/roofline.py [--reps N]

For each point C row (290 + 990 tokens every 0.4675 s, kmax 100, 500 s) it
prints the staircase and roofline wall times (best of ``--reps``, runs
interleaved so machine load hits both alike), their iterations, and the ratio
of wall times and of wall time per iteration.  ``simulate`` also asks the theory
for a predicted verdict, which for a model of unknown shape above capacity
searches the peak token rate over every batch size up to 65,536 (a fixed cost
outside the engine, large for fastertransformer-whole's budget of 10^6): the
``theory s`` column is that part of the roofline run, and ``engine ratio``
leaves it out of both.  The roofline is CodeLlama-34B on
one A100-80GB with the default efficiencies, the GPU the staircase was fitted on.
"""

from __future__ import annotations

import argparse
import gc
import time
from typing import Any, Dict, List, Tuple

import llmqueue as q
from llmqueue.experiments.point_c import ROWS, label
from llmqueue.policies.builtin import make_policy
from llmqueue.theory.stability import predict

POINT_C = q.renewal(0.4675, 290, 990)
HORIZON = 500.0


def timed(latency: Any, policy: str, bmax: int, chunked: bool) -> Tuple[float, int]:
    """Wall seconds and iterations of one point C run."""
    gc.collect()
    start = time.perf_counter()
    result = q.simulate(POINT_C, policy, bmax=bmax, kmax=100, chunked=chunked,
                        horizon=HORIZON, latency=latency)
    return time.perf_counter() - start, int(result.summary["batches"])


def theory_seconds(latency: Any, policy: str, bmax: int, chunked: bool) -> float:
    """Wall seconds of the predicted verdict ``simulate`` adds to a point C run."""
    start = time.perf_counter()
    predict(1 / 0.4675, 290, 990, work_conserving=make_policy(policy, chunked).work_conserving,
            bmax=bmax, kmax=100, latency=latency)
    return time.perf_counter() - start


def main() -> None:
    """Print one line per point C row and the overall ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="runs per row and model (5)")
    reps = parser.parse_args().reps
    roofline = q.Roofline("A100-80GB", "codellama-34b")
    models: Dict[str, Any] = {"staircase": None, "roofline": roofline}
    print(f"{'row':<26} {'stair s':>8} {'its':>7} {'roof s':>8} {'its':>7} "
          f"{'wall ratio':>10} {'per-it ratio':>12} {'theory s':>8} {'engine ratio':>12}")
    totals: List[float] = [0.0, 0.0, 0.0]
    for policy, bmax, chunked in ROWS:
        best: Dict[str, Tuple[float, int]] = {}
        for _ in range(reps):
            for name, model in models.items():
                seconds, its = timed(model, policy, bmax, chunked)
                if name not in best or seconds < best[name][0]:
                    best[name] = (seconds, its)
        (s_sec, s_its), (r_sec, r_its) = best["staircase"], best["roofline"]
        extra = min(theory_seconds(roofline, policy, bmax, chunked) for _ in range(reps)) - \
            min(theory_seconds(None, policy, bmax, chunked) for _ in range(reps))
        totals[0] += s_sec
        totals[1] += r_sec
        totals[2] += extra
        print(f"{label(policy, bmax, chunked):<26} {s_sec:>8.3f} {s_its:>7,} {r_sec:>8.3f} "
              f"{r_its:>7,} {r_sec / s_sec:>9.2f}x {(r_sec / r_its) / (s_sec / s_its):>11.2f}x "
              f"{extra:>8.3f} {(r_sec - extra) / s_sec:>11.2f}x", flush=True)
    print(f"{'all six rows':<26} {totals[0]:>8.3f} {'':>7} {totals[1]:>8.3f} {'':>7} "
          f"{totals[1] / totals[0]:>9.2f}x {'':>12} {totals[2]:>8.3f} "
          f"{(totals[1] - totals[2]) / totals[0]:>11.2f}x")


if __name__ == "__main__":
    main()
