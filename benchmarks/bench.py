"""Speed benchmark: the fast engine against the plain reference stepper.

Run by hand (not part of the test suite):  python benchmarks/bench.py [--quick]

For each case it prints simulated iterations per second, requests per second
and peak traced memory of the fast engine (no logs kept), then the speed-up
over the reference engine measured in this same process on the same
configuration cut to a horizon the reference can finish in seconds.
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

import numpy as np

import llmqueue as q
from llmqueue.engine.reference import run_reference
from llmqueue.models.latency import Staircase
from llmqueue.policies.builtin import make_policy

POINT_C = q.renewal(0.4675, 290, 990)
ITERATION = Staircase().tokens_time(128)  # 46.75 ms at point C


@dataclass
class Case:
    """One benchmark configuration."""

    name: str
    workload: Callable[[], q.Workload]
    policy: str
    horizon: Optional[float]
    reference_horizon: float
    bmax: Optional[int] = 128
    kmax: Optional[int] = 100
    chunked: bool = True


def azure_like(count: int, seed: int = 1) -> q.Workload:
    """Poisson arrivals at 0.95 of sarathi-512's capacity; prompts and outputs
    mixed like the Azure 2023 traces: 30% code (lognormal prompts, mean 2048
    tokens, outputs mean 28) and 70% conversation (mean 1155 and 211),
    coefficients of variation about 1."""
    rng = np.random.default_rng(seed)
    code = rng.random(count) < 0.3
    prompt_mean = np.where(code, 2048, 1155)
    output_mean = np.where(code, 28, 211)
    sigma = np.sqrt(np.log(2.0))  # cv = 1
    prefill = np.maximum(1, rng.lognormal(np.log(prompt_mean) - sigma**2 / 2, sigma)).astype(int)
    decode = np.maximum(1, rng.lognormal(np.log(output_mean) - sigma**2 / 2, sigma)).astype(int)
    mean_tokens = 0.3 * (2048 + 28) + 0.7 * (1155 + 211)
    rate = 0.95 * (512 / Staircase().tokens_time(512)) / mean_tokens
    times = np.cumsum(rng.exponential(1 / rate, count))
    return q.from_list(zip(times.tolist(), prefill.tolist(), decode.tolist()))


def alternate(runs: Sequence[Callable[[], object]], rounds: int = 5) -> List[float]:
    """Best wall time of each of ``runs``, called in turn ``rounds`` times
    (a slow spell of a shared machine then hits them alike, and the best of
    each is its quiet-machine time)."""
    best = [float("inf")] * len(runs)
    for _ in range(rounds):
        for i, run in enumerate(runs):
            gc.collect()
            start = time.perf_counter()
            run()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def cases(quick: bool) -> list:
    """The issue's cases (shorter with ``quick``)."""
    scale = 0.1 if quick else 1.0
    rows = [Case(f"point C {p}-{b}{'' if ch else ' whole'}", lambda: POINT_C, p, 500.0, 500.0,
                 bmax=b, chunked=ch)
            for p, b, ch in [("sarathi", 128, True), ("orca", 128, True), ("vllm", 128, True),
                             ("fastertransformer", 128, True),
                             ("fastertransformer", 1024, True),
                             ("fastertransformer", 10**6, False)]]
    rows.append(Case("sarathi point C 10^6 iterations", lambda: POINT_C, "sarathi",
                     10**6 * ITERATION * scale, 2000.0))
    rows.append(Case("fastertransformer point C 10^5 s", lambda: POINT_C, "fastertransformer",
                     1e5 * scale, 2000.0))
    count = int(10**5 * scale)
    rows.append(Case(f"azure-like 0.95 load {count} requests", lambda: azure_like(count),
                     "sarathi", None, 2000.0, bmax=512, kmax=256))
    return rows


def timed(case: Case, horizon: Optional[float], skip_ahead: bool = True):
    gc.collect()
    start = time.perf_counter()
    result = q.simulate(case.workload(), case.policy, bmax=case.bmax, kmax=case.kmax,
                        chunked=case.chunked, horizon=horizon, skip_ahead=skip_ahead)
    return result.summary, time.perf_counter() - start


def peak_memory(case: Case) -> float:
    tracemalloc.start()
    q.simulate(case.workload(), case.policy, bmax=case.bmax, kmax=case.kmax,
               chunked=case.chunked, horizon=case.horizon)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def reference_rate(case: Case) -> float:
    workload = case.workload()
    start = time.perf_counter()
    batches, _ = run_reference(workload, make_policy(case.policy, case.chunked), bmax=case.bmax,
                               kmax=case.kmax, horizon=case.reference_horizon)
    return len(batches) / (time.perf_counter() - start)


def main() -> None:
    """Run every case and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the long cases")
    quick = parser.parse_args().quick
    print(f"{'case':<40} {'iterations':>11} {'seconds':>8} {'it/s':>11} {'req/s':>9} "
          f"{'peak MB':>8} {'ref it/s':>9} {'same-horizon':>12} {'no-skip':>8}")
    for case in cases(quick):
        summary, seconds = timed(case, case.horizon)
        its = summary["batches"] / seconds
        ref = reference_rate(case)
        short, short_s = timed(case, case.reference_horizon)
        _, plain_s = timed(case, case.reference_horizon, skip_ahead=False)
        same = (short["batches"] / short_s) / ref
        no_skip = (short["batches"] / plain_s) / ref
        print(f"{case.name:<40} {summary['batches']:>11,} {seconds:>8.2f} {its:>11,.0f} "
              f"{summary['arrivals'] / seconds:>9,.0f} {peak_memory(case):>8.1f} {ref:>9,.0f} "
              f"{same:>11.1f}x {no_skip:>7.1f}x", flush=True)


if __name__ == "__main__":
    main()
