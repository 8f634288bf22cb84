"""What a scenario is: named parameters with types and defaults, and a function
that turns them into labelled runs.  The CLI and the scripts share these."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from llmqueue.models.latency import Staircase
from llmqueue.engine.results import Result
from llmqueue.engine.simulate import simulate
from llmqueue.models.workload import Workload

Rows = List[Tuple[str, Result]]


@dataclass(frozen=True)
class Param:
    """One ``--set`` parameter: its type, default and meaning."""

    kind: str  # "int", "int-or-none", "float", "float-or-none", "bool", "str"
    default: object
    help: str
    choices: Tuple[str, ...] = ()

    def parse(self, name: str, text: str) -> object:
        """Read ``text`` as this parameter's type, or raise ``ValueError``."""
        try:
            if self.kind == "int-or-none":
                return None if text.lower() == "none" else _int(text)
            if self.kind == "int":
                return _int(text)
            if self.kind in ("float", "float-or-none"):
                if self.kind == "float-or-none" and text.lower() == "none":
                    return None
                value = float(text)
                if value != value or value in (float("inf"), float("-inf")):
                    raise ValueError
                return value
            if self.kind == "bool":
                lowered = text.lower()
                if lowered in ("true", "1", "yes", "on"):
                    return True
                if lowered in ("false", "0", "no", "off"):
                    return False
                raise ValueError
        except ValueError:
            raise ValueError(f"{name} must be {_DESCRIBE[self.kind]}; got {text!r}") from None
        if self.choices and text not in self.choices:
            raise ValueError(f"{name} must be one of {', '.join(self.choices)}; got {text!r}")
        return text


_DESCRIBE = {"int": "an integer", "int-or-none": "an integer or none", "float": "a number",
             "float-or-none": "a number or none", "bool": "true or false"}


def _int(text: str) -> int:
    return int(text.replace("_", ""))


#: Parameters of one engine, shared by every single-engine scenario.
ENGINE_PARAMS: Dict[str, Param] = {
    "scheduler": Param("str", "sarathi", "scheduling policy (see `llmqueue list`)"),
    "bmax": Param("int-or-none", 128, "token budget per iteration (none: unlimited)"),
    "kmax": Param("int-or-none", 100, "most resident requests (none: unlimited)"),
    "chunked": Param("bool", True, "split prompts across iterations"),
    "c": Param("float", 0.01128, "staircase constant time per batch (s)"),
    "a": Param("float", 0.03547, "staircase time per step of b0 tokens (s)"),
    "b0": Param("int", 128, "staircase step width (tokens)"),
}


def engine_params(**defaults: object) -> Dict[str, Param]:
    """:data:`ENGINE_PARAMS` with some defaults changed (same types and help),
    e.g. ``engine_params(bmax=512, kmax=None)``."""
    unknown = set(defaults) - set(ENGINE_PARAMS)
    if unknown:
        raise ValueError(f"not engine parameters: {', '.join(sorted(unknown))}; allowed: "
                         f"{', '.join(ENGINE_PARAMS)}")
    return {name: replace(p, default=defaults[name]) if name in defaults else p
            for name, p in ENGINE_PARAMS.items()}


def engine_kwargs(p: Mapping[str, object]) -> Dict[str, object]:
    """Keyword arguments of :func:`llmqueue.simulate` from engine parameters."""
    return {"policy": p["scheduler"], "bmax": p["bmax"], "kmax": p["kmax"],
            "chunked": p["chunked"], "latency": Staircase(p["c"], p["a"], p["b0"])}


def each_scheduler(params: Mapping[str, object], schedulers: Sequence[str],
                   workload: Workload, horizon: Optional[float], **logs: bool) -> Rows:
    """A ``(scheduler, result)`` row for each of ``schedulers`` (or only
    ``params["scheduler"]`` when set), all on ``workload`` with the engine
    parameters of ``params``."""
    names = schedulers if params["scheduler"] is None else (params["scheduler"],)
    return [(str(name), simulate(workload, horizon=horizon,
                                 **engine_kwargs({**params, "scheduler": name}), **logs))
            for name in names]


@dataclass(frozen=True)
class Scenario:
    """A named experiment the CLI can run."""

    name: str
    summary: str
    params: Dict[str, Param]
    run: Callable[..., Rows]
    horizon: Optional[float] = None
    seeded: bool = False
    extra: Dict[str, object] = field(default_factory=dict)

    def resolve(self, overrides: Mapping[str, str]) -> Dict[str, object]:
        """Defaults with ``--set`` overrides parsed and checked."""
        values = {name: p.default for name, p in self.params.items()}
        for name, text in overrides.items():
            if name not in self.params:
                raise ValueError(f"{self.name} has no parameter {name!r}; allowed: "
                                 f"{', '.join(self.params)}")
            values[name] = self.params[name].parse(name, text)
        return values


REGISTRY: Dict[str, Scenario] = {}


def register(scenario: Scenario) -> Scenario:
    """Add ``scenario`` to the CLI's list."""
    REGISTRY[scenario.name] = scenario
    return scenario
