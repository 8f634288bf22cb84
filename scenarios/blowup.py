"""Queue blow-up: the same load, four schedulers, two fates.

The paper's Fig. 1 workload: Poisson arrivals, prompts of 129 and outputs of
112 tokens on average (here geometric lengths on 1, 2, ..., with those means),
an engine with a budget of bmax = 512 tokens per batch and no slot limit, on
the CodeLlama-34B staircase.  A full batch of 512 tokens lasts 0.15316 s, so no
scheduler that fills its batches can be outrun below 512 / 0.15316 = 3343
tokens/s, i.e. lambda* = 3343 / 241 = 13.87 requests/s.

At 95% of lambda* (13.18 req/s) Sarathi and Orca, which never leave budget
unused while work waits, hold the queue at a couple of hundred requests.  vLLM
runs prompt-only batches whenever a prompt waits, FasterTransformer runs
decode-only batches whenever anyone decodes: both leave most of the budget
idle, serve less than arrives, and their queues grow without bound.

Run:  python scenarios/blowup.py   (explanation on the terminal,
      plots/blowup.png and the animation plots/blowup.gif)
"""

from __future__ import annotations

import os
from typing import Dict

from llmqueue import make_policy
from llmqueue.cli.report import table
from llmqueue.cli.script import script
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import blowup
from llmqueue.experiments.base import Rows, engine_kwargs
from llmqueue.plotting import animate_pending, plot_pending_zoom, save
from llmqueue.theory import capacity as theory

HERE = os.path.dirname(os.path.abspath(__file__))
PNG = os.path.join(HERE, "..", "plots", "blowup.png")
GIF = os.path.join(HERE, "..", "plots", "blowup.gif")
SEED = 1


def headline(params: Dict[str, object]) -> str:
    """The load and the capacity in one line."""
    latency = engine_kwargs(params)["latency"]
    rate = blowup.rate_of(params)
    capacity = theory.token_capacity(params["bmax"], latency)
    star = theory.lambda_star(params["bmax"], params["vp"], params["vd"], latency)
    return (f"load {rate:.2f} req/s = {params['load']:.0%} of lambda* = {star:.2f} req/s "
            f"(capacity {capacity:.0f} tokens/s, bmax = {params['bmax']})")


def draw(rows: Rows, params: Dict[str, object], path: str) -> None:
    """Pending over time: every scheduler (left) and a zoom on those that hold (right)."""
    held = [r.summary["pending_max"] for _, r in rows if r.summary["verdict"] == "stable"]
    named = []
    for label, result in rows:
        wc = "work-conserving" if make_policy(label).work_conserving else "not work-conserving"
        named.append((f"{label} ({wc}): {result.summary['verdict']}", result))
    fig = plot_pending_zoom(
        named, f"Queue blow-up, the paper's Fig. 1 workload (Poisson arrivals, geometric "
               f"lengths with means {params['vp']:g} + {params['vd']:g} tokens)\n"
               f"{headline(params)}", top=2.5 * max(held) if held else None,
        titles=("All four schedulers", "Zoom: the work-conserving schedulers hold"))
    save(fig, path)


def main() -> None:
    """Run the four schedulers, explain, draw the figure and the animation."""
    params = blowup.EXPERIMENT.resolve({})
    print(f"Queue blow-up: {headline(params)}, horizon {blowup.HORIZON:.0f} s\n")
    rows = blowup.run(params, RunOptions(horizon=blowup.HORIZON, seed=SEED, timeseries=True))
    print(table([result.row(label) for label, result in rows]))
    print("\n" + "\n".join(blowup.explain(rows, params)))
    draw(rows, params, PNG)
    save(animate_pending(rows, "Pending requests, Fig. 1 workload, four schedulers",
                         note=headline(params).replace(" (", "\n(")), GIF)
    print(f"\nplots: {os.path.normpath(PNG)}, {os.path.normpath(GIF)}")


if __name__ == "__main__":
    script(main)
