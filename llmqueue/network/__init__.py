"""Many engines on one clock: networks and pools of engines, routers (the
cache-aware ones of docs/model.md §8.6 too), request classes and agent workflows
(docs/model.md §9.3-9.4).  Imports the engine and the layers below it."""

from llmqueue.network.classes import RequestClass, by_class, class_stream
from llmqueue.network.network import Network, NetworkResult
from llmqueue.network.routers import (JSQ, JSQTokens, PowerOfTwo, PrefixAffinity, PrefixScore,
                                      RandomRouter, RoundRobin, Router, SessionSticky,
                                      make_router, router_names)
from llmqueue.network.workflows import JobContext, job_summary, start_jobs

__all__ = ["JSQ", "JSQTokens", "JobContext", "Network", "NetworkResult", "PowerOfTwo",
           "PrefixAffinity", "PrefixScore", "RandomRouter", "RequestClass", "RoundRobin",
           "Router", "SessionSticky", "by_class", "class_stream", "job_summary", "make_router",
           "router_names", "start_jobs"]
