"""An agent workflow: a planner, three workers in parallel, an aggregator.

Each job (Poisson, 1.2 jobs/s) asks the planner engine for a plan (300 + 50
tokens), fans out to three calls on the worker engine (500 + 200 tokens each)
and waits for all three, asks the planner for a review one time in four
(400 + 30 tokens), and ends with the aggregator (800 + 100 tokens).  Three
Sarathi engines, bmax = 512, kmax = 100, CodeLlama-34B staircase.

The worker engine gets 2100 tokens per job, 75% of its capacity bmax / t_bmax;
the others far less.  Every engine is below capacity, so every queue stays
bounded (docs/model.md §9.4) -- yet each GPU is busy almost all the time, because a call
needs one iteration per output token however light the load in tokens is.

Run:  python scenarios/agents.py   (table on the terminal, plot in plots/)
"""

from __future__ import annotations

import os

from llmqueue.cli.report import table
from llmqueue.cli.script import script
from llmqueue.experiments import agents
from llmqueue.plotting import plot_agents, save

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots",
                    "agents.png")
SEED = 0
ENGINE_COLUMNS = [("load", "token load", "{:.3f}"), ("load_expected", "expected", "{:.3f}"),
                  ("busy_fraction", "busy", "{:.0%}"), ("pending_mean", "pending mean", "{:.1f}"),
                  ("pending_max", "max", "{:d}"), ("ttft_p99", "TTFT p99 s", "{:.2f}"),
                  ("completed", "calls done", "{:d}")]
JOB_COLUMNS = [("jobs", "jobs", "{:d}"), ("jobs_completed", "done", "{:d}"),
               ("job_e2e_p50", "e2e p50 s", "{:.1f}"), ("job_e2e_p90", "p90 s", "{:.1f}"),
               ("job_e2e_p99", "p99 s", "{:.1f}"), ("calls_per_job", "calls/job", "{:.2f}")]


def main() -> None:
    """Run the jobs; per-engine load and job latency, printed and plotted."""
    params = agents.EXPERIMENT.resolve({})
    print(f"{params['rate']} jobs/s, horizon {agents.HORIZON:.0f} s, seed {SEED}\n")
    result, jobs = agents.simulate_agents(params, agents.HORIZON, SEED)
    print(table([r.row(name) for name, r in result.engines.items()], ENGINE_COLUMNS))
    print()
    print(table([result.total.row("jobs")], JOB_COLUMNS))
    loads = {name: (r.summary["load"], r.summary["load_expected"], r.summary["busy_fraction"])
             for name, r in result.engines.items()}
    e2e = [job.e2e for job in jobs if job.end is not None]
    save(plot_agents(loads, e2e, f"Planner -> 3 workers -> aggregator at {params['rate']} "
                     "jobs/s (three Sarathi engines, bmax 512)"), PLOT)
    print(f"\nplot: {os.path.normpath(PLOT)}")


if __name__ == "__main__":
    script(main)
