"""llmqueue: a SimPy queueing model of how LLM inference servers schedule work."""

from .engine import Engine, Stalled
from .latency import Constant, LatencyModel, Staircase
from .policies import (ClassPriority, FasterTransformer, Orca, Policy, Sarathi, VLLM,
                       make_policy, policy_names, register_policy)
from .simulate import Result, simulate
from .state import Plan, Resident, make_view
from .workload import Arrival, Workload, from_list, poisson, read_csv, renewal

__all__ = [
    "Arrival", "ClassPriority", "Constant", "Engine", "FasterTransformer", "LatencyModel",
    "Orca", "Plan", "Policy", "Resident", "Result", "Sarathi", "Stalled", "Staircase", "VLLM",
    "Workload", "from_list", "make_policy", "make_view", "poisson", "policy_names",
    "read_csv", "register_policy", "renewal", "simulate",
]
__version__ = "0.1.0"
