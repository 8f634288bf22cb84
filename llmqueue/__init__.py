"""llmqueue: a SimPy queueing model of how LLM inference servers schedule work.

``import llmqueue as q`` gives the main API: one engine (:func:`simulate`),
workloads with their arrival and size laws, latency models and fitting,
scheduling policies, hardware latency models (:mod:`llmqueue.hardware`: GPUs,
model shapes, the roofline, KV capacity), many engines on one clock
(:class:`Network`, routers, request classes, agent workflows), and the
subpackages :mod:`llmqueue.theory` (capacity and stability in closed form) and
:mod:`llmqueue.sweeps` (parameter sweeps; ``q.sweeps.sweep(...)``).  The layers
are described in ``docs/architecture.md``; importing this package loads neither
matplotlib nor the experiments.
"""

from llmqueue import sweeps, theory
from llmqueue.engine import KV, Diverged, Engine, RequestIgnored, Result, Stalled, simulate
from llmqueue.hardware import GPU, Efficiency, ModelShape, Roofline, gpu, kv_capacity, model
from llmqueue.models import (Arrival, ArrivalLaw, Constant, Empirical, Fixed, Gamma, Geometric,
                             Interpolated, LatencyModel, Linear, LogNormal, Mixture, Poisson,
                             PoissonSize, PrefixGroups, Renewal, Sessions, SizeLaw, Staircase,
                             StepModel, Trace, TraceTimes, UniformInt, Workload, compose,
                             from_list, offline, poisson, read_csv, read_trace, renewal,
                             tokens_time)
from llmqueue.network import (JSQ, JobContext, JSQTokens, Network, NetworkResult, PowerOfTwo,
                              RandomRouter, RequestClass, RoundRobin, Router, by_class,
                              class_stream, job_summary, make_router, router_names, start_jobs)
from llmqueue.planning import EngineSpec, Traffic, plan, plan_engines
from llmqueue.policies import (VLLM, ClassPriority, FasterTransformer, Orca, Plan, Policy, Request,
                               Sarathi, StepFill, Wait, WholePrefill, make_policy, make_view,
                               policy_names, register_policy)
from llmqueue.theory.fit import fit_linear, fit_staircase, read_samples
from llmqueue.theory.memory import (kv_area, kv_bytes_per_token, kv_capacity_tokens, lambda_joint,
                                    mu_mem)
from llmqueue.theory.prefix import che_hit_ratio, ideal_hit_ratio, lambda_star_cached
from llmqueue.theory.wait import wait_thresholds
from llmqueue.theory.slo import SLO

__all__ = [
    "Arrival", "ArrivalLaw", "ClassPriority", "Constant", "Diverged", "Efficiency", "Empirical",
    "Engine", "EngineSpec", "FasterTransformer", "Fixed", "GPU", "Gamma", "Geometric",
    "Interpolated", "JSQ", "JSQTokens", "JobContext", "KV", "LatencyModel", "Linear",
    "LogNormal", "Mixture", "ModelShape", "Network", "NetworkResult", "Orca", "Plan", "Poisson",
    "PoissonSize", "Policy", "PowerOfTwo", "PrefixGroups", "RandomRouter", "Renewal", "Request",
    "RequestClass", "RequestIgnored", "Result", "Roofline", "RoundRobin", "Router", "SLO",
    "Sarathi", "Sessions", "SizeLaw", "Staircase", "Stalled", "StepFill", "StepModel", "Trace",
    "TraceTimes", "Traffic", "UniformInt", "VLLM", "Wait", "WholePrefill", "Workload",
    "by_class", "che_hit_ratio", "class_stream", "compose", "fit_linear", "fit_staircase",
    "from_list", "gpu", "ideal_hit_ratio", "job_summary", "kv_area", "kv_bytes_per_token",
    "kv_capacity", "kv_capacity_tokens", "lambda_joint", "lambda_star_cached", "make_policy",
    "make_router", "make_view", "model", "mu_mem", "offline", "plan", "plan_engines", "poisson",
    "policy_names", "read_csv", "read_samples", "read_trace", "register_policy", "renewal",
    "router_names", "simulate", "start_jobs", "sweeps", "theory", "tokens_time",
    "wait_thresholds",
]
__version__ = "0.2.0"
