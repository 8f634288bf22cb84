"""The shared look of every llmqueue figure, and the one way to write one to a
file.

Every figure function of :mod:`llmqueue.plotting` gets its axes here
(:func:`figure_for` for one panel, :func:`panels_for` for several), styles
each panel with :func:`decorate` (title, axis labels with units, grid,
legend) and draws reference lines (kmax, capacity, baselines) with
:func:`reference_hline` / :func:`reference_vline`: light, dashed and *under*
the data, so a run that sits exactly on its limit stays visible.

Titles, one rule for every figure.  A title is one short line that says what
the figure shows.  What it was run on (rates, sizes, seeds) is not the
title: a caller that wants it shown passes ``"headline: details"`` (or
``"headline\ndetails"``), :func:`split_title` cuts at the first ``": "`` or
line break, and the details go on a line of their own under the headline in
a smaller grey font (:data:`DETAILS_SIZE`), wrapped only when they do not fit
the width; nothing is cut off.  Line breaks inside the details (a caller's
``textwrap.fill``) are spaces.  The same rule holds for a panel's title
(:func:`decorate`) and a figure's title over several panels
(:func:`suptitle`); a figure function's own panel titles are one line
without details.  What a line, band or marker means goes into the legend.

Reference lines of one panel must be told apart: each gets its own colour
or line style (``style`` of :func:`reference_hline`) and a legend text that
says what it is and its value.  A log axis is labelled in plain numbers
(:func:`log_axis`).
"""

from __future__ import annotations

import math
import os
import textwrap
from typing import TYPE_CHECKING, Any, Dict, List, Literal, Optional, Sequence, Tuple, Union

import matplotlib.pyplot as plt
from matplotlib.animation import Animation
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Annotation
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

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
#: Font sizes (points) of a figure's title over its panels, of a panel's title
#: and of the details line under either (see :func:`split_title`).
TITLE_SIZE = 12
PANEL_TITLE_SIZE = 11
DETAILS_SIZE = 9
DETAILS_COLOUR = "0.35"
#: The mean width of a character as a share of the font size: where the
#: details line wraps (generous, so that a wrapped line fits).
CHAR_WIDTH = 0.56
#: A log axis whose data span more decades than this is labelled at the powers
#: of ten only; a narrower one at 1, 2 and 5 of each decade.
FEW_DECADES = 3.0
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
        title_panel(ax, title)
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
                 also: Sequence[Axes] = (), first: Sequence[str] = ()) -> None:
    """A legend that does not cover the data: where the data leaves room
    (``loc="best"``) when it has few entries, else outside the axes on their
    right; ``outside`` forces one or the other, ``loc`` fixes the place inside
    (for animations, whose data moves).  The entries of the axes ``also`` join
    those of ``ax`` (once per label); those labelled ``first`` lead, in that
    order.  No legend without labels."""
    entries: Dict[str, Any] = {}
    for each in [ax, *also]:
        for handle, text in zip(*each.get_legend_handles_labels()):
            entries.setdefault(text, handle)
    if not entries:
        return
    labels = [t for t in first if t in entries] + [t for t in entries if t not in first]
    handles = [entries[t] for t in labels]
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


def split_title(text: str) -> Tuple[str, str]:
    """A title's headline and details: ``text`` cut at its first ``": "`` or
    line break, whichever comes first (no details without either), each part
    with its runs of white space made one space."""
    text = text.strip()
    cuts = [(i, width) for i, width in ((text.find(": "), 2), (text.find("\n"), 1)) if i > 0]
    if not cuts:
        return " ".join(text.split()), ""
    at, width = min(cuts)
    return " ".join(text[:at].split()), " ".join(text[at + width:].split())


def _wrapped(details: str, inches: float) -> Tuple[str, int]:
    """``details`` wrapped to lines that fit ``inches`` at :data:`DETAILS_SIZE`,
    and how many lines that makes."""
    chars = max(30, int(inches * 72 / (CHAR_WIDTH * DETAILS_SIZE)))
    lines = textwrap.wrap(details, chars, break_on_hyphens=False) or [""]
    return "\n".join(lines), len(lines)


