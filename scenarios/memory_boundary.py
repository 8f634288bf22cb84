"""The stability boundary under KV-cache memory (Nie et al.'s Theorems 4.1-4.2).

With M = 131,000 tokens of KV cache, prompts and outputs uniform on
10..1600 tokens and every iteration lasting 0.0372 s, the cache can finish at
most mu = M / (b̄ E[g]) = 3.2645 requests/s (see nie_table1.py).  The theorems
say that this is the stability boundary, up to the largest request's share of
the cache, delta = 3200 / 131,000 = 2.4%:

* below mu (1 - delta) = 3.185 req/s the queue holds: the number of pending
  requests does not drift;
* above mu it grows at lambda - mu_sat requests/s, where mu_sat is what a
  saturated engine serves (a little below mu: preemptions discard KV), and
  the unprocessed tokens grow about E[vp + vd] = 1610 times as fast.

The token budget never binds (memory limits a batch to b* = 196 tokens), so
memory is the binding resource.  The same holds with chunked prefill at
bmax = 512, whose theory uses the chunked memory area.

Poisson arrivals at 0.6 to 1.5 of mu, 8 seeds x 3000 s per load (about 10
minutes of CPU); the pending slope is fitted over the second half of each run.

Run:  python scenarios/memory_boundary.py   (table, checks, plots/memory_boundary.png)
"""

from __future__ import annotations

import os

from llmqueue.cli.report import report
from llmqueue.cli.script import script
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import memory_boundary as boundary
from llmqueue.plotting import plot_memory_boundary, save

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots",
                    "memory_boundary.png")
SHOWN = ("whole 0.90 mu", "whole 1.20 mu")   # loads whose pending is drawn over time


def main() -> None:
    """Run every variant, load and seed, print the table and checks, draw the figure."""
    params = boundary.EXPERIMENT.resolve({"seeds": str(boundary.SEEDS)})
    print(f"Memory boundary: 1:1 workload, M = {params['kv']:,} tokens, {boundary.SEEDS} "
          f"seeds x {boundary.HORIZON:.0f} s per load\n")
    rows = boundary.run(params, RunOptions(horizon=boundary.HORIZON, seed=0))
    print(report(boundary.EXPERIMENT, rows, params))
    save(plot_memory_boundary(rows, SHOWN, "Stability under KV-cache memory: sarathi, "
                              f"U{{10..1600}} prompts and outputs, M = {params['kv']:,} "
                              "tokens, 0.0372 s per iteration"), PLOT)
    print(f"\nplot: {os.path.normpath(PLOT)}")


if __name__ == "__main__":
    script(main)
