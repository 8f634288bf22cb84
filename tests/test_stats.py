"""Confidence intervals: t quantiles against printed tables, and closed forms."""

import math

import pytest

from llmqueue.theory.stats import aggregate, mean_ci, mean_se, t975


@pytest.mark.parametrize("df, printed", [
    (1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (20, 2.086), (30, 2.042),
    (40, 2.021), (60, 2.000), (120, 1.980), (10**9, 1.960),
])
def test_t_quantiles_match_the_printed_table(df, printed):
    # two-sided 95% critical values as printed in statistics textbooks (3 decimals)
    assert t975(df) == pytest.approx(printed, abs=6e-4)


def test_t_quantiles_fall_with_the_degrees_of_freedom():
    values = [t975(df) for df in range(1, 200)]
    assert all(a > b for a, b in zip(values, values[1:]))
    with pytest.raises(ValueError, match="df must be an integer >= 1"):
        t975(0)


def test_mean_ci_of_one_two_three():
    # mean 2, sample sd 1, so the half-width is t(0.975, 2) / sqrt(3)
    mean, half, n = mean_ci([1, 2, 3])
    assert (mean, n) == (2.0, 3)
    assert half == pytest.approx(4.302653 / math.sqrt(3))


def test_undefined_values_are_left_out():
    assert mean_ci([None, 5.0, float("nan")]) == (5.0, None, 1)
    assert mean_se([]) == (None, None, 0)


def test_aggregate_groups_and_gives_the_slope_error_across_seeds():
    rows = [{"x": 1, "backlog_slope": s, "backlog_slope_se": 9.0} for s in (1.0, 3.0)]
    rows += [{"x": 2, "backlog_slope": 4.0, "backlog_slope_se": 0.5}]
    one, two = aggregate(rows, ["x"], ["backlog_slope"])
    assert (one["n"], one["backlog_slope_mean"]) == (2, 2.0)
    assert one["backlog_slope_mean_se"] == pytest.approx(1.0)  # sd sqrt(2) / sqrt(2)
    assert one["backlog_slope_ci95"] == pytest.approx(12.706205)
    # a single run: its own standard error stands
    assert (two["backlog_slope_mean"], two["backlog_slope_mean_se"]) == (4.0, 0.5)
    assert two["backlog_slope_ci95"] is None
