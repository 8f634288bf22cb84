"""llmqueue: a SimPy queueing model of how LLM inference servers schedule work."""

from .arrivals import Gamma, Poisson, Renewal, TraceTimes
from .engine import Engine, Stalled
from .fit import fit_linear, fit_staircase, read_samples
from .latency import Constant, Interpolated, LatencyModel, Linear, Staircase, StepModel
from .policies import (ClassPriority, FasterTransformer, Orca, Policy, Sarathi, VLLM,
                       WholePrefill, make_policy, policy_names, register_policy)
from .sizes import Empirical, Fixed, LogNormal, Mixture, PoissonSize, UniformInt
from .traces import Trace, read_trace
from .simulate import Result, simulate
from .state import Plan, Resident, make_view
from .workload import Arrival, Workload, compose, from_list, poisson, read_csv, renewal

__all__ = [
    "Arrival", "ClassPriority", "Constant", "Engine", "FasterTransformer", "LatencyModel",
    "Orca", "Plan", "Policy", "Resident", "Result", "Sarathi", "Stalled", "Staircase", "VLLM",
    "Workload", "from_list", "make_policy", "make_view", "poisson", "policy_names",
    "read_csv", "register_policy", "renewal", "simulate",
    # workloads, latency models and fitting (issue 4)
    "Empirical", "Fixed", "Gamma", "Interpolated", "Linear", "LogNormal", "Mixture",
    "Poisson", "PoissonSize", "StepModel", "Trace", "TraceTimes", "UniformInt",
    "Renewal", "WholePrefill", "compose", "fit_linear", "fit_staircase", "read_samples",
    "read_trace",
]
__version__ = "0.1.0"
