"""The chunk-size sweep of the Sarathi demo (SPEC 6.6): tail latencies of
chunked prefill against chunk size, beside the whole-prefill baseline."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from llmqueue.plotting.style import decorate, label, panels_for, reference_hline, suptitle

#: The two panels: figure key, title, axis label and scale from seconds.
PANELS = (("ttft", "Time to first token, p99", "TTFT p99", "s", 1.0),
          ("tpot", "Time per output token, p99", "TPOT p99", "ms", 1e3))


def plot_chunk_sweep(figures: Dict[str, List], chunks: Sequence[int], title: str,
                     axes: Optional[Sequence[Axes]] = None) -> Figure:
    """TTFT p99 (left, s) and TPOT p99 (right, ms) against the chunk size, each
    the mean over the seeds of ``figures`` (as returned by
    :func:`llmqueue.experiments.sarathi_demo.sweep`), with the whole-prefill
    baseline as a dashed line under them; both axes start at zero.  Draws into
    the two ``axes`` when given; returns the figure."""
    fig, panels = panels_for(axes, 2)
    seeds = len(figures["whole_ttft"])
    for ax, (key, name, short, unit, scale) in zip(panels, PANELS):
        values = np.array(figures[key]).mean(axis=1) * scale
        base = float(np.mean(figures[f"whole_{key}"])) * scale
        ax.plot(chunks, values, "o-", color="C0", label="chunked (sarathi, chunk = x)")
        reference_hline(ax, base, "whole prefill (baseline)", color="C3")
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(chunks))
        ax.set_xticklabels([str(c) for c in chunks], rotation=45)
        ax.set_ylim(0, 1.15 * max(values.max(), base))
        decorate(ax, name, label("chunk", "prefill tokens per iteration"),
                 label(f"{short}, mean over {seeds} seeds", unit))
    suptitle(fig, title)
    return fig
