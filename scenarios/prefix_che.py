"""A small prefix cache evicts its least recently used blocks: Che's
approximation predicts what it keeps.

Requests come from 200 prefix groups of Zipf popularity (s = 0.8): each
prompt is its group's 512 shared tokens followed by 64 of its own, and each
answer is 16 tokens, Poisson at 1.694 req/s (0.3 of the engine's capacity
without the cache: the queue stays short, so memory holds mostly cached
blocks).  With a cache of M tokens in blocks of 16, Che's approximation
finds the time T a block survives unused,

    sum_g 32 (1 - exp(-lambda p_g T)) + 4 lambda T = C = floor((M - R) / 16),

and predicts that group g's prefix is found with probability
1 - exp(-lambda p_g T); R, the KV tokens the residents hold of their own, is
measured from each run (about 20 tokens: their answers).

Runs of 20,000 requests at M = 20,000, 50,000, 100,000 and 400,000 tokens,
the hit ratio of each run's second half: within 0.02 of Che's at every M,
both rising towards 512 / 576 = 0.889.  About two minutes of CPU.

Run:  python scenarios/prefix_che.py   (table, checks, plots/prefix_che.png)
"""

from __future__ import annotations

import os

from llmqueue.cli.report import report
from llmqueue.cli.script import script
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import prefix_che as che
from llmqueue.plotting import plot_prefix_che, save

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots", "prefix_che.png")
CACHES = (20_000, 50_000, 100_000, 400_000)   # M, KV tokens
REQUESTS = 20_000                             # per run; the second half is measured


def main() -> None:
    """Run every cache size, print the table and checks, draw the figure."""
    params = che.EXPERIMENT.resolve({"caches": ",".join(map(str, CACHES)),
                                     "count": str(REQUESTS)})
    print(f"LRU prefix cache: {che.GROUPS} groups (Zipf {che.ZIPF:g}), "
          f"{REQUESTS:,} requests at {che.rate():.3f} req/s per cache size\n")
    rows = che.run(params, RunOptions(seed=0))
    print(report(che.EXPERIMENT, rows, params))
    title = (f"An LRU prefix cache against Che's approximation: {che.GROUPS} groups of "
             f"{che.SHARED} shared tokens, Zipf {che.ZIPF:g}, {che.rate():.3f} req/s")
    save(plot_prefix_che(rows, che.curve(rows), title), PLOT)
    print(f"\nplot: {os.path.normpath(PLOT)}")

if __name__ == "__main__":
    script(main)
