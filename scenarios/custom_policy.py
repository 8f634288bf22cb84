"""Writing your own scheduler: the "fast-track" rule in a few lines.

Fast-track is Sarathi with one twist: when at least K residents are decoding,
the iteration skips the prefill chunk and serves only the decodes, so the
requests already talking to a user are never slowed by a newcomer's prompt.
Newcomers pay for it in time to first token.  Both run on the docs/model.md §9.6
workload (the sarathi-demo requests, step model, kmax = 16, no token budget).

Run:  python scenarios/custom_policy.py
"""

from __future__ import annotations

from typing import Callable

from llmqueue import Plan, Sarathi
from llmqueue.cli.report import table
from llmqueue.cli.script import script
from llmqueue.experiments import sarathi_demo as demo
from llmqueue.policies.view import View

CHUNK = demo.CHUNK            # prefill tokens per iteration, as in the demo
THRESHOLDS = (4, 8, 12)       # K: decoders that make an iteration skip its prefill
SARATHI = Sarathi(chunk=CHUNK)


def fast_track(k: int) -> Callable[[View, int], Plan]:
    """Sarathi, but decodes only while at least ``k`` residents are decoding."""
    def policy(view: View, budget: int) -> Plan:
        if len(view.decoding) >= k:
            return Plan(view.decoding[:budget], [])
        return SARATHI(view, budget)
    policy.__name__ = f"fast-track-{k}"
    return policy


def main() -> None:
    """Sarathi and fast-track with several K, on the same requests."""
    requests = demo.workload(seed=demo.SEED)
    runs = [("sarathi", SARATHI)] + [(f"fast-track K={k}", fast_track(k)) for k in THRESHOLDS]
    columns = [("output_tokens_per_s", "output tok/s", "{:.0f}"),
               ("ttft_p50", "TTFT p50 s", "{:.2f}"), ("ttft_p99", "TTFT p99 s", "{:.2f}"),
               ("tpot_p50", "TPOT p50 ms", "{:.2f}"), ("tpot_p99", "TPOT p99 ms", "{:.2f}"),
               ("completed", "done", "{:d}")]
    rows = []
    for label, policy in runs:
        row = demo.serve(requests, policy).row(label)
        row["tpot_p50"], row["tpot_p99"] = row["tpot_p50"] * 1e3, row["tpot_p99"] * 1e3
        rows.append(row)
    print(f"model §9.6's workload: {demo.COUNT} requests at {demo.RATE:g}/s, kmax = {demo.KMAX}, "
          f"chunk = {CHUNK}\n")
    print(table(rows, columns))


if __name__ == "__main__":
    script(main)
