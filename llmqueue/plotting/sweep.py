"""Figures of a sweep: a figure against one grid key as lines with 95%
confidence bands over the seeds, or against two keys as a heat map."""

from __future__ import annotations

import os
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from llmqueue.common import limits
from llmqueue.common.params import Param
from llmqueue.plotting.style import LEGEND_SIZE, REFERENCE_ZORDER, decorate, figure_for, label
from llmqueue.sweeps.runner import Row, figure_columns, point_columns, summarize, varying

#: Units of the summary figures, by name part (the first that matches).
_UNITS: List[Tuple[str, str]] = [
    ("slope", "tokens/s"), ("tokens_per_s", "tokens/s"), ("pending", "requests"),
    ("backlog", "tokens"), ("_fraction", "fraction of the run"), ("ttft", "s"),
    ("tpot", "s per token"), ("e2e", "s"), ("arrivals", "requests"),
    ("completed", "requests"), ("residents", "requests"), ("waiting", "requests"),
    ("decode_batch", "decode tokens per batch"), ("batches", "batches"),
    ("duration", "s"), ("wall_time", "s of computer time"), ("load", "fraction of capacity"),
]
#: Words of figure names written out in axis labels.
_WORDS = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "end-to-end", "se": "standard error",
          "non_work_conserving": "non-work-conserving", "tokens_per_s": "throughput",
          "throughput_tokens_per_s": "throughput"}
#: Axis labels of the usual grid keys, with their units.
_KEYS = {key: label(*words.split(" | ")) for key, words in (
    line.split(": ", 1) for line in """\
rate: arrival rate | requests/s
gap: gap between arrivals | s
load: load | fraction of lambda*
bmax: token budget bmax | tokens
kmax: slot limit kmax | requests
vp: prompt vp | tokens
vd: output vd | tokens
chunk: chunk | prefill tokens per iteration
lambda_p: prefill token rate lambda_p | tokens/s
lambda_d: decode token rate lambda_d | tokens/s
c: staircase constant c | s
a: staircase step time a | s
b0: staircase step width b0 | tokens
count: requests | count
engines: engines K | count
gpus: GPUs | count
prefill_gpus: prefill GPUs | count
transfer: KV transfer | s
speedup: speedup | x the trace's rate
long_fraction: long prompts | fraction
review: review chance | probability""".splitlines())}


def figure_label(name: str) -> str:
    """An axis label for a summary figure: its name in words and its unit,
    e.g. ``ttft_p99`` -> ``TTFT p99 (s)``."""
    parts, words = name.split("_"), []
    while parts:  # the longest run of parts that has a written-out form, else one part
        n = next((n for n in range(len(parts), 0, -1) if "_".join(parts[:n]) in _WORDS), 0)
        words.append(_WORDS["_".join(parts[:n])] if n else parts[0])
        parts = parts[max(n, 1):]
    text = " ".join(words)
    for part, unit in _UNITS:
        if part in name:
            return label(text, unit)
    return text


def key_label(key: str, params: Optional[Mapping[str, Param]] = None) -> str:
    """An axis label for a grid key: its name and unit, or else its name and
    the help of the experiment's parameter in ``params`` (without its note on
    the default)."""
    if key in _KEYS:
        return _KEYS[key]
    if key in ("scheduler", "label"):
        return key
    if params is not None and key in params:
        return f"{key}: {params[key].help.split(' (default')[0]}"
    return key


def check_columns(rows: Sequence[Row], keys: Sequence[str], y: str) -> None:
    """Raise ``ValueError`` unless ``keys`` are grid columns and ``y`` a figure."""
    if not rows:
        raise ValueError("the sweep file has no rows")
    columns = list(rows[0])
    points, figures = point_columns(columns), figure_columns(columns)
    for key in keys:
        if key not in points:
            raise ValueError(f"x/hue must be grid columns ({', '.join(points)}); got {key!r}")
    if y not in figures:
        raise ValueError(f"y must be a figure ({', '.join(figures)}); got {y!r}")


