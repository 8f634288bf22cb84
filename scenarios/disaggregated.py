"""Prefill and decode on separate GPUs, against the same GPUs doing both.

Four engines (Sarathi, bmax = 512, no kmax, CodeLlama-34B staircase); requests
arrive as Poisson with geometric sizes (means 1000 prompt + 100 output tokens).
Colocated: four engines behind JSQ by tokens, each doing whole requests.
Disaggregated: three prefill engines run each prompt and its first output
token, the KV cache moves in 10 ms, and one decode engine produces the rest.

Decode-only batches are small and quick on the staircase, so the time per
output token (TPOT) falls to about one 128-token step; but the three prefill
engines carry almost all the tokens, so the split holds at most
min(3/4 * 1100/1001, 1/4 * 1100/99) = 0.82 of the colocated lambda*, and its
time to first token (TTFT) climbs as the load nears that limit.

Run:  python scenarios/disaggregated.py   (table on the terminal, plot in plots/)
"""

from __future__ import annotations

import os

from llmqueue.cli.report import table
from llmqueue.cli.script import script
from llmqueue.common import progress
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import disaggregated as dis
from llmqueue.plotting import plot_against_load, save

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots",
                    "disaggregated.png")
SEED = 0
LOADS = [0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9]
COLUMNS = [("load", "token load", "{:.2f}"), ("busy_fraction", "busy", "{:.0%}"),
           ("pending_final", "pending end", "{:d}"), ("ttft_p50", "TTFT p50", "{:.2f}"),
           ("ttft_p99", "TTFT p99", "{:.2f}"), ("tpot_p50", "TPOT p50", "{:.3f}"),
           ("tpot_p99", "TPOT p99", "{:.3f}"), ("load_limit", "holds up to", "{:.2f}")]


def main() -> None:
    """The table at the default load, then TTFT and TPOT against the load."""
    params = dis.EXPERIMENT.resolve({})
    print(f"{params['gpus']} GPUs ({params['prefill_gpus']} prefill when split), load "
          f"{params['load']} of the colocated lambda*, horizon {dis.HORIZON:.0f} s\n")
    curves = {mode: {"TTFT p99": [], "TPOT p99": []} for mode in ("colocated", "disaggregated")}
    with progress.bar(1 + len(LOADS) * len(curves), "step", False, "disaggregated") as bar:
        rows = dis.run(params, RunOptions(horizon=dis.HORIZON, seed=SEED))
        bar.update()
        for load in LOADS:
            for mode in curves:
                total = dict(dis.simulate_mode({**params, "load": load}, mode, dis.HORIZON,
                                               SEED))[f"{mode}/total"].summary
                curves[mode]["TTFT p99"].append(total["ttft_p99"])
                curves[mode]["TPOT p99"].append(total["tpot_p99"])
                bar.update()
    print(table([r.row(label) for label, r in rows], COLUMNS))
    limits = {mode: dis.load_limit(params, mode) for mode in curves}
    gpus, prefill = params["gpus"], params["prefill_gpus"]
    save(plot_against_load(LOADS, curves, limits, f"Disaggregated ({prefill} prefill + "
                           f"{gpus - prefill} decode) against {gpus} colocated engines "
                           f"(bmax = {params['bmax']}): p99 latency against load"), PLOT)
    print(f"\nplot: {os.path.normpath(PLOT)}")


if __name__ == "__main__":
    script(main)
