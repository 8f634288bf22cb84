"""Size and arrival laws: sample means and shapes against their parameters.

Every statistical check uses a fixed seed and allows a stated multiple (Z) of
the standard error of the estimate, so a correct law fails with probability
far below 1e-6 per check."""

import math

import numpy as np
import pytest

import llmqueue as q
from llmqueue.models.arrivals import Gamma, Poisson, Renewal, TraceTimes
from llmqueue.models.sizes import (Empirical, Fixed, Geometric, LogNormal, Mixture, PoissonSize,
                                   UniformInt, decode_mean, decode_sizes)

Z = 5.0
N = 200_000


def rng(seed=1):
    return np.random.default_rng(seed)


def assert_mean(x, mean, sd):
    assert abs(x.mean() - mean) < Z * sd / math.sqrt(x.size), (x.mean(), mean)


def assert_var(x, var, kurtosis_excess=0.0):
    """Sample variance within Z standard errors; SE^2 = var^2 (2 + excess) / n."""
    se = var * math.sqrt((2 + kurtosis_excess) / x.size)
    assert abs(x.var(ddof=1) - var) < Z * se, (x.var(ddof=1), var)


def test_fixed_is_constant():
    assert set(Fixed(7).sample(rng(), 100).tolist()) == {7}


def test_uniform_int_is_half_open_with_the_right_moments():
    x = UniformInt(1500, 2500).sample(rng(), N)
    assert x.min() == 1500 and x.max() == 2499
    m = 1000  # number of values
    var = (m * m - 1) / 12
    assert_mean(x, 1999.5, math.sqrt(var))
    assert_var(x, var, kurtosis_excess=-1.2)
    counts = np.bincount(x - 1500)  # every value about equally often: chi-square
    expected = N / m
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < m - 1 + Z * math.sqrt(2 * (m - 1))


def test_poisson_size_mean_equals_variance():
    x = PoissonSize(32).sample(rng(), N)
    assert_mean(x, 32, math.sqrt(32))
    assert_var(x, 32, kurtosis_excess=1 / 32)


def test_geometric_is_on_one_up_with_the_given_mean():
    law = Geometric(129)
    x = law.sample(rng(), N)
    assert law.mean == 129.0 and x.min() >= 1
    var = 129 * 128  # (1 - p) / p^2 with p = 1 / 129
    assert_mean(x, 129, math.sqrt(var))
    assert set(Geometric(1).sample(rng(), 100).tolist()) == {1}


def test_decode_sizes_raise_zero_to_one_and_draw_is_one_int():
    x = decode_sizes(PoissonSize(0.5), rng(), 1000)
    assert x.min() == 1 and (x > 1).any()
    assert isinstance(PoissonSize(3).draw(rng()), int)


def test_lognormal_has_the_given_mean_and_cv():
    mean, cv = 500.0, 1.5
    x = LogNormal(mean, cv).sample(rng(), N)
    sd = cv * mean
    # rounding to integers adds at most 1/12 to the variance and nothing to the mean on average
    assert_mean(x, mean, sd)
    s2 = math.log1p(cv * cv)
    logs = np.log(x[x > 0])
    assert abs(np.median(x) - mean / math.sqrt(1 + cv * cv)) < 0.02 * mean  # median e^mu
    assert abs(logs.std() - math.sqrt(s2)) < 0.01


def test_mixture_picks_parts_by_weight():
    law = Mixture([(0.8, UniformInt(50, 200)), (0.2, UniformInt(1500, 2500))])
    x = law.sample(rng(), N)
    share_long = (x >= 1500).mean()
    assert abs(share_long - 0.2) < Z * math.sqrt(0.2 * 0.8 / N)
    assert law.mean == pytest.approx(0.8 * 124.5 + 0.2 * 1999.5)
    assert_mean(x, law.mean, x.std())
    assert set(np.unique(x[x < 1500])) <= set(range(50, 200))


def test_empirical_resamples_the_values_uniformly():
    values = [10, 10, 20, 70]
    x = Empirical(values).sample(rng(), N)
    assert set(np.unique(x)) == {10, 20, 70}
    assert abs((x == 10).mean() - 0.5) < Z * math.sqrt(0.25 / N)
    assert_mean(x, 27.5, np.std(values))


@pytest.mark.parametrize("bad", [lambda: UniformInt(5, 5), lambda: LogNormal(100, 0),
                                 lambda: PoissonSize(-1), lambda: Mixture([]),
                                 lambda: Empirical([]), lambda: Empirical([1.5]),
                                 lambda: Fixed(-1), lambda: Geometric(0.5),
                                 lambda: Geometric(float("inf"))])
