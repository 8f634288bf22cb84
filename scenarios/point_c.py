"""Operating point C: why only one scheduler survives at the capacity boundary.

Requests of 290 prompt + 990 output tokens arrive every 0.4675 s at an engine
with at most 100 resident requests, on the CodeLlama-34B staircase
(t_b = 11.28 ms + 35.47 ms * ceil(b / 128)).  The token load, 1280 tokens per
0.4675 s, equals 128 / t_128 exactly: a batch of 128 tokens every 46.75 ms is
the only way to keep up.

Sarathi at bmax = 128 finds it: 99 decoders and one 29-token prefill chunk per
iteration, ten iterations per arrival, pending pinned at kmax.  Orca and vLLM
waste iterations on prefill-heavy or decode-only batches, and
FasterTransformer serves decode-only batches that leave most of the budget
unused; their queues grow without bound.

Run:  python scenarios/point_c.py   (table on the terminal, plot in plots/)
"""

from __future__ import annotations

import os

from llmqueue.cli.report import table
from llmqueue.cli.script import script
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import point_c
from llmqueue.plotting import plot_pending, save

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots",
                    "point_c_pending.png")


def main() -> None:
    """Run the six rows, print the table and draw pending over time."""
    params = point_c.EXPERIMENT.resolve({})
    print(f"Point C: {point_c.PREFILL}+{point_c.DECODE} tokens every {point_c.GAP} s, "
          f"kmax = {point_c.KMAX}, horizon {point_c.HORIZON:.0f} s\n")
    rows = point_c.run(params, RunOptions(horizon=point_c.HORIZON, timeseries=True))
    print(table([result.row(label) for label, result in rows]))
    save(plot_pending(rows, f"Point C: {point_c.PREFILL}+{point_c.DECODE} tokens every "
                      f"{point_c.GAP} s, kmax = {point_c.KMAX}: pending requests by "
                      "scheduler-bmax (CodeLlama-34B staircase)", kmax=point_c.KMAX), PLOT)
    print(f"\nplot: {os.path.normpath(PLOT)}")


if __name__ == "__main__":
    script(main)
