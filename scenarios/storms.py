"""Preemption storms and metastability: greedy admission against WAIT (docs/model.md §6.8.3).

One request type of 20 prompt and 200 output tokens, a KV cache of 100,000
tokens, whole prompts, an iteration of 0.02 s + 2e-5 s per token.  Each
request holds g = 24,120 token-iterations of KV, so memory finishes at most
M/g = 4.146 requests per iteration: mu_mem = 108.41 req/s.  WAIT(4) starts 4
whole prompts per iteration of 0.0376 s and so serves lambda_WAIT =
106.38 req/s with 96,480 tokens of KV, never more.

Greedy admission (``sarathi`` with lazy admission, what vLLM v1 does) starts
every prompt that fits now.  Its residents then all grow by one token per
iteration, the cache overflows and the youngest are preempted and recomputed:
a preemption storm.  Recompute is prefill work, so iterations lengthen, more
requests queue and start together, and the storm feeds itself: greedy is
stuck near 88 req/s, 15 % below WAIT.

Metastability: at 95 req/s, below both capacities, an empty start stays at
greedy's fluid point (3.265 starts per iteration, 78.7 % of the cache) for
ever; a start with 3,000 requests waiting stays in the storm and the queue
grows by about 7 req/s.  WAIT drains the same backlog at 106.4 - 95 req/s.
At 104 req/s greedy starts calm and a storm sets in after tens of seconds;
at 110 req/s both are unstable.  A watermark of 1 % or 5 % of the cache on
new starts does not stop the storms: they come from the residents' growth,
which WAIT's quota bounds and a static headroom does not.

Run:  python scenarios/storms.py   (table, checks and notes on the terminal,
      plots/storms.png: the metastable start, plots/storms.gif: a storm forming
      at 104 req/s; about two minutes)
"""

from __future__ import annotations

import os
from typing import Dict

from llmqueue.cli.report import report
from llmqueue.cli.script import script
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import storms
from llmqueue.experiments.base import Rows
from llmqueue.experiments.greedy_memory import M, QUOTA, theory
from llmqueue.plotting import animate_storm, plot_storm, save

HERE = os.path.dirname(os.path.abspath(__file__))
PNG = os.path.join(HERE, "..", "plots", "storms.png")
GIF = os.path.join(HERE, "..", "plots", "storms.gif")
SEED = 1
HORIZON = storms.HORIZON          # 300 s per run
FIGURE = "95-full"                # the metastable start, drawn in storms.png
ANIMATED = "104"                  # a storm forming, animated in storms.gif
WIDTH = 10.0                      # s: bins of the completion and preemption panels


def draw(rows: Dict[str, Rows]) -> None:
    """plots/storms.png from the metastable rows, plots/storms.gif from the 104 req/s rows."""
    th = theory()
    full = rows[FIGURE]
    rate, initial = full[0][1].summary["rate"], full[0][1].summary["initial"]
    save(plot_storm(
        full, f"Metastability: {rate:g} req/s, below both capacities, with "
              f"{initial:,} requests waiting at t = 0\ngreedy admission (sarathi + lazy) stays in "
              f"a preemption storm and its queue grows; WAIT({QUOTA}) drains it",
        rate_lines=[(th["mu_mem"], f"mu_mem = {th['mu_mem']:.1f} req/s (memory capacity)"),
                    (th["lambda_wait"], f"lambda_WAIT = {th['lambda_wait']:.1f} req/s"),
                    (rate, f"arrivals lambda = {rate:g} req/s")],
        kv_lines=[(M, f"cache M = {M:,} tokens"),
                  (th["wait_kv"], f"WAIT's fixed point {QUOTA} g = {th['wait_kv']:,}")],
        width=WIDTH), PNG)
    storm = rows[ANIMATED]
    rate = storm[0][1].summary["rate"]
    save(animate_storm(storm, f"A preemption storm forming: {rate:g} req/s from an empty start",
                       M, note=f"lambda = {rate:g} req/s is below both capacities:\n"
                               f"mu_mem = {th['mu_mem']:.1f}, lambda_WAIT = "
                               f"{th['lambda_wait']:.1f} req/s"), GIF)


def main() -> None:
    """Run every case (the two drawn ones with their logs), report, draw."""
    params = storms.EXPERIMENT.resolve({})
    print(f"docs/model.md §6.8.3, {HORIZON:g} s per run, figures over the second half\n")
    drawn = {FIGURE, ANIMATED}
    logs = RunOptions(horizon=HORIZON, seed=SEED, batches=True, timeseries=True, requests=True)
    by_case: Dict[str, Rows] = {}
    for case in storms.CASES:  # one case at a time: logs kept only where drawn
        options = logs if case in drawn else RunOptions(horizon=HORIZON, seed=SEED)
        by_case[case] = storms.run({**params, "cases": case}, options)
    rows = [row for case in storms.CASES for row in by_case[case]]
    print(report(storms.EXPERIMENT, rows, params))
    draw(by_case)
    print(f"\nplots: {os.path.normpath(PNG)}, {os.path.normpath(GIF)}")


if __name__ == "__main__":
    script(main)
