"""Shared system prompts multiply an engine's capacity, as Theorem 2 with
hits says.

Requests come from 8 prefix groups of Zipf popularity: each prompt is its
group's 1024 shared tokens (a system prompt) followed by about 128 tokens of
its own, and each answer is about 128 tokens.  On the CodeLlama-34B
staircase with sarathi at bmax = 512 (3342.9 tokens/s) the engine serves

    lambda* = 3342.9 / (1152 + 128)          =  2.61 req/s without prefix caching,
    lambda*_c = 3342.9 / (1152 - 1024 + 128) = 13.06 req/s once every group's
                                                prefix is cached: 5 times more.

Runs of 4,000 Poisson arrivals, 3 seeds, with a KV cache of 2,000,000 tokens
in blocks of 16 (it never binds); each run ends at its last arrival and is
judged by the slope of pending requests over its second half:

* at 0.9 lambda*_c with the cache the queue holds (89% of prompt tokens hit);
* at 1.1 lambda*_c it grows by about 1.2 requests a second: the engine
  serves about 13.07 req/s, its capacity with hits;
* at the same 0.9 lambda*_c without the cache it grows by about 9 requests
  (11,600 tokens) a second: it serves 2.6 req/s.

About 15 seconds of CPU.

Run:  python scenarios/prefix_capacity.py   (table, checks, plots/prefix_capacity.png)
"""

from __future__ import annotations

import os

from llmqueue.cli.report import report
from llmqueue.cli.script import script
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import prefix_capacity as prefix
from llmqueue.plotting import plot_prefix_capacity, save

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots",
                    "prefix_capacity.png")
SEEDS = 3           # runs per load, from seed 0
REQUESTS = 4_000    # Poisson arrivals per run; a run ends at its last arrival


def main() -> None:
    """Run the three loads on every seed, print the table and checks, draw the figure."""
    params = prefix.EXPERIMENT.resolve({"seeds": str(SEEDS), "count": str(REQUESTS)})
    print(f"Shared system prompts: {prefix.GROUPS} groups of {prefix.SHARED} tokens, "
          f"{SEEDS} seeds x {REQUESTS:,} requests per load\n")
    rows = prefix.run(params, RunOptions(seed=0))
    print(report(prefix.EXPERIMENT, rows, params))
    save(plot_prefix_capacity(rows, "Prefix caching multiplies capacity: 8 shared system "
                              "prompts of 1024 tokens, sarathi at bmax 512 on the "
                              "CodeLlama-34B staircase"), PLOT)
    print(f"\nplot: {os.path.normpath(PLOT)}")

if __name__ == "__main__":
    script(main)
