"""How many GPUs for 39 requests per second, and what the router is worth.

docs/model.md §7.10's E8.6: the engine, traffic and SLO of E8.5 (scenarios/goodput.py),
K engines behind a router, 39 req/s in all.  No router keeps up with fewer than
K_lb = floor(39 / 13.87) + 1 = 3 engines (Theorem 2 and Proposition 3), so
``plan_engines`` starts there, then doubles and bisects on K with 3
replications of 3600 measured requests a round, adding rounds up to 20 while a
probe is undecided; a probe still undecided is a *boundary* and counts as not
passing, so the K reported has always passed.

What it shows: three engines at 94 % load each meet the SLO when the router
joins the engine with the fewest unprocessed tokens (JSQ pools the engines'
spare capacity); random routing leaves one engine idle while another queues,
and needs a fourth engine, at $2.21 per A100-hour a third more per token.

Run:  python scenarios/engines.py   (table on the terminal, plots/engines.png)
"""

from __future__ import annotations

import os

from llmqueue.cli.report import report
from llmqueue.cli.script import script
from llmqueue.experiments import engines
from llmqueue.plotting import plot_capacity, save

SEED = 0
PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots", "engines.png")


def main() -> None:
    """Search both routers, print the table and the checks, draw the figure."""
    params = engines.EXPERIMENT.resolve({})
    print(f"E8.6: {params['rate']:g} req/s, {params['requests']} measured requests x "
          f"{params['reps']} replications a round (up to {params['max_reps']}), seed {SEED}\n")
    results = engines.searches(params, SEED, progress=None)
    rows = engines.rows_of(results)
    print(report(engines.EXPERIMENT, rows, params))
    print("\nthe search, probe by probe (K engines: attainment +- half-width, replications)")
    for router, result in results.items():
        steps = [f"K={p.engines} {p.decision}" + ("" if p.mean is None else
                 f" {p.mean:.3f}+-{p.hw or 0:.3f} ({p.reps})") for p in result.probes]
        print(f"  {router:<11} " + "; ".join(steps))
    title = (f"Fewest engines for {params['rate']:g} req/s by router: sarathi, "
             f"bmax = {params['bmax']}, E8.5's SLO; {params['reps']} x {params['requests']} "
             f"requests a round (up to {params['max_reps']}), seed {SEED}")
    save(plot_capacity(list(results.values()), title), PLOT)
    print(f"\nplot: {os.path.normpath(PLOT)}")


if __name__ == "__main__":
    script(main)
