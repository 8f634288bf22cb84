"""Theorem 2 as a sweep: where does the backlog start to grow?

Poisson arrivals of requests with 100 prompt + 100 output tokens reach one
engine with a budget of 512 tokens and no limit on residents, on the
CodeLlama-34B staircase.  No scheduler serves more than 512 / t_512 = 3343
tokens/s, so the capacity is lambda* = 3343 / 200 = 16.71 requests/s; above
it the backlog grows at the fluid rate lambda * 200 - 3343 tokens/s (docs/model.md §9.2).

The sweep runs loads from 0.6 to 1.4 of lambda*, five seeds each, for the
work-conserving Sarathi and the non-work-conserving vLLM, on a process pool,
and plots the measured backlog slope (mean and 95% band over the seeds)
beside the fluid rate.  Sarathi follows the theory; vLLM, which alternates
prefill-only and decode-only batches, runs out of capacity earlier.

The CSV leaves out the sweep's ``wall_time`` column (the computer's time, not
the experiment's), so that running the script again rewrites the same file.

Run:  python scenarios/capacity_sweep.py   (table on the terminal, CSV and plot in plots/)
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from llmqueue.cli.script import script
from llmqueue.experiments import get
from llmqueue.models.latency import Staircase
from llmqueue.plotting import plot_lines, save
from llmqueue.sweeps.runner import summarize, sweep, write_rows

BMAX = 512
PREFILL = DECODE = 100
CAPACITY = BMAX / Staircase().tokens_time(BMAX)     # tokens/s
LAMBDA_STAR = CAPACITY / (PREFILL + DECODE)         # requests/s
LOADS = [round(0.6 + 0.1 * i, 1) for i in range(9)]
SEEDS = 5
HORIZON = 200.0
HERE = os.path.dirname(os.path.abspath(__file__))
CSV = os.path.join(HERE, "..", "plots", "capacity_sweep.csv")
PLOT = os.path.join(HERE, "..", "plots", "capacity_sweep.png")


def fluid_slope(rate: float) -> float:
    """Theorem 2: backlog growth above capacity, zero below (tokens/s)."""
    return max(0.0, rate * (PREFILL + DECODE) - CAPACITY)


def main() -> None:
    """Run the sweep on a process pool, print the table, write CSV and plot."""
    rates = [round(load * LAMBDA_STAR, 4) for load in LOADS]
    with ProcessPoolExecutor() as pool:
        rows = sweep(get("single"), {"rate": rates}, SEEDS, schedulers=["sarathi", "vllm"],
                     fixed={"arrival": "poisson", "vp": PREFILL, "vd": DECODE,
                            "bmax": BMAX, "kmax": None},
                     horizon=HORIZON, executor=pool)
    os.makedirs(os.path.dirname(CSV), exist_ok=True)
    write_rows(CSV, [{k: v for k, v in row.items() if k != "wall_time"} for row in rows])
    print(f"lambda* = {LAMBDA_STAR:.2f} req/s; backlog slope over the second half of "
          f"{HORIZON:.0f} s, {SEEDS} seeds\n")
    print(f"{'load':>5} {'scheduler':>9} {'slope (tok/s)':>22} {'fluid':>7}")
    for p in summarize(rows):
        print(f"{p['rate'] / LAMBDA_STAR:5.1f} {p['scheduler']:>9} "
              f"{p['backlog_slope_mean']:10.0f} +- {p['backlog_slope_mean_se']:6.0f} (se)"
              f" {fluid_slope(p['rate']):7.0f}")
    xs = np.linspace(rates[0], rates[-1], 200)
    save(plot_lines(rows, "rate", "backlog_slope", hue="scheduler",
                    title=f"Backlog slope against arrival rate (lambda* = {LAMBDA_STAR:.2f} "
                          f"req/s, bmax = {BMAX}, {PREFILL}+{DECODE} tokens)",
                    theory=(xs, [fluid_slope(x) for x in xs], "Theorem 2 fluid rate")), PLOT)
    print(f"\ncsv: {os.path.normpath(CSV)}\nplot: {os.path.normpath(PLOT)}")


if __name__ == "__main__":
    script(main)
