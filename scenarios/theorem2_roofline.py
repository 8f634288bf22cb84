"""Theorem 2 with a hardware model (docs/model.md §7.10, E8.4).

Sarathi on Llama-3-8B, one H100, the ``default`` roofline: Poisson arrivals,
every request 512 + 256 tokens, bmax = 2048, no kmax.  The batch time now
depends on the contexts, so the capacity is that of the full batch at the
workload's mix: 1365 prefill tokens in one chunk at context 256 and 683 decodes
at context about 640, t_mix = 82.4 ms, so lambda_mix = 2048 / t_mix / 768 =
32.35 req/s.  Sarathi runs at 0.6 to 1.4 of lambda_mix, six seeds each, 300 s
with the first 30 s left out; the backlog slope is averaged over the seeds and
compared with the fluid slope lambda * 768 - 2048 / t_mix.

Run:  python scenarios/theorem2_roofline.py   (table and checks, plots/theorem2_roofline.png)
"""

from __future__ import annotations

import os

from llmqueue.cli.report import table
from llmqueue.cli.script import script
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import theorem2_roofline as e84
from llmqueue.plotting import plot_theorem2, save

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots",
                    "theorem2_roofline.png")
SHOWN = ("0.90 lambda*", "1.10 lambda*")   # loads whose backlog is drawn over time


def main() -> None:
    """Run every load and seed, print the table and checks, draw the figure."""
    params = e84.EXPERIMENT.resolve({})
    t_mix, star = e84.mix(params)
    capacity = params["bmax"] / t_mix
    print(f"E8.4: t_mix = {1000 * t_mix:.1f} ms, capacity {capacity:.0f} tokens/s, "
          f"lambda_mix = {star:.2f} req/s; {e84.SEEDS} seeds x {e84.HORIZON:.0f} s per load\n")
    rows = dict(e84.run(params, RunOptions(horizon=e84.HORIZON, seed=0, timeseries=True)))
    print(table([result.row(label) for label, result in rows.items()], e84.theorem2.COLUMNS))
    for check in e84.checks(list(rows.items())):
        print(f"{'PASS' if check.passed else 'FAIL'}  {check.name}: {check.detail}")
    save(plot_theorem2(rows, SHOWN, capacity, star,
                       f"Theorem 2 with a roofline: Sarathi, Llama-3-8B on one "
                       f"H100, Poisson, 512+256 tokens, bmax = 2048, capacity "
                       f"{capacity:.0f} tokens/s at the mix"), PLOT)
    print(f"\nlambda* here is lambda_mix; plot: {os.path.normpath(PLOT)}")


if __name__ == "__main__":
    script(main)
