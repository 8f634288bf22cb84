"""The chunk-size sweep of the Sarathi demo (docs/model.md §9.6): tail latencies of
chunked prefill against chunk size, beside the whole-prefill baseline."""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from llmqueue.plotting.style import (DATA_ZORDER, decorate, label, panels_for, reference_hline,
                                     suptitle)
from llmqueue.theory.stats import t975

#: The two panels: figure key, title, axis label and scale from seconds.
PANELS = (("ttft", "Time to first token, p99", "TTFT p99", "s", 1.0),
          ("tpot", "Time per output token, p99", "TPOT p99", "ms", 1e3))


def plot_chunk_sweep(figures: Dict[str, List], chunks: Sequence[int], title: str,
                     axes: Optional[Sequence[Axes]] = None) -> Figure:
    """TTFT p99 (left, s) and TPOT p99 (right, ms) against the chunk size, each
    the mean over the seeds of ``figures`` (as returned by
    :func:`llmqueue.experiments.sarathi_demo.sweep`: the same requests for
    every chunk of a seed), beside the whole-prefill baseline (red dashed).
    Each point's bar is the 95% confidence interval of its difference from
    the baseline, paired by seed: a bar that does not reach the baseline is a
    difference the seeds agree on.  The value axes fit the data (from zero,
    differences of a few percent would be flat lines); the right axis reads
    the change from the baseline in percent.  Draws into the two ``axes``
    when given; returns the figure."""
    fig, panels = panels_for(axes, 2)
    for ax, (key, name, short, unit, scale) in zip(panels, PANELS):
        values = np.array(figures[key], dtype=float) * scale  # (chunks, seeds)
        whole = np.array(figures[f"whole_{key}"], dtype=float) * scale  # (seeds,)
        seeds = whole.size
        means, base = values.mean(axis=1), float(whole.mean())
        gaps = values - whole[None, :]
        half = t975(seeds - 1) * gaps.std(axis=1, ddof=1) / math.sqrt(seeds) if seeds > 1 \
            else np.zeros(len(chunks))
        reference_hline(ax, base, f"whole prefill (baseline): {base:.3g} {unit}", color="C3",
                        alpha=0.9)
        ax.errorbar(chunks, means, yerr=half, fmt="o-", color="C0", capsize=3,
                    zorder=DATA_ZORDER,
                    label="chunked prefill (sarathi, chunk = x); bar: 95% confidence\n"
                          "interval of the difference from the baseline, paired by seed")
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(chunks))
        ax.set_xticklabels([str(c) for c in chunks], rotation=45)
        low = min(float((means - half).min()), base)
        high = max(float((means + half).max()), base)
        pad = 0.08 * (high - low) or 0.05 * abs(base) or 1.0
        ax.set_ylim(low - pad, high + 3.5 * pad)  # room above for the legend
        if base > 0:
            right = ax.secondary_yaxis("right", functions=_percent_of(base))
            right.set_ylabel(label("change from whole prefill", "%"))
        decorate(ax, name, label("chunk", "prefill tokens per iteration"),
                 label(f"{short}, mean over {seeds} seeds", unit), outside=False)
    suptitle(fig, title)
    return fig


def _percent_of(base: float) -> Tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """A value's change from ``base`` in percent, and back."""
    def change(v: Any) -> Any:
        return 100.0 * (v / base - 1.0)

    def value(c: Any) -> Any:
        return base * (1.0 + c / 100.0)
    return change, value
