"""Prefix caching on the Mooncake traces: what an unlimited cache could save,
and what a cache of 3,000,000 tokens keeps of it.

Mooncake's FAST'25 release lists, for each request, the content ids of its
prompt's 512-token blocks; equal ids at equal positions mean equal tokens up
to the end of that block.  Counting the leading blocks each request shares
with requests that arrived strictly before it gives the ideal hit ratio, with
no simulation: 37.33% of the prompt tokens of the conversation trace (12,031
requests in an hour, about ten at each 3-second instant) and 65.04% of the
synthetic one (3,993 requests).

Each file is then replayed, timestamps as given, on an engine that never
waits (every iteration 1 µs, a budget of 10^6 tokens, no slot limit) with
prefix caching in blocks of 16 tokens:

* with an unlimited cache (10^12 tokens) every request finishes long before
  the next instant, so the replay finds exactly the ideal share cached;
* with M = 3,000,000 tokens the least recently used blocks are evicted: the
  hit ratio falls to about 0.146 and 0.321, 39% and 49% of the ideal.

The traces live beside the repository in ../shared/traces/mooncake (a fresh
clone has none: the script then stops with one line naming the missing
file).  About half a minute of CPU.

Run:  python scenarios/prefix_mooncake.py   (table, checks, plots/prefix_mooncake.png)
"""

from __future__ import annotations

import os

from llmqueue.cli.report import report
from llmqueue.cli.script import script
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import prefix_mooncake as mooncake
from llmqueue.plotting import plot_prefix_mooncake, save

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots",
                    "prefix_mooncake.png")
CACHE = 3_000_000   # M, the limited cache (KV tokens)


def main() -> None:
    """Count the ideal, replay each file twice, print the table and checks, draw the figure."""
    params = mooncake.EXPERIMENT.resolve({"kv": str(CACHE)})
    print(f"Mooncake traces: hash blocks of 512 tokens, KV blocks of {mooncake.KV_BLOCK}; "
          f"an unlimited cache ({mooncake.UNLIMITED_CACHE:.0e} tokens) and M = {CACHE:,}\n")
    rows = mooncake.run(params, RunOptions())
    print(report(mooncake.EXPERIMENT, rows, params))
    save(plot_prefix_mooncake(rows, "Prefix caching on the Mooncake traces: the ideal hit "
                              "ratio and replays on an engine that never waits"), PLOT)
    print(f"\nplot: {os.path.normpath(PLOT)}")

if __name__ == "__main__":
    script(main)
