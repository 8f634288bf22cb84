"""Plain-text tables of run summaries."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

#: (summary key, column title, format) of the default table.
COLUMNS: List[Tuple[str, str, str]] = [
    ("pending_mean", "pending mean", "{:.1f}"),
    ("pending_max", "pending max", "{:d}"),
    ("pending_final", "final", "{:d}"),
    ("decode_batch_mean", "decode batch", "{:.1f}"),
    ("mixed_fraction", "mixed", "{:.0%}"),
    ("decode_only_fraction", "decode-only", "{:.0%}"),
    ("prefill_only_fraction", "prefill-only", "{:.0%}"),
    ("throughput_tokens_per_s", "tokens/s", "{:.0f}"),
    ("completed", "done", "{:d}"),
]


def cell(value: object, fmt: str) -> str:
    """One formatted cell; ``-`` where a figure is undefined."""
    return "-" if value is None else fmt.format(value)


def table(rows: Sequence[Dict[str, Any]],
          columns: Sequence[Tuple[str, str, str]] = COLUMNS) -> str:
    """Rows (with a ``label``) as an aligned text table."""
    header = ["row"] + [title for _, title, _ in columns]
    body = [[str(r["label"])] + [cell(r.get(key), fmt) for key, _, fmt in columns]
            for r in rows]
    widths = [max(len(line[i]) for line in [header] + body) for i in range(len(header))]
    lines = [header, ["-" * w for w in widths]] + body
    return "\n".join("  ".join(text.ljust(w) if i == 0 else text.rjust(w)
                               for i, (text, w) in enumerate(zip(line, widths)))
                     for line in lines)
