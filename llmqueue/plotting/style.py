"""The shared look of every llmqueue figure, and the one way to write one to a
file.

Every figure function of :mod:`llmqueue.plotting` gets its axes here
(:func:`figure_for` for one panel, :func:`panels_for` for several), styles
each panel with :func:`decorate` (title, axis labels with units, grid,
legend) and draws reference lines (kmax, capacity, baselines) with
:func:`reference_hline` / :func:`reference_vline`: light, dashed and *under*
the data, so a run that sits exactly on its limit stays visible.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Dict, List, Literal, Optional, Sequence, Tuple, Union

import matplotlib.pyplot as plt
from matplotlib.animation import Animation
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from llmqueue.common import files

if TYPE_CHECKING:
    from matplotlib.typing import LegendLocType  # for type checking only (recent matplotlib)

#: Size of a one-panel figure (inches).
FIGSIZE: Tuple[float, float] = (9.0, 5.0)
#: Size of each panel of a several-panel figure (inches).
PANEL: Tuple[float, float] = (5.8, 4.6)
#: Resolution of saved figures and animations (dots per inch).
DPI = 120
GIF_DPI = 80
GRID_ALPHA = 0.3
LEGEND_SIZE = 9
#: A legend with more entries than this goes outside the axes, right of them.
MANY_ENTRIES = 5
#: Metadata left out of saved files, by format: what would tie a file's bytes to
#: the matplotlib version or the date, so that redrawing a figure writes the
#: same bytes (``None`` drops an entry matplotlib would add).
STAMPS: Dict[str, Dict[str, None]] = {
    "png": {"Software": None},
    "svg": {"Date": None, "Creator": None},
    "pdf": {"CreationDate": None, "Creator": None, "Producer": None},
}
#: The salt of the ids in an SVG (random per run unless set).
SVG_SALT = "llmqueue"
#: Reference lines (limits, baselines, theory) sit under the data.
REFERENCE_COLOUR = "0.6"
REFERENCE_ZORDER = 1.0
#: Markers and highlighted data sit above lines.
DATA_ZORDER = 3.0


def label(name: str, unit: str) -> str:
    """An axis label: ``name (unit)``."""
    return f"{name} ({unit})"


def figure_for(ax: Optional[Axes], figsize: Tuple[float, float] = FIGSIZE
               ) -> Tuple[Figure, Axes]:
    """The figure and axes to draw into: ``ax`` and its figure when given, else
    a new one-panel figure of ``figsize``."""
    if ax is not None:
        return ax.figure.figure, ax  # the root figure, also for axes in a subfigure
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    return fig, ax


def panels_for(axes: Optional[Sequence[Axes]], count: int, column: bool = False,
               sharex: bool = False, sharey: bool = False,
               panel: Tuple[float, float] = PANEL) -> Tuple[Figure, List[Axes]]:
    """The figure and ``count`` axes to draw into: ``axes`` (which must hold
    ``count`` axes of one figure) when given, else a new figure with the panels
    side by side (or stacked, ``column=True``)."""
    if axes is not None:
        axes = list(axes)
        if len(axes) != count:
            raise ValueError(f"axes must hold {count} axes for this figure; got {len(axes)}")
        return axes[0].figure.figure, axes
    rows, cols = (count, 1) if column else (1, count)
    fig, grid = plt.subplots(rows, cols, figsize=(panel[0] * cols, panel[1] * rows),
                             sharex=sharex, sharey=sharey, squeeze=False, layout="constrained")
    return fig, list(grid.ravel())


def decorate(ax: Axes, title: Optional[str], xlabel: Optional[str], ylabel: Optional[str],
             legend: bool = True, grid: Optional[Literal["major", "minor", "both"]] = "major",
             outside: Optional[bool] = None) -> Axes:
    """Title, axis labels, grid and legend (see :func:`place_legend`, which
    ``outside`` is passed to) of one panel, in the house style; ``None``
    leaves a text as it is, ``grid="both"`` grids minor ticks too and
    ``grid=None`` draws none (images)."""
    if title is not None:
        ax.set_title(title, fontsize=11)
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    if grid is not None:
        ax.grid(alpha=GRID_ALPHA, which=grid)
    if legend:
        place_legend(ax, outside)
    return ax


def place_legend(ax: Axes, outside: Optional[bool] = None, loc: LegendLocType = "best",
                 also: Sequence[Axes] = ()) -> None:
    """A legend that does not cover the data: where the data leaves room
    (``loc="best"``) when it has few entries, else outside the axes on their
    right; ``outside`` forces one or the other, ``loc`` fixes the place inside
    (for animations, whose data moves).  The entries of the axes ``also`` join
    those of ``ax`` (once per label).  No legend without labels."""
    entries: Dict[str, Any] = {}
    for each in [ax, *also]:
        for handle, text in zip(*each.get_legend_handles_labels()):
            entries.setdefault(text, handle)
    if not entries:
        return
    handles, labels = list(entries.values()), list(entries)
    if outside is None:
        outside = len(handles) > MANY_ENTRIES
    if outside:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  borderaxespad=0.0, fontsize=LEGEND_SIZE)
    else:
        ax.legend(handles, labels, loc=loc, fontsize=LEGEND_SIZE, framealpha=0.85)


def room_for_legend(ax: Axes, peak: float, entries: int) -> None:
    """Raise the top of a linear y axis that starts at zero above the data's
    ``peak``, so that a legend of ``entries`` lines kept inside the axes finds
    an empty band (data that fills the panel leaves ``loc="best"`` none); the
    ticks stop at the data's range."""
    if entries <= MANY_ENTRIES and peak > 0:
        ticks = [t for t in ax.get_yticks() if 0 <= t <= peak * 1.05]
        ax.set_ylim(0, peak * (1.05 + 0.07 * entries))
        ax.set_yticks(ticks)


