"""The backlog drift estimate: exact on lines, calibrated on random walks."""

import numpy as np
import pytest

import llmqueue as q
from llmqueue.theory.drift import edge_slope, window_times


def test_window_edges_cut_the_second_half_evenly():
    assert window_times(1000, 4) == [500, 625, 750, 875, 1000]


def test_a_straight_line_has_its_slope_and_no_error():
    edges = window_times(10**11)  # 100 s
    slope, se = edge_slope(edges, [7 + 3 * e / 1e9 for e in edges])
    assert slope == pytest.approx(3.0) and se == pytest.approx(0.0, abs=1e-9)


def test_the_error_is_calibrated_on_a_random_walk_with_drift():
    # increments N(2, 1) per second: the slope's true sd over 50 s is 1/sqrt(50)
    rng = np.random.default_rng(3)
    edges = window_times(100 * 10**9)
    z = []
    for _ in range(400):
        walk = np.concatenate([[0.0], np.cumsum(rng.normal(2.0, 1.0, 100))])
        values = [walk[e // 10**9] for e in edges]
        slope, se = edge_slope(edges, values)
        z.append((slope - 2.0) / se)
    # t with 9 degrees of freedom: sd = sqrt(9/7) = 1.13
    assert np.std(z) == pytest.approx(np.sqrt(9 / 7), rel=0.15)


def test_point_c_drift_matches_the_throughput_deficit():
    s = q.simulate(q.renewal(0.4675, 290, 990), "fastertransformer", horizon=1000).summary
    # FasterTransformer-128 serves one request at a time: about 1280 tokens per
    # 3 prefill + 990 decode iterations, while 1280 tokens arrive per 0.4675 s
    served = 1280 / (2 * 0.04675 + 0.04675 + 990 * 0.04675)
    assert s["backlog_slope"] == pytest.approx(1280 / 0.4675 - served, rel=0.01)
    stable = q.simulate(q.renewal(0.4675, 290, 990), "sarathi", horizon=1000).summary
    assert abs(stable["backlog_slope"]) < 5
