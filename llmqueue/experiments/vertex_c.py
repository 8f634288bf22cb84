"""The vertex-C experiment (docs/model.md §9.5): fill the budget, or serve at b0?

At point C (290 + 990 tokens every 0.4675 s, kmax 100) the only sustainable
batch is 29 prefill + 99 decode tokens every 46.75 ms.  Sarathi at bmax 128
finds it.  Sarathi at bmax 1024 fills every batch: its iterations grow to
whole prompts beside the decodes, the 100 slots fill with decoders that each
wait out those long iterations, and the queue grows for ever.  Step-fill at
bmax 1024 keeps the batch within the decodes' latency step while the pool is
full, and is Sarathi otherwise: stable at point C, and at lighter loads it
trades a little time per output token for a faster first token against
Sarathi-128.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from llmqueue.engine.options import RunOptions
from llmqueue.engine.simulate import simulate
from llmqueue.experiments import point_c
from llmqueue.experiments.base import Experiment, Rows, register
from llmqueue.models.workload import renewal

HORIZON = 5000.0                 # seconds at point C
LIGHT_HORIZON = 3000.0           # seconds at the lighter loads
LIGHT_GAPS = (0.55, 0.8)         # seconds between arrivals, below point C's load
#: The contenders: (scheduler, bmax).
RUNS: List[Tuple[str, int]] = [("sarathi", 128), ("sarathi", 1024), ("step-fill", 1024)]


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """The three contenders at point C, then at the lighter loads."""
    rows: Rows = []
    for gap, span in [(point_c.GAP, options.horizon or HORIZON)] + [(g, LIGHT_HORIZON)
                                                             for g in LIGHT_GAPS]:
        for scheduler, bmax in RUNS:
            result = simulate(renewal(gap, point_c.PREFILL, point_c.DECODE), scheduler,
                              bmax=bmax, kmax=point_c.KMAX, horizon=span,
                              **options.logs())
            result.add_figures(gap=gap)
            rows.append((f"{scheduler}-{bmax} @ {gap:g} s", result))
    return rows


EXPERIMENT = register(Experiment(
    name="vertex-c",
    summary="model §9.5: sarathi-128 vs sarathi-1024 vs step-fill-1024 at point C "
            "(5000 s) and at lighter loads",
    params={},
    run=run,
    horizon=HORIZON,
    columns=[("verdict", "verdict", "{}"), ("pending_mean", "pending mean", "{:.1f}"),
                       ("pending_final", "final", "{:d}"),
                       ("decode_batch_mean", "decode batch", "{:.1f}"),
                       ("ttft_p50", "TTFT p50 s", "{:.3f}"), ("ttft_p99", "TTFT p99 s", "{:.3f}"),
                       ("tpot_p50", "TPOT p50 s", "{:.4f}"),
                       ("tpot_p99", "TPOT p99 s", "{:.4f}")],
))
