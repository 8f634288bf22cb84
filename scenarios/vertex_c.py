"""The vertex-C experiment: why "fill the budget" fails under a slot limit.

Point C (290 + 990 tokens every 0.4675 s, kmax = 100) sits on vertex C of
Theorem 10's region, ((b0 - kmax + 1) / t_b0, (kmax - 1) / t_b0): the only
batch that keeps up is 29 prefill + 99 decode tokens per 46.75 ms.

* Sarathi at bmax = 128 is forced into it and holds.
* Sarathi at bmax = 1024 fills each batch with a whole prompt beside the
  decodes: 0.15 s iterations instead of 0.047 s, the slots fill with decoders
  that crawl, and the queue grows by about 490 tokens/s for ever.
* Step-fill at bmax = 1024 keeps a full pool's batch within the decodes'
  latency step and is Sarathi otherwise: it locks into 29 + 99 and holds.

The lighter loads show what step-fill costs: against Sarathi-128 a faster
first token but a slower token stream while slots are free; against
Sarathi-1024 nothing where both hold (their batches are the same).

Run:  python scenarios/vertex_c.py   (table, then plots/vertex_c_pending.png)
"""

from __future__ import annotations

import os

from llmqueue.cli.report import table
from llmqueue.cli.script import script
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import point_c, vertex_c
from llmqueue.plotting import plot_pending, save

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots",
                    "vertex_c_pending.png")


def main() -> None:
    """Run the contenders, print the table, plot pending at point C."""
    rows = vertex_c.run({}, RunOptions(horizon=vertex_c.HORIZON, timeseries=True))
    print(table([r.row(label) for label, r in rows], vertex_c.EXPERIMENT.columns))
    at_c = [(label, r) for label, r in rows if r.summary["gap"] == point_c.GAP]
    save(plot_pending(at_c, f"Point C for {vertex_c.HORIZON:.0f} s: filling bmax = 1024 "
                      "blows up, serving at b0 holds", kmax=point_c.KMAX), PLOT)
    print(f"\nplot: {os.path.normpath(PLOT)}")


if __name__ == "__main__":
    script(main)
