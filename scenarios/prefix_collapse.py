"""Does a backlog collapse a prefix cache?  Two starts of the same arrivals.

The fear: a prefix cache that residents crowd might be bistable.  Started
calm, it keeps the shared prefixes and runs at a high hit ratio; started with
a backlog, the residents' own blocks would push the prefixes out, every
prompt would cost its whole prefill, and the backlog would never drain, as
greedy admission's preemption storms never drain theirs.  Here the same
arrivals run from (a) an empty engine and (b) 400 requests waiting at t = 0,
for 30 minutes each, on sarathi at bmax = 512 (CodeLlama-34B staircase, KV
blocks and hash blocks of 16 tokens):

* 8 system prompts of 1024 tokens (Zipf popularity), suffixes and answers of
  about 128 tokens, at 0.95 of the capacity with hits (12.4 of 13.06 req/s),
  with a KV cache of 75,000 tokens, barely more than the residents hold;
* 1,000 shared prefixes of 256 tokens (Zipf), suffixes of about 32 tokens,
  answers of about 128, at 11 req/s with a cache of 60,000 tokens: here
  prefixes are evicted under load (about 53% of prompt tokens hit, against
  85% for an unlimited cache).

What the runs show: one state in both.  The backlog drains and both starts
end at the same hit ratio and the same queue: under sarathi a waiting request
holds no KV, so a backlog does not crowd the cache more than calm traffic
at the same load.

The figure: the hit ratio per 30 s window (each request counted at its first
start, with its cached tokens over its prompt) and pending requests, both
starts, per configuration.  About 20 seconds.

Run:  python scenarios/prefix_collapse.py   (table, checks, plots/prefix_collapse.png)
"""

from __future__ import annotations

import os

from llmqueue.cli.report import report
from llmqueue.cli.script import script
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import prefix_collapse as collapse
from llmqueue.plotting import plot_collapse, save
from llmqueue.plotting.collapse import Panel, Start

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots",
                    "prefix_collapse.png")
SEED = 0
HORIZON = collapse.HORIZON      # 1,800 s per run
WINDOW = collapse.WINDOW        # 30 s windows of the hit ratio


def main() -> None:
    """Run both configurations from both starts, print the table and checks, draw."""
    params = collapse.EXPERIMENT.resolve({})
    print(f"Cache collapse: each configuration from an empty start and with "
          f"{params['initial']} requests waiting, {HORIZON:g} s per run\n")
    rows = collapse.run(params, RunOptions(horizon=HORIZON, seed=SEED, batches=True,
                                           requests=True, timeseries=True))
    print(report(collapse.EXPERIMENT, rows, params))
    panels = []
    for config in collapse.CONFIGS.values():
        starts = []
        for _, result in rows:
            s = result.summary
            if s["config"] == config.name:
                t, pending, _ = result.timeseries()
                name = "empty start" if s["start"] == "empty" else \
                    f"{s['initial']} waiting at t = 0"
                starts.append(Start(name, *collapse.hit_windows(result, WINDOW), t, pending))
        ideal = config.shared // collapse.KV_BLOCK * collapse.KV_BLOCK / \
            (config.shared + config.suffix.mean)
        panels.append(Panel(f"{config.groups:,} prefixes of {config.shared} tokens, "
                            f"{config.rate:.1f} req/s, M = {config.M:,}", starts, ideal))
    one = all(check.passed for check in collapse.checks(rows))
    save(plot_collapse(panels, "A prefix cache started empty and with a backlog: "
                       + ("both starts end in one state" if one else "see the table"),
                       WINDOW), PLOT)
    print(f"\nplot: {os.path.normpath(PLOT)}")


if __name__ == "__main__":
    script(main)
