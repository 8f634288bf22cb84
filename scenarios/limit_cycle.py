"""The worst-case limit cycle of greedy admission (docs/model.md §6.8.4, Ao-Dong model).

The request type and cache of scenarios/storms.py (20 + 200 tokens,
M = 100,000 KV tokens), but every iteration lasts tau = 1 s whatever it
holds, so a second is an iteration.  The cache can finish at most
M/g = 4.146 requests per iteration (g = 24,120 token-iterations per request).
The engine is saturated: 3,000 requests wait at t = 0 and more arrive faster
than it serves.

With ``restart="scratch"`` a preempted request loses the tokens it had
decoded (the Ao-Dong model).  Greedy admission then locks into a cycle: its
residents grow in step until the cache is full at their peak, preemption
throws away everyone younger, and a cohort of M/(vp + vd) = 454 requests
finishes every vd + 1 = 201 iterations: M/((vd + 1)(vp + vd)) = 2.261 per
iteration, 54.5 % of M/g.  WAIT(4) finishes exactly 4 in every iteration and
never preempts.  With ``restart="keep"`` (vLLM, Vidur) a victim resumes where
it stopped, so greedy stays near M/g: the loss is only recompute work, free
under a constant time (and paid as longer iterations under the linear time
of scenarios/storms.py, the storms).

Run:  python scenarios/limit_cycle.py   (table, checks and the contrast on the
      terminal, plots/limit_cycle.png; about a minute)
"""

from __future__ import annotations

import os

from llmqueue.cli.report import report
from llmqueue.cli.script import script
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import limit_cycle as cycle
from llmqueue.experiments.greedy_memory import M, QUOTA, VD, VP, theory
from llmqueue.plotting import plot_limit_cycle, save
from llmqueue.theory.greedy import limit_cycle_rate

PNG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots", "limit_cycle.png")
SEED = 1
HORIZON = cycle.HORIZON            # iterations (docs/model.md's prototype: 20,000)
WINDOW = VD + 1                    # the moving average spans one cycle
ZOOM = 3 * WINDOW                  # the zoom shows three cycles


def main() -> None:
    """Run the three rows, print the report with its contrast, draw the figure."""
    params = cycle.EXPERIMENT.resolve({})
    print(f"model §6.8.4, {HORIZON:,.0f} iterations of {cycle.TAU:g} s, figures over the second "
          "half\n")
    rows = cycle.run(params, RunOptions(horizon=HORIZON, seed=SEED, batches=True,
                                        requests=True))
    print(report(cycle.EXPERIMENT, rows, params))
    point, rate = theory(cycle.CONSTANT)["fixed_point"], limit_cycle_rate(M, VP, VD)
    start = HORIZON / 2
    save(plot_limit_cycle(
        [(name, *cycle.completions(result)) for name, result in rows],
        f"Greedy admission's worst-case limit cycle: ({VP}, {VD}) tokens, "
        f"M = {M:,}, tau = {cycle.TAU:g} s, saturated\nrestart=scratch locks greedy into "
        f"cohorts of {M // (VP + VD)} every {VD + 1} iterations; restart=keep and "
        f"WAIT({QUOTA}) stay near M/g",
        [(point, f"fixed point M/g = {point:.3f}"),
         (rate, f"limit cycle M/((vd+1)(vp+vd)) = {rate:.3f}"),
         (float(QUOTA), f"WAIT's quota n = {QUOTA}")],
        window=WINDOW, zoom=(start, start + ZOOM), tau=cycle.TAU), PNG)
    print(f"\nplot: {os.path.normpath(PNG)}")


if __name__ == "__main__":
    script(main)
