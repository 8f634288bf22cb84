"""Speed benchmark of validation, calibration and MLPerf (issues #32, #35).

Run by hand (not part of the test suite):  python benchmarks/validation.py [--quick]

Prints the wall time of:

* one offline row simulated plainly and through the iteration log that
  calibration keeps (their ratio: the log must cost little);
* pricing that row's whole run at a new efficiency from the kept iterations
  (``run_seconds``, O(log n)) against simulating it again (the ratio is what
  makes a least-squares fit over whole runs affordable);
* ``validate`` on the 21 shipped rows (issue #32 asks for under 2 minutes on
  one core) and ``calibrate`` with its cross-validation;
* one MLPerf Server answer on an H200 (issue #35 asks for under 60 s).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any, Callable, Tuple

from llmqueue.engine.options import RunOptions
from llmqueue.experiments import calibration, mlperf, offline
from llmqueue.experiments.measurements import SHIPPED, predict, read_measurements, settings
from llmqueue.hardware.efficiency import Efficiency


def timed(fn: Callable[[], Any], repeat: int = 1) -> Tuple[float, Any]:
    """Best wall time of ``repeat`` calls of ``fn`` and its last result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    """Print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip validate, calibrate, mlperf")
    args = parser.parse_args()
    rows = read_measurements(SHIPPED)
    row = rows[8]  # llama-3.3-70b 128/2048 on 2 H100: 28,672 iterations
    from llmqueue import experiments
    p = experiments.REGISTRY["offline"].resolve(settings(row, {}))
    plain, _ = timed(lambda: offline.batch(p, RunOptions()), 3)
    logged, run = timed(lambda: calibration.record(row), 3)
    print(f"one offline row ({row.model} {row.isl}/{row.osl}): plain {plain:.3f} s, with the "
          f"iteration log {logged:.3f} s ({logged / plain:.2f}x)")
    other = dataclasses.replace(Efficiency(), mfu=0.5, mbu=0.7)
    priced, _ = timed(lambda: calibration.predicted(run, other), 20)
    print(f"a new efficiency: priced from the kept iterations {priced * 1e3:.2f} ms against a "
          f"new simulation {plain:.3f} s ({plain / priced:,.0f}x faster)")
    if args.quick:
        return
    seconds, _ = timed(lambda: [predict(m) for m in rows])
    print(f"validate, 21 shipped rows: {seconds:.1f} s (issue #32: under 120 s)")
    seconds, _ = timed(lambda: calibration.calibrate(rows))
    print(f"calibrate with leave-one-row-out cross-validation: {seconds:.1f} s")
    s = mlperf.system({"gpu": "H200-SXM-141GB", "tp": "1", "kmax": "896", "bmax": "4096"})

    def server() -> Any:
        run_ = mlperf.offline(s)
        return mlperf.capacity(s, "server", run_, progress=False)
    seconds, _ = timed(server)
    print(f"mlperf server on 8 x H200 (Offline run and the rate search): {seconds:.1f} s "
          f"(issue #35: under 60 s)")


if __name__ == "__main__":
    main()
