"""Tidy tables as pandas DataFrames, for those who have pandas.

pandas is an optional extra (``pip install "llmqueue[frames]"``): the
simulator never needs it, and a call that does says so by name when it is
missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:  # pragma: no cover
    import pandas


def frame(rows: Sequence[Mapping[str, Any]], what: str) -> "pandas.DataFrame":
    """``rows`` (one dict per row) as a DataFrame; ``what`` names the caller in
    the ``ImportError`` raised when pandas is not installed."""
    try:
        import pandas
    except ImportError:
        raise ImportError(f"{what} needs pandas, an optional extra: "
                          "pip install \"llmqueue[frames]\" (or pip install pandas)") from None
    return pandas.DataFrame(list(rows))
