"""Theorem 10's stability region, and the schedulers that do or do not fill it.

With at most kmax = 100 requests per batch, the (prefill, decode) token rates
an engine can sustain form a convex polygon: the hull of the origin and the
rates (p / t(p + d), d / t(p + d)) of every feasible batch shape.  A bigger
budget (bmax = 1024 against 128) adds prefill capacity but no decode capacity:
the decode axis is capped by kmax.

On a 7 x 6 grid of rates (renewal arrivals, 3000 s each) the sweep machinery
runs Sarathi at both budgets and step-fill at 1024, and each run's measured
drift verdict is drawn over the polygons.  Sarathi-1024 fails inside its own
region where decodes dominate (filling every batch lengthens the iterations
the 99 decoders wait on); step-fill holds there and wherever Sarathi-1024
holds.

Run:  python scenarios/kmax_region.py   (about a minute; writes plots/kmax_region.png)
"""

from __future__ import annotations

import os
from collections import Counter

from llmqueue.cli.script import script
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import kmax_region

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots",
                    "kmax_region.png")


def main() -> None:
    """Sweep the grid for each panel and draw the figure."""
    params = kmax_region.REGION.resolve({"figure": PLOT})
    rows = kmax_region.run_region(params, RunOptions(horizon=kmax_region.HORIZON))
    tally = Counter((r.summary["scheduler"], r.summary["bmax"], r.summary["verdict"])
                    for _, r in rows)
    for scheduler, bmax in kmax_region.PANELS:
        counts = {v: tally[(scheduler, bmax, v)] for v in ("stable", "unstable", "inconclusive")}
        print(f"{scheduler}-{bmax}: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
    print(f"\nplot: {os.path.normpath(PLOT)}")


if __name__ == "__main__":
    script(main)
