"""K engines behind a router (SPEC 6.3): capacity scales with K; the router matters."""

import numpy as np
import pytest

from llmqueue.experiments import parallel
from llmqueue.models.latency import Staircase

CAPACITY = 512 / Staircase().tokens_time(512)   # tokens/s of one engine at bmax = 512


def params(**over):
    return {**parallel.EXPERIMENT.resolve({}), **over}


def backlog_slope(result, start):
    """Least-squares slope (tokens/s) of the backlog sampled every second after ``start``."""
    t, _, backlog = result.timeseries()
    grid = np.arange(start, t[-1], 1.0)
    values = backlog[np.searchsorted(t, grid, side="right") - 1]
    return np.polyfit(grid, values, 1)[0]


@pytest.mark.parametrize("k", [1, 2, 4])
def test_capacity_scales_with_k(k):
    """Fixed 100 + 100 tokens (SPEC 6.2's case).  At 1.25 of the K-engine
    lambda* the engines serve K * bmax / t_bmax tokens/s, and the backlog grows
    at the fluid rate 0.25 * K * bmax / t_bmax (SPEC 6.2) within four standard
    errors of a least-squares slope of a compound Poisson walk,
    sqrt(6 * lambda * 200**2 / (5 * L)) over L seconds; at 0.8 it is flat."""
    horizon, start = 150.0, 30.0
    p = params(engines=k, sizes="fixed", vp=100, vd=100, router="jsq-tokens")
    assert parallel.arrival_rate({**p, "load": 1.0}) == pytest.approx(k * 16.71, rel=1e-3)
    under = parallel.simulate_router({**p, "load": 0.8}, "jsq-tokens", horizon, seed=k).total
    over = parallel.simulate_router({**p, "load": 1.25}, "jsq-tokens", horizon, seed=k).total
    fluid = 0.25 * k * CAPACITY
    rate = parallel.arrival_rate({**p, "load": 1.25})
    error = np.sqrt(6 * rate * 200**2 / (5 * (horizon - start)))
    assert over.summary["throughput_tokens_per_s"] == pytest.approx(k * CAPACITY, rel=0.02)
    assert abs(backlog_slope(over, start) - fluid) < 4 * error
    assert abs(backlog_slope(under, start)) < 4 * error


def test_jsq_tokens_holds_a_smaller_backlog_than_random_at_high_load():
    """Four engines at 95% of lambda*, geometric sizes: on every seed the
    token-aware router holds under 3/4 of random routing's mean backlog
    (measured ratio 0.48 to 0.61 on these seeds)."""
    p = params()
    for seed in (0, 1, 2):
        jsq = parallel.simulate_router(p, "jsq-tokens", 300.0, seed).total.summary
        rnd = parallel.simulate_router(p, "random", 300.0, seed).total.summary
        assert jsq["backlog_mean"] < 0.75 * rnd["backlog_mean"]
        assert jsq["ttft_p99"] < rnd["ttft_p99"]
