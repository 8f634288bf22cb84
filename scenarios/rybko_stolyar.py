"""The Rybko-Stolyar network: a priority rule that loses stability at 90% load.

Two Sarathi engines (bmax = 768, every batch one time unit) serve two job
types on opposite routes.  A job of type A makes a short hop at engine 1
(Poisson(32) prompt and output tokens), then a long hop at engine 2
(Poisson(512) prompt, Poisson(32) output); type B the mirror route.  Each type
arrives as Poisson at 0.9 * 768 / 608 jobs per unit, so each engine is offered
90% of its 768 tokens per unit: every engine is below capacity.

If each engine favours the class that *exits* through it (engine 1 serves B's
long hop first, engine 2 A's), the engines take turns starving each other: a
wave of held-back short hops is released at once and floods the other engine
with long hops, and each wave is bigger than the last.  Favouring the class
that *enters* through each engine is stable.

Run:  python scenarios/rybko_stolyar.py   (table on the terminal, plot in plots/)
"""

from __future__ import annotations

import os

from llmqueue.cli.report import table
from llmqueue.cli.script import script
from llmqueue.common import progress
from llmqueue.experiments import rybko_stolyar as rs
from llmqueue.plotting import plot_backlogs, save

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots",
                    "rybko_stolyar.png")
COLUMNS = [("backlog_mean", "backlog mean", "{:.0f}"), ("backlog_max", "backlog max", "{:d}"),
           ("backlog_final", "final", "{:d}"), ("pending_mean", "pending mean", "{:.0f}"),
           ("load", "offered load", "{:.2f}"), ("busy_fraction", "busy", "{:.0%}"),
           ("completed", "done", "{:d}")]


def main() -> None:
    """Both priority rules: the table and the backlogs over time."""
    print(f"Rybko-Stolyar: bmax = {rs.BMAX}, each type at {rs.RATE:.4f} jobs/unit "
          f"(load {rs.LOAD} per engine), horizon {rs.HORIZON:.0f} units\n")
    panels, rows = [], []
    with progress.bar(2, "run", False, "rybko-stolyar") as bar:  # on a terminal only
        for priority in ("exiting", "entering"):
            result, _ = rs.simulate_priority(priority, rs.HORIZON)
            panels.append((f"priority to the {priority} class at each engine",
                           {**result.engines, "total": result.total}))
            rows.extend(r.row(f"{priority}/{label}") for label, r in result.rows())
            bar.update()
    print(table(rows, COLUMNS))
    save(plot_backlogs(panels, f"Rybko-Stolyar network at {rs.LOAD:.0%} load per engine "
                       f"(bmax = {rs.BMAX}): backlog over time",
                       unit="time units = batches"), PLOT)
    print(f"\nplot: {os.path.normpath(PLOT)}")


if __name__ == "__main__":
    script(main)
