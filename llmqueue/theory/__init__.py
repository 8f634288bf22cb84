"""Closed-form theory and statistics: token capacity and Theorem 2
(:mod:`~llmqueue.theory.capacity`), stability verdicts, backlog drift, the
batch-size-limit region (Theorem 10), latency fitting and confidence
intervals, KV-cache memory capacity (:mod:`~llmqueue.theory.memory`), SLOs and
attainment (:mod:`~llmqueue.theory.slo`, :mod:`~llmqueue.theory.histogram`), the
analytic bounds computed before any simulation (:mod:`~llmqueue.theory.bounds`),
batch shapes and how Theorem 2 reads a context model (:mod:`~llmqueue.theory.shapes`)
and serving cost (:mod:`~llmqueue.theory.cost`).
Imports :mod:`llmqueue.common` and :mod:`llmqueue.models`."""

from llmqueue.theory.bounds import (Bounds, TokenBound, ZeroLoad, memory_bound, slot_bound,
                                    smallest_iteration, token_bound, unloaded_latency,
                                    zero_load)
from llmqueue.theory.capacity import (batch_demand, fluid_slope, is_work_conserving, lambda_star,
                                      littles_law, load, peak_token_rate, token_capacity)
from llmqueue.theory.cost import Cost
from llmqueue.theory.histogram import GapHistogram
from llmqueue.theory.memory import (JointCapacity, b_star, delta, envelope_time, kv_area,
                                    kv_area_blocks, kv_area_min, kv_bytes_per_token,
                                    kv_capacity_tokens, lambda_joint, lambda_kmax, mean_kv_area,
                                    mu_mem, mu_mix)
from llmqueue.theory.prefix import (Che, che, che_characteristic_time, che_hit_ratio,
                                    ideal_hit_ratio, ideal_hits, lambda_star_cached,
                                    prefix_gain, zipf_popularity)
from llmqueue.theory.shapes import MeanContext, at_mean_context, shape_time
from llmqueue.theory.wait import lambda_wait, nested_wait_quotas, wait_thresholds
from llmqueue.theory.slo import (SLO, Attainment, RequestLatency, Unloaded, attainment,
                                 good_throughput)

__all__ = ["Attainment", "Bounds", "Che", "Cost", "GapHistogram", "JointCapacity", "MeanContext",
           "RequestLatency", "SLO", "TokenBound", "Unloaded", "ZeroLoad", "at_mean_context",
           "attainment", "b_star", "batch_demand", "che", "che_characteristic_time",
           "che_hit_ratio", "delta", "envelope_time", "fluid_slope", "good_throughput",
           "ideal_hit_ratio", "ideal_hits", "is_work_conserving", "kv_area", "kv_area_blocks",
           "kv_area_min", "kv_bytes_per_token", "kv_capacity_tokens", "lambda_joint",
           "lambda_kmax", "lambda_star", "lambda_star_cached", "lambda_wait", "littles_law",
           "load", "mean_kv_area", "memory_bound", "mu_mem", "mu_mix", "nested_wait_quotas",
           "peak_token_rate", "prefix_gain", "shape_time", "slot_bound", "smallest_iteration",
           "token_bound", "token_capacity", "unloaded_latency", "wait_thresholds", "zero_load",
           "zipf_popularity"]