def plot_lines(rows: Sequence[Row], x: str, y: str, hue: Optional[str] = None,
               title: Optional[str] = None,
               theory: Optional[Tuple[Sequence[float], Sequence[float], str]] = None,
               ax: Optional[Axes] = None,
               params: Optional[Mapping[str, Param]] = None) -> Figure:
    """``y`` against ``x`` from a sweep's ``rows``: the mean over seeds with its
    95% confidence band (clipped at zero unless ``y`` is a slope, which may be
    negative), one line per value of ``hue`` and of every other grid key that
    varies; ``theory`` is an ``(xs, ys, label)`` curve drawn dashed beside
    them.  The legend's title says what the points and bands are.  Draws
    into ``ax`` when given; returns the figure."""
    check_columns(rows, [x] + ([hue] if hue else []), y)
    points = summarize(rows)
    keys = varying(points, skip=[x])
    if hue in keys:
        keys = [hue] + [k for k in keys if k != hue]
    odd = sorted({str(p[x]) for p in points
                  if isinstance(p[x], bool) or not isinstance(p[x], (int, float))})
    if odd:
        raise ValueError(f"--x {x} has values that are not numbers ({', '.join(odd)}); a line "
                         f"plot needs numbers: use {x} as --hue or as a heat-map key")
    lines: Dict[Tuple[object, ...], List[Row]] = {}
    for p in points:
        lines.setdefault(tuple(p[k] for k in keys), []).append(p)
    fig, ax = figure_for(ax)
    floor = -np.inf if "slope" in y else 0.0
    for key, members in lines.items():
        members = [m for m in members if m[f"{y}_mean"] is not None]
        members.sort(key=lambda m: m[x])
        xs = np.array([m[x] for m in members], dtype=float)
        mean = np.array([m[f"{y}_mean"] for m in members], dtype=float)
        half = np.array([m[f"{y}_ci95"] if m[f"{y}_ci95"] is not None else np.nan
                         for m in members], dtype=float)
        name = ", ".join(f"{k}={v}" for k, v in zip(keys, key)) or figure_label(y)
        (line,) = ax.plot(xs, mean, marker="o", linewidth=1.5, label=name)
        ax.fill_between(xs, np.maximum(mean - half, floor), mean + half,
                        color=line.get_color(), alpha=0.2, linewidth=0)
    if theory is not None:
        ax.plot(theory[0], theory[1], color="black", linestyle="--", linewidth=1.2,
                zorder=REFERENCE_ZORDER + 0.5, label=theory[2])  # under the data
    n = sorted({p["n"] for p in points})
    seeds = f"{n[0]}" if len(n) == 1 else f"{n[0]}-{n[-1]}"
    if floor == 0.0:
        ax.set_ylim(bottom=0)
    decorate(ax, title or f"{_headline(y)} against {x}",
             key_label(x, params), figure_label(y))
    legend = ax.get_legend()
    if legend is not None:  # what the points and the bands are, over every entry
        legend.set_title(f"mean over {seeds} seeds; shaded: 95% confidence band")
        legend.get_title().set_fontsize(LEGEND_SIZE)
    return fig


def plot_heat(rows: Sequence[Row], x: str, x2: str, y: str, title: Optional[str] = None,
              ax: Optional[Axes] = None,
              params: Optional[Mapping[str, Param]] = None) -> Figure:
    """The mean of ``y`` over seeds on the grid of ``x`` (columns) and ``x2``
    (rows) of a sweep's ``rows``, each cell written out with its 95%
    confidence half-width; every other grid key must be fixed, and the grid
    holds at most :data:`~llmqueue.common.limits.MAX_CELLS` cells.  Draws into
    ``ax`` when given; returns the figure."""
    check_columns(rows, [x, x2], y)
    points = summarize(rows)
    others = varying(points, skip=[x, x2])
    if others:
        raise ValueError(f"a heat map needs every other grid key fixed; {', '.join(others)} "
                         "varies: pick one value with --where KEY=VALUE")
    cols = sorted({p[x] for p in points}, key=_order)
    lines = sorted({p[x2] for p in points}, key=_order)
    limits.check_cells(len(cols), len(lines))
    grid = np.full((len(lines), len(cols)), np.nan)
    half = np.full_like(grid, np.nan)
    for p in points:
        at = lines.index(p[x2]), cols.index(p[x])
        if p[f"{y}_mean"] is not None:
            grid[at] = p[f"{y}_mean"]
        if p[f"{y}_ci95"] is not None:
            half[at] = p[f"{y}_ci95"]
    fig, ax = figure_for(ax, figsize=(1.2 * len(cols) + 4, 0.6 * len(lines) + 3))
    image = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis")
    finite = grid[np.isfinite(grid)]
    middle = (finite.min() + finite.max()) / 2 if finite.size else 0
    for (i, j), value in np.ndenumerate(grid):
        if np.isfinite(value):
            text = f"{value:.3g}" + (f"\n+- {half[i, j]:.3g}" if np.isfinite(half[i, j]) else "")
            ax.text(j, i, text, ha="center", va="center", fontsize=8,
                    color="black" if value > middle else "white")
    ax.set_xticks(range(len(cols)), [str(c) for c in cols])
    ax.set_yticks(range(len(lines)), [str(v) for v in lines])
    n = sorted({p["n"] for p in points})
    decorate(ax, title or f"{_headline(y)}: mean over {n[-1]} seeds +- 95% "
             "confidence half-width", key_label(x, params), key_label(x2, params), legend=False,
             grid=None)
    fig.colorbar(image, ax=ax, label=figure_label(y))
    return fig


def _headline(y: str) -> str:
    """A figure's name in words, capitalized, for a default title."""
    text = figure_label(y).split(" (")[0]
    return text[:1].upper() + text[1:]


def default_path(csv_path: str, y: str) -> str:
    """``FILE-FIGURE.png`` beside the sweep's CSV file."""
    return f"{os.path.splitext(csv_path)[0]}-{y}.png"


def _order(value: object) -> Tuple[int, object]:
    """Numbers first in numeric order, then text, then ``none``."""
    if value is None:
        return (2, "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, value)
    return (1, str(value))
