"""The ``--set KEY=VALUE`` options of ``run`` and ``capacity``, read once."""

from __future__ import annotations

from typing import Dict, Optional, Sequence


def overrides(pairs: Sequence[str], scheduler: Optional[str]) -> Dict[str, str]:
    """The ``--set KEY=VALUE`` pairs as a dict, with ``--scheduler`` as the
    ``scheduler`` key (given both ways, they must agree)."""
    out: Dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set takes KEY=VALUE; got {pair!r}")
        out[key.strip()] = value.strip()
    if scheduler is not None:
        if out.get("scheduler", scheduler) != scheduler:
            raise ValueError(f"scheduler given twice: --scheduler {scheduler} and --set "
                             f"scheduler={out['scheduler']}; give it once")
        out["scheduler"] = scheduler
    return out
