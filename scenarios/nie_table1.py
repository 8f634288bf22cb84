"""Nie et al.'s Table 1: how many requests per second a KV cache can serve.

A request of vp prompt and vd output tokens holds vp tokens of KV after its
prefill and one more after each decode, so over its life it occupies the cache
for g = (vd + 1) vp + vd (vd + 1) / 2 token-iterations (its memory area).  A
cache of M tokens holds at most M token-iterations per iteration, so at most
M / E[g] requests finish per iteration: with iterations of b̄ seconds the
memory capacity is mu = M / (b̄ E[g]) requests/s, whatever the scheduler.

Three workloads, M = 131,000 tokens, prompts and outputs uniform (1:1 both
U{10..1600}; 2:1 prompts twice as long as outputs; 1:2 the reverse;
docs/model.md §6.8.1 names only the first law, the other two are derived from
its E[g]):

* the calculator (Nie's chunked area at 512 tokens, continuous moments) gives
  the paper's 3.2636 / 3.9568 / 2.9020 req/s;
* a saturated sarathi with whole prompts and every iteration lasting b̄ serves
  within 3% of the whole-prompt mu = 3.2645 / 3.9612 / 2.9019 req/s, with the
  cache more than 99% full; about one iteration in ten preempts a request, and
  a fifth to a third of the processed tokens are recomputed, which costs
  nothing here because an iteration's time does not depend on its size.

Run:  python scenarios/nie_table1.py   (table and checks, plots/nie_table1.png)
"""

from __future__ import annotations

import os

from llmqueue.cli.report import report
from llmqueue.cli.script import script
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import nie_table1
from llmqueue.plotting import plot_table1, save

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots",
                    "nie_table1.png")
HORIZON = 3000.0   # seconds per run; the second half is measured
SEEDS = 3          # runs per workload, figures averaged


def main() -> None:
    """Run the three workloads, print the table and checks, draw the figure."""
    params = nie_table1.EXPERIMENT.resolve({"seeds": str(SEEDS)})
    print(f"Nie et al. Table 1: M = {params['kv']:,} KV tokens, saturated sarathi, whole "
          f"prompts, {SEEDS} seeds x {HORIZON:.0f} s (second half measured)\n")
    rows = nie_table1.run(params, RunOptions(horizon=HORIZON, seed=0))
    print(report(nie_table1.EXPERIMENT, rows, params))
    save(plot_table1(rows, f"Nie et al. Table 1: memory capacity M / (b̄ E[g]), "
                     f"M = {params['kv']:,} tokens, against a saturated sarathi "
                     f"({SEEDS} seeds x {HORIZON:.0f} s)", tolerance=nie_table1.TOLERANCE), PLOT)
    print(f"\nplot: {os.path.normpath(PLOT)}")


if __name__ == "__main__":
    script(main)
