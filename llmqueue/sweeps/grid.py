"""Parameter grids: which runs a sweep makes, and the seed of each.

A grid maps scenario parameters (and ``scheduler``) to lists of values; the
runs are every combination of them, times the replicates.  Each run's seed
comes from a SHA-256 hash of the base seed, the run's resolved parameters
(canonical JSON, keys sorted) and its replicate index, so it never depends on
which other points the grid holds, on the order of keys, or on the process.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from typing import Dict, List, Mapping, Protocol, Sequence, Tuple

from llmqueue.common import limits
from llmqueue.common.params import Param

#: Parameters left out of the seed: runs that differ only in these see the
#: same random arrivals (common random numbers), so schedulers are compared
#: on identical workloads.
COMMON = ("scheduler",)
#: Most values one ``START:STOP:STEP`` range may give.
MAX_POINTS = 10_000


def expand(grid: Mapping[str, Sequence[object]]) -> List[Dict[str, object]]:
    """Every combination of the grid's values, the last key varying fastest
    (at most :data:`~llmqueue.common.limits.MAX_RUNS`)."""
    limits.check_runs(math.prod(len(values) for values in grid.values()))
    keys = list(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*grid.values())]


def run_seed(base_seed: int, params: Mapping[str, object], replicate: int) -> int:
    """The seed (an integer in [0, 2**63)) of replicate ``replicate`` of the run
    with ``params``; parameters named in :data:`COMMON` do not enter it."""
    shown = {k: v for k, v in params.items() if k not in COMMON}
    text = json.dumps({"base": base_seed, "params": shown, "replicate": replicate},
                      sort_keys=True, separators=(",", ":"), default=str)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


class Parametrized(Protocol):
    """Anything with a name and typed parameters (an experiment)."""

    @property
    def name(self) -> str: ...

    @property
    def params(self) -> Mapping[str, Param]: ...


def check(scenario: Parametrized, grid: Mapping[str, Sequence[object]]
          ) -> Dict[str, List[object]]:
    """The grid with each key checked against ``scenario``'s parameters and each
    value read as that parameter's type (text or a Python value)."""
    out: Dict[str, List[object]] = {}
    for key, values in grid.items():
        param = scenario.params.get(key)
        if param is None:
            raise ValueError(f"grid {key}: {scenario.name} has no parameter {key!r}; "
                             f"allowed: {', '.join(scenario.params)}")
        if isinstance(values, (str, bytes)) or not len(values):
            raise ValueError(f"grid {key}: needs a non-empty list of values; got {values!r}")
        parsed = [param.parse(f"grid {key}", _text(v)) for v in values]
        out[key] = list(dict.fromkeys(parsed))  # 1, 1.0 and 1e0 are one point
    return out


def parse(scenario: Parametrized, spec: str) -> Tuple[str, List[object]]:
    """One ``--grid`` option: ``KEY=V1,V2,...`` or ``KEY=START:STOP:STEP``
    (``STOP`` included when the steps land on it)."""
    key, sep, text = spec.partition("=")
    key, text = key.strip(), text.strip()
    if not sep or not key or not text:
        raise ValueError(f"--grid takes KEY=V1,V2,... or KEY=START:STOP:STEP; got {spec!r}")
    if key not in scenario.params:
        raise ValueError(f"grid {key}: {scenario.name} has no parameter {key!r}; "
                         f"allowed: {', '.join(scenario.params)}")
    if ":" in text and "," not in text and (scenario.params[key].kind != "custom"
                                            or _numbers(text)):
        return key, _range(scenario, key, text)
    items = [item.strip() for item in text.split(",")]
    if "" in items:
        raise ValueError(f"grid {key}: empty value in {text!r}")
    return key, check(scenario, {key: items})[key]


def _numbers(text: str) -> bool:
    """Whether ``text`` is ``START:STOP:STEP`` in numbers (a range, not a law's
    text such as ``uniform:10:20``)."""
    try:
        return len([float(part) for part in text.split(":")]) == 3
    except ValueError:
        return False


def _takes(param: Param, text: str) -> bool:
    """Whether a custom parameter reads ``text`` (a number) as a value."""
    try:
        param.parse("", text)
    except ValueError:
        return False
    return True


def _range(scenario: Parametrized, key: str, text: str) -> List[object]:
    kind = scenario.params[key].kind
    parts = text.split(":")
    if kind == "custom" and _takes(scenario.params[key], parts[0]):
        kind = "int"  # whole numbers, e.g. fixed sizes of a size law
    if len(parts) != 3 or kind not in ("int", "int-or-none", "float", "float-or-none"):
        raise ValueError(f"grid {key}: START:STOP:STEP needs three numbers and a numeric "
                         f"parameter; got {text!r}")
    try:
        start, stop, step = (float(p) for p in parts)
    except ValueError:
        raise ValueError(f"grid {key}: START:STOP:STEP needs three numbers; "
                         f"got {text!r}") from None
    if not all(math.isfinite(x) for x in (start, stop, step)):
        raise ValueError(f"grid {key}: START:STOP:STEP needs finite numbers; got {text!r}")
    if step <= 0:
        raise ValueError(f"grid {key}: STEP must be > 0; got {parts[2]!r}")
    if stop < start:
        raise ValueError(f"grid {key}: empty range {text!r} (STOP below START)")
    count = math.floor((stop - start) / step + 1e-9) + 1
    if count > MAX_POINTS:
        raise ValueError(f"grid {key}: {text!r} has {count} values; at most {MAX_POINTS} "
                         f"per key")
    if kind.startswith("int"):
        try:
            first, stride = int(parts[0]), int(parts[2])
        except ValueError:
            raise ValueError(f"grid {key}: an integer parameter needs integer START and "
                             f"STEP; got {text!r}") from None
        return [first + i * stride for i in range(count)]
    return [float(f"{start + i * step:.12g}") for i in range(count)]


def _text(value: object) -> str:
    """A value as the text :meth:`Param.parse` reads."""
    return "none" if value is None else str(value)