def suptitle(fig: Figure, text: Optional[str]) -> None:
    """The title over all panels of ``fig`` (nothing when ``text`` is empty)."""
    if text:
        fig.suptitle(text, fontsize=12)


def reference_hline(ax: Axes, y: float, text: str, **style: Any) -> None:
    """A horizontal reference (a limit, a baseline): light, dashed, under the data."""
    ax.axhline(y, **{"color": REFERENCE_COLOUR, "linestyle": "--", "linewidth": 1.2,
                     "zorder": REFERENCE_ZORDER, "label": text, **style})


def reference_vline(ax: Axes, x: float, text: str, **style: Any) -> None:
    """A vertical reference (a limit, a percentile): light, dotted, under the data."""
    ax.axvline(x, **{"color": REFERENCE_COLOUR, "linestyle": ":", "linewidth": 1.2,
                     "zorder": REFERENCE_ZORDER, "label": text, **style})


def save(figure: Union[Figure, Animation], path: str, dpi: Optional[int] = None) -> str:
    """Write ``figure`` to ``path`` (creating its folder), close it and return
    ``path``: a figure as an image (PNG, SVG, PDF... by the name's ending), an
    animation as a GIF at its own frame rate.  The one way llmqueue writes a
    figure: the figure functions only draw.  The bytes depend only on the
    drawing (and the renderer): no version, date or random id is written
    (:data:`STAMPS`, :data:`SVG_SALT`), so a figure drawn again is the same file.
    The file is :func:`~llmqueue.common.files.figure_path`'s (``PATH.png`` for a
    name without an ending, ``PATH.gif`` for an animation; another ending than
    those it lists is a ValueError), and that path is returned."""
    endings = files.ANIMATION_ENDINGS if isinstance(figure, Animation) else files.FIGURE_ENDINGS
    path = files.figure_path(path, "figure", endings)
    folder = os.path.dirname(path)
    with files.writing(path, "figure"):  # no space left, no such folder: one line
        if folder:
            os.makedirs(folder, exist_ok=True)
        if isinstance(figure, Animation):
            try:  # Pillow's GIF frames carry no metadata
                figure.save(path, writer="pillow", dpi=dpi or GIF_DPI)
            finally:
                owner = getattr(figure, "_fig", None)  # matplotlib keeps no public handle
                if owner is not None:
                    plt.close(owner)
        else:
            ending = os.path.splitext(path)[1].lower().lstrip(".")
            extra: Dict[str, Any] = {"metadata": STAMPS[ending]} if ending in STAMPS else {}
            try:
                with plt.rc_context({"svg.hashsalt": SVG_SALT}):
                    figure.savefig(path, dpi=dpi or DPI, bbox_inches="tight", **extra)
            finally:
                plt.close(figure)
    return path
