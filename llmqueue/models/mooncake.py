"""One line of a Mooncake trace (docs/model.md §8.5; Mooncake FAST'25 release).

A Mooncake trace is JSON Lines: one object a line,
``{"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...]}``
(milliseconds from the trace's start, prompt and output tokens, and the
prompt's chained block hashes remapped to integers, one per 512 tokens, the
last one possibly covering a partial block).  :func:`parse_line` reads one;
:func:`llmqueue.models.traces.read_trace` reads the file (its size limit,
blank lines, the file and line of an error, ``zero_decode``).
"""

from __future__ import annotations

import json
from typing import Any, Tuple

from llmqueue.common import validation
from llmqueue.common.units import MAX_SECONDS

#: The tokens per hash id of Mooncake's traces.
HASH_BLOCK = 512
#: The keys every line must have.
KEYS = ("timestamp", "input_length", "output_length", "hash_ids")


def parse_line(text: str) -> Tuple[float, int, int, Tuple[int, ...]]:
    """``(seconds, prompt tokens, output tokens, hash ids)`` of one line, or a
    one-line ValueError saying what is wrong with it (without the file and
    line, which the caller adds).  Keys other than :data:`KEYS` are ignored;
    a whole-valued float length (``12.0``) is taken as an integer.

    Examples:
        >>> parse_line('{"timestamp": 1500, "input_length": 1030, "output_length": 7, '
        ...            '"hash_ids": [0, 1, 2]}')
        (1.5, 1030, 7, (0, 1, 2))
    """
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise ValueError("not valid JSON (nested too deeply)") from None
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object with {', '.join(KEYS)}, got "
                         f"{type(row).__name__} {validation.shown(row)}")
    missing = [key for key in KEYS if key not in row]
    if missing:
        raise ValueError(f"missing key {missing[0]!r} (a line needs {', '.join(KEYS)})")
    stamp = row["timestamp"]
    if not validation.is_number(stamp) or not 0 <= stamp <= MAX_SECONDS * 1000:
        raise ValueError(f"timestamp must be a number of milliseconds from 0 to "
                         f"{MAX_SECONDS * 1000:g}, got {validation.shown(stamp)}")
    ids = row["hash_ids"]
    if not isinstance(ids, list) or not all(type(i) is int for i in ids):
        raise ValueError(f"hash_ids must be a list of integers, got {validation.shown(ids)}")
    return (stamp / 1000, _tokens("input_length", row["input_length"]),
            _tokens("output_length", row["output_length"]), tuple(ids))


def _tokens(name: str, value: Any) -> int:
    """``value`` as a token count: an int, or a float with a whole value."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return validation.token_count(name, value)
