"""How many requests per second one GPU serves within an SLO, by scheduler.

docs/model.md §7.10's E8.5 on the paper's GPU (the CodeLlama-34B staircase on one
A100-80GB, bmax = 512, no kmax): Poisson traffic with geometric prompts (mean
129 tokens) and outputs (mean 112), and an SLO of TTFT <= 1 s and TPOT <=
0.15 s for at least 90 % of requests.  Theorem 2 caps every scheduler at
lambda_tok = 512 / t(512) / 241 = 13.87 req/s; the SLO costs each of them
part of it, and the scheduler decides how much.  ``plan`` bisects on the rate
with 5 replications of 3000 measured requests a round (up to 20) and common
random numbers; the goodput is the largest rate shown to pass.

What it shows: Sarathi keeps the most of the bound (its chunked prefill rides
with the decodes, so neither TTFT nor TPOT gives way first), Orca a little
less, vLLM (prefill first: decodes stall behind every new prompt) much less,
and FasterTransformer (a new request waits for the whole running batch to
finish) almost nothing.  Cost per million output tokens at $2.21 per
A100-hour follows from the goodput.

Run:  python scenarios/goodput.py   (table on the terminal, plots/goodput.png)
"""

from __future__ import annotations

import os

from llmqueue.cli.report import report
from llmqueue.cli.script import script
from llmqueue.experiments import goodput
from llmqueue.plotting import plot_capacity, save

SEED = 0
PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots", "goodput.png")


def cost_lines(results: dict, params: dict) -> list:
    """The cost arithmetic, scheduler by scheduler: output tokens an hour at the
    goodput, and what a million of them cost at the GPU's hourly price."""
    lines = [f"cost at ${params['price']:.2f} per GPU-hour, output tokens at the goodput:"]
    for name, result in results.items():
        tokens_per_hour = result.goodput * params["vd"] * 3600
        dollars = params["price"] / tokens_per_hour * 1e6 if tokens_per_hour else float("inf")
        lines.append(f"  {name:<18} {result.goodput:7.3f} req/s x {params['vd']:g} tokens x "
                     f"3600 s = {tokens_per_hour / 1e6:6.3f} M tokens/h -> ${dollars:,.3f} per M")
    return lines


def main() -> None:
    """Plan the four schedulers, print the table, the checks and the cost
    arithmetic, draw the figure."""
    params = goodput.EXPERIMENT.resolve({})
    results = goodput.plans(params, SEED, progress=None)
    print(f"E8.5 with {params['requests']} measured requests x {params['reps']} replications "
          f"a round (up to {params['max_reps']}), seed {SEED}\n")
    print(report(goodput.EXPERIMENT, goodput.rows_of(results), params))
    print("\n" + "\n".join(cost_lines(results, params)))
    save(plot_capacity(list(results.values()), figure_title(params)), PLOT)
    print(f"\nplot: {os.path.normpath(PLOT)}")


def figure_title(params: dict) -> str:
    """The plot's title: the engine, the traffic, the SLO and the effort."""
    return (
        f"Goodput by scheduler: staircase, bmax = {params['bmax']}, geometric "
        f"{params['vp']:g}/{params['vd']:g}, TTFT <= {params['ttft']:g} s and TPOT <= "
        f"{params['tpot']:g} s for {params['target']:.0%}; {params['reps']} x "
        f"{params['requests']} requests a round, seed {SEED}")


if __name__ == "__main__":
    script(main)
