"""The experiments the CLI can run, by name."""

from .base import REGISTRY, Param, Scenario, register
# importing a scenario module registers it
from . import point_c, single, trace  # noqa: F401
from . import azure, blowup, kmax_region, sarathi_demo, theorem2, vertex_c  # noqa: F401
from . import agents, disaggregated, parallel, rybko_stolyar  # noqa: F401

__all__ = ["REGISTRY", "Param", "Scenario", "register"]
