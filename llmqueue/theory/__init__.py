"""Closed-form theory and statistics: token capacity and Theorem 2
(:mod:`~llmqueue.theory.capacity`), stability verdicts, backlog drift, the
batch-size-limit region (Theorem 10), latency fitting and confidence
intervals.  Imports :mod:`llmqueue.common` and :mod:`llmqueue.models`."""

from llmqueue.theory.capacity import (batch_demand, fluid_slope, is_work_conserving,
                                      lambda_star, littles_law, load, peak_token_rate,
                                      token_capacity)

__all__ = ["batch_demand", "fluid_slope", "is_work_conserving", "lambda_star",
           "littles_law", "load", "peak_token_rate", "token_capacity"]
