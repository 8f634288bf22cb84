"""What serving costs (docs/model.md §7.8, item 3): dollars per hour and per million tokens.

With ``K`` engines of ``tp`` GPUs each at ``price`` dollars per GPU-hour serving
``rate`` requests per second of mean ``m_p`` prompt and ``m_d`` output tokens,
a share ``A`` of them good::

    per_hour                = K tp price
    per_million_output      = per_hour / (rate m_d 3600) 1e6
    per_million_total       = per_hour / (rate (m_p + m_d) 3600) 1e6
    per_million_good_output = per_hour / (rate A m_d 3600) 1e6

For ``plan`` (one engine) use ``engines=1`` and ``rate`` = the goodput.  Prices
are the user's (Vidur's examples, CoreWeave Feb 2024: H100 4.25, A100 2.21,
A40 1.28 $/GPU-hour).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmqueue.common import validation

#: Seconds per hour.
HOUR = 3600.0
#: Tokens per million.
MILLION = 1e6


@dataclass(frozen=True)
class Cost:
    """Dollars per hour and per million tokens (output, prompt + output, good
    output); ``per_million_good_output`` is +inf when no request is good."""

    per_hour: float
    per_million_output: float
    per_million_total: float
    per_million_good_output: float

    @classmethod
    def of(cls, engines: int, tp: int, price_per_gpu_hour: float, rate: float,
           mean_prefill: float, mean_decode: float, attainment: float = 1.0) -> "Cost":
        """The cost of ``engines`` engines of ``tp`` GPUs at ``price_per_gpu_hour``
        dollars serving ``rate`` requests/s of mean ``mean_prefill`` prompt and
        ``mean_decode`` output tokens, a share ``attainment`` in [0, 1] good."""
        validation.positive_int("engines", engines)
        validation.positive_int("tp", tp)
        validation.nonnegative_number("price_per_gpu_hour", price_per_gpu_hour)
        validation.positive_number("rate", rate)
        validation.nonnegative_number("mean_prefill", mean_prefill)
        validation.positive_number("mean_decode", mean_decode)
        validation.fraction("attainment", attainment)
        per_hour = engines * tp * price_per_gpu_hour

        def per_million(tokens_per_s: float) -> float:
            if tokens_per_s == 0:
                return math.inf
            return per_hour / (tokens_per_s * HOUR) * MILLION
        return cls(per_hour, per_million(rate * mean_decode),
                   per_million(rate * (mean_prefill + mean_decode)),
                   per_million(rate * attainment * mean_decode))
