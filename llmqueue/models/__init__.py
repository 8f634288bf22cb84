"""Models of the world outside the scheduler: iteration latency, request sizes,
arrival processes, workloads and real traces.  Imports :mod:`llmqueue.common`
only."""

from llmqueue.models.arrivals import (ArrivalLaw, Gamma, Poisson, Renewal, TraceTimes, arrival_law,
                                      parse_arrival)
from llmqueue.models.latency import (Constant, Interpolated, LatencyModel, Linear, Staircase,
                                     StepModel, tokens_time)
from llmqueue.models.prefixes import PrefixGroups, zipf_popularity
from llmqueue.models.sessions import Session, Sessions, Turn
from llmqueue.models.sizes import (Empirical, Fixed, Geometric, LogNormal, Mixture, PoissonSize,
                                   SizeLaw, UniformInt, parse_size)
from llmqueue.models.traces import Trace, read_csv, read_trace
from llmqueue.models.workload import (Arrival, Workload, compose, from_list, offline, poisson,
                                      renewal)

__all__ = ["Arrival", "ArrivalLaw", "Constant", "Empirical", "Fixed", "Gamma", "Geometric",
           "Interpolated", "LatencyModel", "Linear", "LogNormal", "Mixture", "Poisson",
           "PoissonSize", "PrefixGroups", "Renewal", "Session", "Sessions", "SizeLaw",
           "Staircase", "StepModel", "Trace", "TraceTimes", "Turn", "UniformInt", "Workload",
           "arrival_law", "compose", "from_list", "offline", "parse_arrival", "parse_size",
           "poisson", "read_csv", "read_trace", "renewal", "tokens_time", "zipf_popularity"]
