"""Chunked prefill against whole prefills (docs/model.md §9.6, after Sarathi-Serve).

300 requests arrive as a Poisson stream at 8 per second: 20% with a long
prompt (1500-2499 tokens), the rest short (50-199), outputs of 100-199
tokens, at most 16 resident, no token budget.  A batch of d decode and p
prefill tokens takes 5 ms + 0.8 ms d + 0.02 ms p + 0.3 ms p**0.6.

The baseline runs each prompt whole and alone, so every resident that is
decoding waits while it runs.  The chunked scheduler (sarathi with a cap of
``chunk`` prefill tokens per iteration) lets the decodes ride along with the
prompt.  Under this additive step model, riding along saves only the 5 ms
base cost of the iteration it merges into, while cutting a prompt into chunks
pays the concave p**0.6 term once per chunk: the sweep shows how those two
effects trade against the chunk size.

Run:  python scenarios/sarathi_demo.py   (table, checks, plots/sarathi_chunk_sweep.png)
"""

from __future__ import annotations

import os

from llmqueue.cli.report import report
from llmqueue.cli.script import script
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import sarathi_demo as demo
from llmqueue.plotting import plot_chunk_sweep, save

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots",
                    "sarathi_chunk_sweep.png")
SEEDS = range(10)  # the sweep's band: the same experiment on ten seeds


def main() -> None:
    """Run both rows, print the checks, then sweep the chunk size and plot it."""
    params = demo.EXPERIMENT.resolve({})
    rows = demo.run(params, RunOptions(seed=demo.SEED))
    print(report(demo.EXPERIMENT, rows, params))

    figures = demo.sweep(demo.SWEEP, SEEDS)
    print(f"\nchunk sweep, mean over {len(SEEDS)} seeds (whole prefill: TTFT p99 "
          f"{sum(figures['whole_ttft']) / len(SEEDS):.2f} s, TPOT p99 "
          f"{sum(figures['whole_tpot']) / len(SEEDS) * 1e3:.2f} ms)")
    for chunk, ttft, tpot in zip(demo.SWEEP, figures["ttft"], figures["tpot"]):
        print(f"  chunk {chunk:>5}: TTFT p99 {sum(ttft) / len(ttft):6.2f} s   "
              f"TPOT p99 {sum(tpot) / len(tpot) * 1e3:6.2f} ms")
    save(plot_chunk_sweep(figures, demo.SWEEP,
                          f"Chunked prefill against chunk size: {demo.COUNT} Poisson requests "
                          f"at {demo.RATE:g}/s, kmax = "
                          f"{demo.KMAX}, step model, no token budget ({len(SEEDS)} seeds, "
                          "same requests per seed)"), PLOT)
    print(f"\nplot: {os.path.normpath(PLOT)}")


if __name__ == "__main__":
    script(main)
