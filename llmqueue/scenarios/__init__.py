"""The experiments the CLI can run, by name."""

from .base import REGISTRY, Param, Scenario, register
from . import point_c, single, trace  # noqa: F401  (registers them)
from . import agents, disaggregated, parallel, rybko_stolyar  # noqa: F401  (issue 7)

__all__ = ["REGISTRY", "Param", "Scenario", "register"]