def _details_artist(owner: Union[Figure, Axes]) -> Optional[Annotation]:
    """The details line drawn earlier under ``owner``'s title, if any."""
    texts = owner.texts if isinstance(owner, Axes) else owner.artists
    return next((t for t in texts if isinstance(t, Annotation) and t.get_gid() == _DETAILS),
                None)


_DETAILS = "llmqueue-title-details"


def title_panel(ax: Axes, text: str, size: float = PANEL_TITLE_SIZE) -> None:
    """``ax``'s title by the rule of :func:`split_title`: the headline as the
    title and the details, if any, on a smaller grey line between it and the
    panel (drawing it again replaces both)."""
    head, details = split_title(text)
    old = _details_artist(ax)
    if old is not None:
        old.remove()
    pad = float(plt.rcParams["axes.titlepad"])
    if not details:
        ax.set_title(head, fontsize=size, pad=pad)
        return
    width = ax.get_position().width * ax.figure.figure.get_figwidth()  # the root figure's
    lines, count = _wrapped(details, width)
    ax.set_title(head, fontsize=size, pad=pad + 1.25 * DETAILS_SIZE * count + 2)
    ax.annotate(lines, xy=(0.5, 1.0), xycoords="axes fraction", xytext=(0, pad),
                textcoords="offset points", ha="center", va="bottom", fontsize=DETAILS_SIZE,
                color=DETAILS_COLOUR, annotation_clip=False, gid=_DETAILS)


def suptitle(fig: Figure, text: Optional[str]) -> None:
    """The title over all panels of ``fig`` by the rule of :func:`split_title`:
    the headline, and the details (if any) on a smaller grey line under it
    (nothing when ``text`` is empty)."""
    if not text:
        return
    head, details = split_title(text)
    old = _details_artist(fig)
    if old is not None:
        old.remove()
    if not details:
        fig.suptitle(head, fontsize=TITLE_SIZE)
        return
    lines, count = _wrapped(details, fig.get_figwidth())
    # blank lines under the headline hold the details: the layout leaves room for them
    blank = math.ceil(count * DETAILS_SIZE / TITLE_SIZE)
    top = fig.suptitle(head + "\n" * blank, fontsize=TITLE_SIZE, linespacing=1.15)
    fig.add_artist(Annotation(lines, xy=(0.5, 0.0), xycoords=top, xytext=(0, 1),
                              textcoords="offset points", ha="center", va="bottom",
                              fontsize=DETAILS_SIZE, color=DETAILS_COLOUR, gid=_DETAILS))


def log_axis(ax: Axes, which: Literal["x", "y"] = "x") -> None:
    """Put ``ax``'s ``which`` axis on a log scale labelled in plain numbers
    (0.05, 0.1, 0.2 ...; powers of ten as ``10^k`` from 10^5): ticks at 1, 2 and
    5 of each decade when the data span at most :data:`FEW_DECADES` decades,
    else at the powers of ten only; no labels on the minor ticks.  Call it
    after drawing the data."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    lo, hi = sorted(axis.get_data_interval())
    wide = not (lo > 0 and math.isfinite(hi)) or math.log10(hi / lo) > FEW_DECADES
    axis.set_major_locator(LogLocator(base=10, subs=(1.0,) if wide else (1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(plain))
    axis.set_minor_formatter(NullFormatter())


def plain(value: float, _: Any = None) -> str:
    """A log axis's tick label: the number as written from 0.001 to 10000,
    else a power of ten as ``10^k``."""
    if value <= 0:
        return ""
    if 1e-3 <= value < 1e5:
        return f"{value:g}"
    power = math.log10(value)
    return f"$10^{{{round(power)}}}$" if abs(power - round(power)) < 1e-9 else f"{value:.0e}"


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
