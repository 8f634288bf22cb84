"""Coprime output lengths keep greedy admission from preempting (Ao, Dong, Luo
and Simchi-Levi's two-class result).

A cache of 200,000 tokens, every iteration 1 s, prompts of 200 tokens, two
output lengths vd_A and vd_B equally likely, and a saturated engine that
starts every request it can (greedy admission, as vLLM does).  A preempted
request starts again from scratch.  A request lives vd + 1 iterations.

If the two lives share a factor, requests that start together keep finishing
together: cohorts march in step, memory frees in bursts, and every few
iterations the cache overflows at the same phase, two to three preemptions
per iteration for ever.  If the lives are coprime, the cohorts drift against
each other until completions spread evenly, and preemptions stop.

It needs input-dominated requests (the prompt, not the output, fills the
cache): with 6-token prompts in a 2,000-token cache the separation fails, and
(2, 4) still preempts about 8 times per iteration.

docs/model.md's figures are after 20,000 iterations; this runs them all (about an hour
of CPU: each iteration serves hundreds of requests).

Run:  python scenarios/coprime.py   (table, checks, plots/coprime.png)
"""

from __future__ import annotations

import os

from llmqueue.cli.report import report
from llmqueue.cli.script import script
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import coprime
from llmqueue.plotting import plot_coprime, save

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots", "coprime.png")
ITERATIONS = coprime.ITERATIONS   # of 1 s each


def main() -> None:
    """Run every pair at both prompt lengths, print the table and checks, draw the figure."""
    params = coprime.EXPERIMENT.resolve({})
    print(f"Coprime output lengths: vp = {params['vp']}, M = {params['kv']:,} tokens "
          f"(contrast vp = {params['short_vp']}, M = {params['short_kv']:,}), restart=scratch, "
          f"{ITERATIONS:,} iterations of 1 s, the second half measured\n")
    rows = coprime.run(params, RunOptions(horizon=float(ITERATIONS), seed=0))
    print(report(coprime.EXPERIMENT, rows, params))
    save(plot_coprime(rows, f"Greedy admission, two output lengths, restart=scratch: "
                      f"preemptions per iteration over iterations {ITERATIONS // 2:,}-"
                      f"{ITERATIONS:,}", (coprime.ABOUT_ZERO, coprime.PERSISTENT)), PLOT)
    print(f"\nplot: {os.path.normpath(PLOT)}")


if __name__ == "__main__":
    script(main)
