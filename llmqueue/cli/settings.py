"""The ``KEY=VALUE`` options of the commands (``--set``, a sweep's ``--grid``), read one way."""

from __future__ import annotations

from typing import Dict, Optional, Sequence


def pairs(given: Sequence[str], option: str = "--set") -> Dict[str, str]:
    """``KEY=VALUE`` texts of ``option`` as a dict (spaces around each part
    dropped; a later key wins)."""
    out: Dict[str, str] = {}
    for pair in given:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{option} takes KEY=VALUE; got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def overrides(given: Sequence[str], scheduler: Optional[str]) -> Dict[str, str]:
    """The ``--set KEY=VALUE`` pairs as a dict, with ``--scheduler`` as the
    ``scheduler`` key (given both ways, they must agree)."""
    out = pairs(given)
    if scheduler is not None:
        if out.get("scheduler", scheduler) != scheduler:
            raise ValueError(f"scheduler given twice: --scheduler {scheduler} and --set "
                             f"scheduler={out['scheduler']}; give it once")
        out["scheduler"] = scheduler
    return out
