"""What a caller may ask of a run besides its parameters: the horizon and seed,
a warm-up to leave out, the logs to keep and a divergence stop.  Experiments
declare which of these they honour (:attr:`RunOptions.asked` names those set)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Dict, FrozenSet, Optional


@dataclass(frozen=True)
class RunOptions:
    """Options of one run; every default means "not asked for"."""

    horizon: Optional[float] = None
    """Simulated seconds (``None``: the experiment's own)."""
    seed: Optional[int] = None
    """Base random seed (``None``: the experiment's own)."""
    warmup: float = 0.0
    """Seconds at the start left out of the summary."""
    batches: bool = False
    """Keep the batch log."""
    requests: bool = False
    """Keep the request log."""
    timeseries: bool = False
    """Keep the pending/backlog series."""
    max_pending: Optional[int] = None
    """Stop once more requests than this are pending (verdict ``diverged``)."""

    def asked(self) -> FrozenSet[str]:
        """The names of the options set away from their defaults."""
        return frozenset(f.name for f in fields(self) if getattr(self, f.name) != f.default)

    def logs(self) -> Dict[str, Any]:
        """The keyword arguments of :func:`llmqueue.simulate` these options set."""
        return {"batches": self.batches, "requests": self.requests,
                "timeseries": self.timeseries, "warmup": self.warmup,
                "max_pending": self.max_pending}


#: Every option, and the ones a single-engine run honours.
ALL_OPTIONS: FrozenSet[str] = frozenset(f.name for f in fields(RunOptions))
#: What a network of engines honours: no warm-up deletion, no divergence stop.
NETWORK_OPTIONS: FrozenSet[str] = ALL_OPTIONS - {"warmup", "max_pending"}
