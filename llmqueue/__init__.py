"""llmqueue: a SimPy queueing model of how LLM inference servers schedule work.

``import llmqueue as q`` gives the main API: one engine (:func:`simulate`),
workloads with their arrival and size laws, latency models and fitting,
scheduling policies, many engines on one clock (:class:`Network`, routers,
request classes, agent workflows), and the modules :mod:`~llmqueue.theory`
(capacity and stability in closed form) and :mod:`~llmqueue.sweep`
(parameter sweeps; ``q.sweep.sweep(...)``).
"""

from . import sweep, theory
from .arrivals import ArrivalLaw, Gamma, Poisson, Renewal, TraceTimes
from .classes import RequestClass, by_class, class_stream
from .engine import Engine, Stalled
from .fit import fit_linear, fit_staircase, read_samples
from .latency import (Constant, Interpolated, LatencyModel, Linear, Staircase, StepModel,
                      tokens_time)
from .network import Network, NetworkResult
from .policies import (ClassPriority, FasterTransformer, Orca, Policy, Sarathi, VLLM,
                       WholePrefill, make_policy, policy_names, register_policy)
from .routers import (JSQ, JSQTokens, PowerOfTwo, RandomRouter, RoundRobin, Router,
                      make_router, router_names)
from .simulate import Result, simulate
from .sizes import (Empirical, Fixed, Geometric, LogNormal, Mixture, PoissonSize, SizeLaw,
                    UniformInt)
from .state import Plan, Resident, make_view
from .traces import Trace, read_trace
from .workflows import JobContext, job_summary, start_jobs
from .workload import Arrival, Workload, compose, from_list, poisson, read_csv, renewal

__all__ = [
    "Arrival", "ArrivalLaw", "ClassPriority", "Constant", "Empirical", "Engine",
    "FasterTransformer", "Fixed", "Gamma", "Geometric", "Interpolated", "JSQ", "JSQTokens",
    "JobContext", "LatencyModel", "Linear", "LogNormal", "Mixture", "Network",
    "NetworkResult", "Orca", "Plan", "Poisson", "PoissonSize", "Policy", "PowerOfTwo",
    "RandomRouter", "Renewal", "RequestClass", "Resident", "Result", "RoundRobin", "Router",
    "Sarathi", "SizeLaw", "Staircase", "Stalled", "StepModel", "Trace", "TraceTimes",
    "UniformInt", "VLLM", "WholePrefill", "Workload", "by_class", "class_stream", "compose",
    "fit_linear", "fit_staircase", "from_list", "job_summary", "make_policy", "make_router",
    "make_view", "poisson", "policy_names", "read_csv", "read_samples", "read_trace",
    "register_policy", "renewal", "router_names", "simulate", "start_jobs", "sweep",
    "theory", "tokens_time",
]
__version__ = "0.1.0"
