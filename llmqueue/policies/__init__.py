"""Scheduling policies (docs/model.md §3): pure rules from what a policy sees (a
:class:`View` of the residents) and a token budget to one iteration's
:class:`Plan`, or :data:`IDLE` (WAIT, docs/model.md §6.5, in :mod:`~llmqueue.policies.wait`).
Testable without a simulation.  Imports :mod:`llmqueue.common` and
:mod:`llmqueue.models` (a policy may read the latency model)."""

from llmqueue.policies.builtin import (BUILTIN, VLLM, ClassPriority, FasterTransformer,
                                       FunctionPolicy, Orca, Policy, Sarathi, StepFill,
                                       WholePrefill, make_policy, policy_names, register_policy,
                                       take_decodes, take_prefill)
from llmqueue.policies.view import (IDLE, Plan, Request, SimpleView, View, holds_kv,
                                    is_draining, make_request, make_view, population, processed)
from llmqueue.policies.wait import Wait, by_size

__all__ = ["BUILTIN", "ClassPriority", "FasterTransformer", "FunctionPolicy", "IDLE", "Orca",
           "Plan", "Policy", "Request", "Sarathi", "SimpleView", "StepFill", "VLLM", "View",
           "WholePrefill", "make_policy", "make_view", "policy_names", "population",
           "register_policy", "take_decodes", "take_prefill", "Wait", "by_size",
           "holds_kv", "is_draining", "make_request", "processed"]
