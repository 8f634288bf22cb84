"""Speed on varied workloads (issue #16): where no two iterations look alike.

Run by hand (not part of the test suite):  python -m benchmarks.varied [--quick]

For each case it prints llmqueue's iterations per second, requests per
second and peak traced memory over the whole run, then the speed-up over the
project's reference engine (:mod:`llmqueue.engine.reference`, the plain
stepper the equivalence tests use; with a KV cache SPEC 7's
:mod:`~llmqueue.engine.reference_kv`) measured in this same process on the
first ``reference_requests`` requests.  For the Sarathi-on-staircase cases
it also runs :mod:`benchmarks.plain` (an independent plain stepper, what an
outside reader writes) and :mod:`benchmarks.skeleton` (the design card in
bare SimPy: a timeout per iteration, a process per request) on the same
requests, and checks that all agree on the iterations and the end time;
``floor/plain`` is the time of the card's per-request events alone
(:func:`benchmarks.skeleton.events_only`: no scheduler, no iteration) as a
share of the plain stepper's (a run at ``s`` times the plain stepper's speed
has ``1 / s`` of its time: at most ``1 / s - floor/plain`` of it is left for
forming, running and recording the iterations).

The cases: the issue's workload (Poisson at 0.85 of sarathi-512's capacity,
lognormal prompts of median 600, sigma 0.9, and outputs of median 150, sigma
0.8, replayed from a CSV as ``run trace`` does), the Azure 2023 conversation
trace (when ``../shared/traces`` is there), the ``blowup`` demo's workload,
that lognormal workload with a KV cache that preempts, and with the H100
roofline (Llama-3-8B) pricing every iteration at its real context; and point
C (identical iterations, where skip-ahead pays) to check nothing regressed.
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
import tracemalloc
from dataclasses import dataclass, field
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

import numpy as np

import llmqueue as q
from benchmarks import plain, skeleton
from benchmarks.bench import POINT_C
from llmqueue.engine.reference import run_reference
from llmqueue.experiments.azure import DEFAULT_TRACE
from llmqueue.experiments.blowup import geometric_workload
from llmqueue.models.latency import Staircase
from llmqueue.models.traces import read_trace
from llmqueue.policies.builtin import make_policy
from llmqueue.theory.capacity import lambda_star

Rows = List[Tuple[float, int, int]]


def lognormal_rows(count: int, seed: int = 7) -> Rows:
    """The issue's workload: Poisson at 0.85 of sarathi-512's token capacity,
    lognormal prompts (median 600, sigma 0.9) and outputs (median 150, sigma 0.8)."""
    rng = np.random.default_rng(seed)
    prefill = np.maximum(1, np.rint(rng.lognormal(np.log(600), 0.9, count))).astype(int)
    decode = np.maximum(1, np.rint(rng.lognormal(np.log(150), 0.8, count))).astype(int)
    mean = 600 * np.exp(0.9**2 / 2) + 150 * np.exp(0.8**2 / 2)
    rate = 0.85 * 512 / Staircase().tokens_time(512) / mean
    times = np.cumsum(rng.exponential(1 / rate, count))
    return [(round(float(a), 6), int(p), int(d)) for a, p, d in zip(times, prefill, decode)]


def triples(workload: Iterable[Sequence]) -> Rows:
    """``(arrival, prefill, decode)`` of each request of ``workload``."""
    return [(float(r[0]), int(r[1]), int(r[2])) for r in workload]


def via_csv(rows: Rows) -> q.Workload:
    """``rows`` written to a CSV and read back as ``llmqueue run trace`` reads it."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "requests.csv")
        with open(path, "w", encoding="utf-8") as out:
            out.write("arrival,prefill,decode\n")
            out.writelines(f"{a},{p},{d}\n" for a, p, d in rows)
        return q.read_csv(path)


@dataclass
class Case:
    """One workload and engine configuration."""

    name: str
    rows: Callable[[], Rows]
    policy: str = "sarathi"
    bmax: Optional[int] = 512
    kmax: Optional[int] = 256
    kv: Optional[q.KV] = None
    latency: Optional[q.LatencyModel] = None
    reference_requests: int = 20_000
    plain: bool = field(default=False)
    """Whether :mod:`benchmarks.plain` models it (Sarathi, staircase, no cache)."""

    def simulate(self, rows: Rows) -> q.Result:
        return q.simulate(q.from_list(rows), self.policy, bmax=self.bmax, kmax=self.kmax,
                          kv=self.kv, latency=self.latency)


def azure_rows() -> Rows:
    """The Azure 2023 conversation trace at the ``azure`` experiment's speed-up."""
    trace = read_trace(DEFAULT_TRACE)
    return triples(trace.workload(speedup=0.25))


