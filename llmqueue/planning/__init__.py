"""Capacity planning (docs/model.md §7.7-7.9): :func:`plan` finds the goodput of an
engine (the largest arrival rate whose SLO attainment reaches a target) by
replicated, seeded simulation after the analytic bounds of docs/model.md §7.6;
:func:`plan_engines` finds the fewest engines behind a router for a rate, and
what they cost.  :class:`EngineSpec` and :class:`Traffic` describe the engine
and the unit-rate workload; :func:`diagnose` says how its requests fit the
engine's KV cache (:class:`Fit`) before any simulation."""

from llmqueue.planning.engines import EnginesResult, plan_engines
from llmqueue.planning.fit import Fit, diagnose
from llmqueue.planning.plan import PlanResult, plan
from llmqueue.planning.probe import Probe
from llmqueue.models.sizes import parse_size
from llmqueue.planning.spec import EngineSpec, Traffic, arrival_cv

__all__ = ["EngineSpec", "EnginesResult", "Fit", "PlanResult", "Probe", "Traffic", "arrival_cv",
           "diagnose", "parse_size", "plan", "plan_engines"]
