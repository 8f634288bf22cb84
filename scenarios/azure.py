"""A real day at the office: the Azure LLM inference trace (2023) against the
four schedulers of the paper.

The conversation trace holds 19,366 requests over an hour (prompts of 1155
tokens and outputs of 211 on average, in bursts).  Replayed at a quarter of
its rate (``speedup = 0.25``) on one CodeLlama-34B A100 (the staircase,
bmax = 128, kmax = 100), the offered load is about 69% of the engine's token
capacity.  Sarathi keeps pending low and TPOT at one iteration per token;
Orca and vLLM stall decodes behind prefill-only batches, so their TPOT tail is
ten times longer; FasterTransformer (decode-only while anyone decodes) starves
prompts and falls hopelessly behind.

Needs the trace, which is not shipped: download AzureLLMInferenceTrace_conv.csv
from https://github.com/Azure/AzurePublicDataset (AzureLLMInferenceDataset2023.md,
licence CC-BY 4.0) into ../shared/traces beside the repository (or edit PATH);
without it the script says so and skips (exit 0).  Run:  python scenarios/azure.py
"""

from __future__ import annotations

import os
import sys

from llmqueue.cli.report import table
from llmqueue.cli.script import script
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import azure
from llmqueue.plotting import plot_latency_cdfs, plot_pending, save

HERE = os.path.dirname(os.path.abspath(__file__))
PATH = azure.DEFAULT_TRACE          # the conversation trace
SPEEDUP = azure.SPEEDUP             # a quarter of the original arrival rate
PENDING_PLOT = os.path.join(HERE, "..", "plots", "azure_pending.png")
CDF_PLOT = os.path.join(HERE, "..", "plots", "azure_latency_cdf.png")


def main() -> None:
    """Replay the trace under each scheduler, print the table, draw both figures
    (or say where to get the trace, and skip, when it is absent)."""
    if not os.path.exists(PATH):
        absent = azure.absent_note() if PATH == azure.DEFAULT_TRACE else f"{PATH} is absent"
        print(f"{os.path.basename(__file__)}: skipped: {absent}", file=sys.stderr)
        return
    params = azure.EXPERIMENT.resolve({"path": PATH, "speedup": str(SPEEDUP)})
    rows = azure.run(params, RunOptions(timeseries=True))
    summaries = [result.row(label) for label, result in rows]
    columns = [("pending_mean", "pending mean", "{:.1f}"), ("pending_max", "pending max", "{:d}"),
               ("ttft_p50", "TTFT p50 s", "{:.2f}"), ("ttft_p99", "TTFT p99 s", "{:.1f}"),
               ("tpot_p50", "TPOT p50 s", "{:.3f}"), ("tpot_p99", "TPOT p99 s", "{:.3f}"),
               ("duration", "makespan s", "{:.0f}"), ("completed", "done", "{:d}")]
    print(f"{os.path.basename(PATH)} at speedup {SPEEDUP}, staircase, bmax = "
          f"{params['bmax']}, kmax = {params['kmax']}\n")
    print(table(summaries, columns))
    sarathi = dict(rows)["sarathi"]
    last_arrival = 1.1 * sarathi.summary["duration"]
    save(plot_pending(rows, f"Azure conversation trace at {SPEEDUP}x its rate: pending "
                      "requests (fastertransformer drains at "
                      f"{dict(rows)['fastertransformer'].summary['duration']:.0f} s)",
                      kmax=params["kmax"], log=True, until=last_arrival), PENDING_PLOT)
    save(plot_latency_cdfs(rows, f"Azure conversation trace at {SPEEDUP}x its rate, "
                           f"CodeLlama-34B staircase, bmax = {params['bmax']}, "
                           f"kmax = {params['kmax']}"), CDF_PLOT)
    print(f"\nplots: {os.path.normpath(PENDING_PLOT)}, {os.path.normpath(CDF_PLOT)}")


if __name__ == "__main__":
    script(main)
