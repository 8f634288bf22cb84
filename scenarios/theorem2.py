"""Theorem 2: a work-conserving scheduler holds every load below its token capacity.

An engine whose full batch of bmax tokens lasts t_bmax serves at most
bmax / t_bmax tokens per second when it fills every batch, which a
work-conserving scheduler (Sarathi, Orca) does whenever the queue is long.  So
the backlog of unprocessed tokens is stable when the offered tokens
lambda * (m_p + m_d) stay below bmax / t_bmax, and above it grows at the fluid
rate lambda * (m_p + m_d) - bmax / t_bmax.

docs/model.md §9.2's check case: Poisson arrivals, every request 100 + 100 tokens,
bmax = 512, no kmax, the CodeLlama-34B staircase.  t_512 = 0.15316 s, so the
capacity is 3342.9 tokens/s and lambda* = 16.71 req/s.  Sarathi runs at 0.6 to
1.4 of lambda*, several seeds each; the backlog slope over the second half of
every run is averaged over the seeds and compared with the fluid slope.

Run:  python scenarios/theorem2.py   (table on the terminal, plots/theorem2.png)
"""

from __future__ import annotations

import os
from typing import Dict

from llmqueue import Result
from llmqueue.cli.report import table
from llmqueue.cli.script import script
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import theorem2
from llmqueue.experiments.base import engine_kwargs
from llmqueue.plotting import plot_theorem2, save
from llmqueue.theory import capacity as theory

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots",
                    "theorem2.png")
SHOWN = ("0.90 lambda*", "1.10 lambda*")   # loads whose backlog is drawn over time


def draw(rows: Dict[str, Result], params: Dict[str, object], path: str) -> None:
    """Left: backlog over time at 0.9 and 1.1 of lambda* beside the fluid line.
    Right: measured slope (+- 2 SE over seeds) against load, beside the fluid curve."""
    latency = engine_kwargs(params)["latency"]
    capacity = theory.token_capacity(params["bmax"], latency)
    star = theory.lambda_star(params["bmax"], params["vp"], params["vd"], latency)
    save(plot_theorem2(rows, SHOWN, capacity, star,
                       f"Theorem 2: Sarathi, Poisson arrivals, {params['vp']}+"
                       f"{params['vd']} tokens, bmax = {params['bmax']}, no kmax, "
                       f"capacity {capacity:.0f} tokens/s"), path)


def main() -> None:
    """Run every load and seed, print the table, draw the figure."""
    params = theorem2.EXPERIMENT.resolve({})
    latency = engine_kwargs(params)["latency"]
    star = theory.lambda_star(theorem2.BMAX, theorem2.PREFILL, theorem2.DECODE, latency)
    print(f"Theorem 2: t_512 = {latency.tokens_time(theorem2.BMAX):.5f} s, capacity "
          f"{theory.token_capacity(theorem2.BMAX, latency):.1f} tokens/s, "
          f"lambda* = {star:.2f} req/s; {theorem2.SEEDS} seeds x {theorem2.HORIZON:.0f} s "
          f"per load\n")
    rows = dict(theorem2.run(params, RunOptions(horizon=theorem2.HORIZON, seed=0, timeseries=True)))
    print(table([result.row(label) for label, result in rows.items()], theorem2.COLUMNS))
    draw(rows, params, PLOT)
    print(f"\nz = (slope - fluid slope) / se; plot: {os.path.normpath(PLOT)}")


if __name__ == "__main__":
    script(main)