def test_bad_size_parameters_are_value_errors(bad):
    with pytest.raises(ValueError):
        bad()


def gaps(law, n=N, seed=2):
    times = law.times(rng(seed))
    t = np.array([next(times) for _ in range(n)])
    return t, np.diff(np.concatenate([[0.0], t]))


def test_renewal_starts_after_one_gap_and_is_exact():
    t, _ = gaps(Renewal(0.4675), n=1000)
    assert t[0] == 0.4675 and t[999] == 1000 * 0.4675


def test_poisson_gaps_are_exponential():
    _, g = gaps(Poisson(8.0))
    assert_mean(g, 1 / 8, 1 / 8)
    assert_var(g, 1 / 64, kurtosis_excess=6)
    assert abs((g > 1 / 8).mean() - math.exp(-1)) < Z * math.sqrt(0.25 / N)  # memoryless tail


@pytest.mark.parametrize("cv", [0.5, 1.0, 3.0])
def test_gamma_gaps_have_the_chosen_rate_and_cv(cv):
    rate = 4.0
    _, g = gaps(Gamma(rate, cv))
    sd = cv / rate
    assert_mean(g, 1 / rate, sd)
    assert_var(g, sd * sd, kurtosis_excess=6 * cv * cv)


def test_trace_times_rescale_to_a_target_rate_keeping_the_shape():
    times = [0.0, 1.0, 1.5, 4.0, 10.0]
    law = TraceTimes(times)
    assert law.rate == pytest.approx(4 / 10) and law.count == 5
    fast = TraceTimes(times, rate=2.0)
    out = list(fast.times(rng()))
    assert out == pytest.approx([t * 0.2 for t in times])
    with pytest.raises(ValueError, match="non-decreasing"):
        TraceTimes([1.0, 0.5])


def test_same_seed_same_requests_and_independent_streams():
    def make(seed, decode=q.UniformInt(1, 100), count=500):  # noqa: B008
        return list(q.compose(q.Poisson(3.0), q.LogNormal(300, 1.0), decode, count=count,
                              seed=seed))
    a, b, c = make(7), make(7), make(8)
    assert a == b and a != c
    # changing the decode law leaves the arrival and prefill draws as they were
    d = make(7, decode=q.Fixed(5))
    assert [(x.time, x.prefill) for x in d] == [(x.time, x.prefill) for x in a]
    # the first n requests do not depend on the count
    assert make(7, count=5000)[:500] == a


def test_compose_clamps_zero_decode_draws_to_one():
    out = list(q.compose(q.Renewal(1.0), 0, q.PoissonSize(0.5), count=2000, seed=3))
    assert min(x.decode for x in out) == 1 and min(x.prefill for x in out) == 0


@pytest.mark.parametrize("law, rounding", [
    (PoissonSize(1.5), 0.0), (UniformInt(0, 4), 0.0), (Empirical([0, 0, 3, 7]), 0.0),
    (Mixture([(0.5, Fixed(0)), (0.5, Fixed(9))]), 0.0),
    (LogNormal(2.0, 1.5), 0.05)])  # the rounded lognormal's mean is its mean to ~0.05
def test_decode_mean_counts_zero_draws_as_one(law, rounding):
    # decode sizes raise a draw of 0 to 1: the workload's mean must say so
    draws = decode_sizes(law, np.random.default_rng(4), 200_000)
    se = draws.std() / np.sqrt(draws.size)
    assert abs(draws.mean() - decode_mean(law)) < 5 * se + rounding
    assert decode_mean(law) > law.mean  # each law here can draw 0


def test_initial_requests_arrive_at_time_zero_before_the_stream():
    """``initial=N``: N requests at t=0 ahead of the law's own arrivals, which
    keep their times (the arrival stream is drawn independently of sizes)."""
    from llmqueue.models.arrivals import Poisson
    from llmqueue.models.workload import compose
    plain = list(compose(Poisson(2.0), 10, 5, count=4, seed=3))
    backlog = list(compose(Poisson(2.0), 10, 5, count=7, seed=3, initial=3))
    assert [a.time for a in backlog[:3]] == [0.0, 0.0, 0.0]
    assert [a.time for a in backlog[3:]] == [a.time for a in plain]
    with pytest.raises(ValueError, match="initial"):
        compose(Poisson(2.0), 10, 5, count=4, initial=-1)