def blowup_rows(count: int) -> Rows:
    """The ``blowup`` demo's workload: Poisson at 0.95 of lambda* (bmax 128),
    geometric prompts and outputs of means 129 and 112."""
    rate = 0.95 * lambda_star(128, 129, 112)
    return triples(r for r, _ in zip(geometric_workload(rate, 129, 112, seed=1), range(count)))


def cases(quick: bool) -> List[Case]:
    """The issue's cases (a tenth of the requests with ``quick``)."""
    n = 15_000 if quick else 150_000
    rows = lognormal_rows(n)
    out = [
        Case(f"lognormal 0.85 sarathi-512, {n:,} (CSV)", lambda: triples(via_csv(rows)),
             plain=True),
        Case(f"blowup workload sarathi-128, {n // 3:,}", lambda: blowup_rows(n // 3),
             bmax=128, kmax=100, plain=True),
        Case(f"lognormal + KV 200k tokens / 16, {n // 3:,}", lambda: rows[:n // 3],
             kv=q.KV(capacity_tokens=200_000, block_size=16), reference_requests=3_000),
        Case(f"lognormal on H100 roofline, {n // 3:,}", lambda: rows[:n // 3],
             latency=q.Roofline("H100", "llama-3-8b"), reference_requests=5_000),
    ]
    out.append(Case(f"point C sarathi-128, {n // 5:,} (no regression)",
                    lambda: triples(r for r, _ in zip(POINT_C, range(n // 5))), bmax=128,
                    kmax=100, plain=True))
    if os.path.exists(DEFAULT_TRACE):
        out.insert(1, Case("Azure conversation trace, speed-up 0.25", azure_rows, bmax=128,
                           kmax=100, plain=True))
    return out


def best_of(runs: int, job: Callable[[], object]) -> Tuple[float, object]:
    """Best wall time of ``runs`` calls, and the last result."""
    best, out = float("inf"), None
    for _ in range(runs):
        gc.collect()
        start = time.perf_counter()
        out = job()
        best = min(best, time.perf_counter() - start)
    return best, out


def peak_mb(job: Callable[[], object]) -> float:
    """Peak traced memory of ``job`` in MiB."""
    tracemalloc.start()
    job()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def measure(case: Case, runs: int) -> str:
    """Run ``case`` (and its references) and return its line of the table."""
    rows = case.rows()
    seconds, result = best_of(runs, lambda: case.simulate(rows))
    summary = result.summary  # type: ignore[attr-defined]
    cut = rows[:case.reference_requests]
    fast_s, fast = best_of(runs, lambda: case.simulate(cut))
    ref_s, (batches, _) = best_of(1, lambda: run_reference(  # type: ignore[misc]
        q.from_list(cut), make_policy(case.policy), bmax=case.bmax, kmax=case.kmax,
        latency=case.latency, kv=case.kv))
    assert len(batches) == fast.summary["batches"], "the engines disagree"  # type: ignore
    line = (f"{case.name:<44} {summary['batches']:>10,} {seconds:>7.2f} "
            f"{summary['batches'] / seconds:>9,.0f} {summary['arrivals'] / seconds:>8,.0f} "
            f"{peak_mb(lambda: case.simulate(rows)):>6.1f} {ref_s / fast_s:>6.2f}x")
    if case.plain:
        bmax, kmax = case.bmax or 0, case.kmax or 0
        plain_s, got = best_of(runs, lambda: plain.run(rows, bmax, kmax))
        skel_s, skel = best_of(1, lambda: skeleton.run(rows, bmax, kmax))
        floor_s, ended = best_of(runs, lambda: skeleton.events_only(rows, kmax))
        want = (summary["batches"], summary["completed"], round(summary["duration"] * 1e9))
        assert got == want == skel, f"plain {got} skeleton {skel} llmqueue {want}"
        assert ended == len(rows), "the floor ends every request"
        line += (f" {plain_s / seconds:>7.2f}x {skel_s / seconds:>10.2f}x"
                 f" {floor_s / plain_s:>10.2f}")
    return line


def main() -> None:
    """Run every case and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the requests")
    parser.add_argument("--runs", type=int, default=1, help="best of this many runs")
    args = parser.parse_args()
    print(f"{'case':<44} {'iterations':>10} {'s':>7} {'it/s':>9} {'req/s':>8} {'MB':>6} "
          f"{'vs ref':>7} {'vs plain':>8} {'vs skeleton':>11} {'floor/plain':>11}")
    for case in cases(args.quick):
        print(measure(case, args.runs), flush=True)


if __name__ == "__main__":
    main()
