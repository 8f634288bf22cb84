"""Closed-form theory and statistics: token capacity and Theorem 2
(:mod:`~llmqueue.theory.capacity`), stability verdicts, backlog drift, the
batch-size-limit region (Theorem 10), latency fitting and confidence
intervals, and KV-cache memory capacity (:mod:`~llmqueue.theory.memory`).
Imports :mod:`llmqueue.common` and :mod:`llmqueue.models`."""

from llmqueue.theory.capacity import (batch_demand, fluid_slope, is_work_conserving, lambda_star,
                                      littles_law, load, peak_token_rate, token_capacity)
from llmqueue.theory.memory import (JointCapacity, b_star, delta, envelope_time, kv_area,
                                    kv_area_blocks, kv_area_min, kv_bytes_per_token,
                                    kv_capacity_tokens, lambda_joint, lambda_kmax, lambda_wait,
                                    mean_kv_area, mu_mem, mu_mix, wait_thresholds)

__all__ = ["JointCapacity", "b_star", "batch_demand", "delta", "envelope_time",
           "fluid_slope", "is_work_conserving", "kv_area", "kv_area_blocks", "kv_area_min",
           "kv_bytes_per_token", "kv_capacity_tokens", "lambda_joint", "lambda_kmax",
           "lambda_star", "lambda_wait", "littles_law", "load", "mean_kv_area", "mu_mem",
           "mu_mix", "peak_token_rate", "token_capacity", "wait_thresholds"]
