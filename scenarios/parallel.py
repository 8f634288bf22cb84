"""Four engines behind five routers, at 95% of what four engines can hold.

Requests arrive as Poisson with geometric sizes (means 1000 prompt + 100 output
tokens) at 0.95 * lambda*, where lambda* = K * (bmax / t_bmax) / (m_p + m_d) is
the K-engine capacity of docs/model.md §9.3 (K = 4, bmax = 512, CodeLlama-34B staircase:
lambda* = 12.16 requests/s).  All five routers keep the system stable at this
load, but not equally well: random routing leaves one engine idle while
another queues; join-the-shortest-queue by unprocessed tokens never does, and
power-of-two choices comes close with two looks per request.

Run:  python scenarios/parallel.py   (table on the terminal, plot in plots/)
"""

from __future__ import annotations

import os

from llmqueue.cli.report import table
from llmqueue.cli.script import script
from llmqueue.common import progress
from llmqueue.experiments import parallel
from llmqueue.network.routers import router_names
from llmqueue.plotting import plot_pending, save

SEED = 0
#: The table: (summary figure, heading, format) per column.
COLUMNS = [
    ("pending_mean", "pending mean", "{:.1f}"),
    ("pending_max", "pending max", "{:d}"),
    ("backlog_mean", "backlog mean", "{:.0f}"),
    ("backlog_max", "backlog max", "{:d}"),
    ("ttft_p50", "TTFT p50 s", "{:.2f}"),
    ("ttft_p99", "TTFT p99 s", "{:.2f}"),
    ("load", "load", "{:.3f}"),
    ("completed", "done", "{:d}"),
]
PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots",
                    "parallel_routers.png")


def main() -> None:
    """Every router on the same arrivals: totals table and pending over time."""
    params = parallel.EXPERIMENT.resolve({})
    rate = parallel.arrival_rate(params)
    print(f"{params['engines']} engines, bmax {params['bmax']}, load {params['load']} of "
          f"lambda* = {rate / params['load']:.2f} req/s ({rate:.2f} req/s), "
          f"horizon {parallel.HORIZON:.0f} s, seed {SEED}\n")
    routers = router_names(cache_aware=False)
    rows = []
    with progress.bar(len(routers), "run", False, "parallel") as bar:  # on a terminal only
        for router in routers:
            rows.append((router, parallel.simulate_router(params, router, parallel.HORIZON,
                                                          SEED).total))
            bar.update()
    print(table([r.row(label) for label, r in rows], COLUMNS))
    save(plot_pending(rows, f"{params['engines']} engines (bmax {params['bmax']}) at "
                      f"{params['load']:.0%} of lambda* = {rate / params['load']:.2f} req/s: "
                      "pending requests over time (all engines), by router"), PLOT)
    print(f"\nplot: {os.path.normpath(PLOT)}")


if __name__ == "__main__":
    script(main)
