"""Policies that are not work-conserving waste memory; point C with a real cache.

Every request a scheduler has started holds its KV cache in every iteration,
served or not.  The memory capacity mu = M / (b̄ E[g]) assumes that each
started request advances in every iteration, so its memory area is exactly g.
Saturated, 1:1 workload of Table 1, M = 131,000 tokens, no token budget:

* sarathi (and orca, identical with whole prompts) serves every started
  request every iteration: about mu;
* vllm runs prefill-only iterations while a new prompt fits; the decoders wait
  and hold their KV, so a request's area grows to about 1.1 E[g] and
  throughput falls to about 0.90 mu;
* fastertransformer decodes every started request until all finish before it
  starts anyone new: the area stays about E[g], but the cache sits about 30%
  empty, and throughput falls to about 0.72 mu.

Point C (docs/model.md §9.1) assumes no memory limit.  With the CodeLlama-34B KV cache an
A100-80GB really has (some 20-40 k tokens of 192 KiB each beside 63 GiB of
weights) it would need about 77,900 tokens on average at 2.14 req/s: it is
memory-bound and unstable under every policy.  The right panel runs
sarathi-128 at point C with 38,000 tokens of KV cache beside the run without
one (``llmqueue run point-c --set kv=38000`` is the same run).

Run:  python scenarios/memory_waste.py   (table, checks, plots/memory_waste.png)
"""

from __future__ import annotations

import os

import matplotlib.pyplot as plt

from llmqueue.cli.report import report
from llmqueue.cli.script import script
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import memory_waste, point_c
from llmqueue.plotting import plot_memory_waste, plot_pending, save

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots",
                    "memory_waste.png")
HORIZON = 3000.0   # seconds per policy run; the second half is measured


def main() -> None:
    """Run the four policies and point C, print the table and checks, draw the figure."""
    params = memory_waste.EXPERIMENT.resolve({})
    print(f"Memory waste: 1:1 workload, M = {params['kv']:,} tokens, saturated, no token "
          f"budget, {HORIZON:.0f} s per policy; point C with {params['point_c_kv']:,} "
          "tokens of KV\n")
    rows = memory_waste.run({**params, "point_c_kv": None}, RunOptions(horizon=HORIZON, seed=0))
    rows.append(memory_waste.point_c_row(params["point_c_kv"], memory_waste.POINT_C_HORIZON))
    print(report(memory_waste.EXPERIMENT, rows, params))
    fig = plt.figure(figsize=(18, 5), layout="constrained")
    axes = fig.subplots(1, 3)
    plot_memory_waste(rows, "Saturated policies under KV-cache memory (1:1 workload, "
                      f"M = {params['kv']:,} tokens) and point C with a real cache",
                      memory_waste.EXPECTED, memory_waste.AREA, memory_waste.UTILIZATION,
                      axes=axes[:2])
    sarathi = point_c.EXPERIMENT.resolve({"scheduler": "sarathi"})
    runs = [("sarathi-128, no memory limit", point_c.run(sarathi, RunOptions(
        horizon=memory_waste.POINT_C_HORIZON, timeseries=True))[0][1]),
        (f"sarathi-128, KV cache of {params['point_c_kv']:,} tokens", point_c.run(
            {**sarathi, "kv": params["point_c_kv"]},
            RunOptions(horizon=memory_waste.POINT_C_HORIZON, timeseries=True))[0][1])]
    plot_pending(runs, "Point C (2.14 req/s of 290 + 990 tokens), kmax = 100",
                 kmax=point_c.KMAX, ax=axes[2])
    save(fig, PLOT)
    print(f"\nplot: {os.path.normpath(PLOT)}")


if __name__ == "__main__":
    script(main)
