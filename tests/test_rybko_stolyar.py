"""The Rybko-Stolyar network (SPEC 6.4): exiting priority is unstable at a
per-engine load of 0.9, entering priority is stable."""

import numpy as np
import pytest

from llmqueue.experiments import rybko_stolyar as rs


def sampled_backlog(result):
    """Total backlog sampled once per time unit: (times, values)."""
    t, _, backlog = result.timeseries()
    grid = np.arange(0.0, t[-1], 1.0)
    idx = np.searchsorted(t, grid, side="right") - 1
    return grid, np.where(idx >= 0, backlog[np.maximum(idx, 0)], 0.0)


def test_the_setup_is_spec_6_4():
    assert rs.RATE == pytest.approx(0.9 * 768 / 608)
    assert rs.ranking("exiting", "engine-1") == ["B", "A"]    # B leaves through engine 1
    assert rs.ranking("entering", "engine-1") == ["A", "B"]
    assert rs.ranking("exiting", "engine-2") == ["A", "B"]
    net, _ = rs.build("exiting")
    for engine in net.engines.values():
        assert (engine.bmax, engine.kmax, engine.latency.seconds) == (768, None, 1.0)


@pytest.fixture(scope="module")
def short_runs():
    return {p: rs.simulate_priority(p, 2500.0, seed=0)[0] for p in ("exiting", "entering")}


def test_each_engine_is_offered_90_percent(short_runs):
    # tokens that reached each engine per unit, over 768: 0.9 up to sampling error
    for engine in short_runs["entering"].engines.values():
        assert engine.summary["load"] == pytest.approx(0.9, abs=0.03)


def test_exiting_priority_grows_while_entering_stays_bounded(short_runs):
    exiting, entering = short_runs["exiting"].total, short_runs["entering"].total
    t, grow = sampled_backlog(exiting)
    _, flat = sampled_backlog(entering)
    # exiting: hundreds of thousands of tokens and a clearly positive trend
    assert exiting.summary["backlog_max"] > 10 * entering.summary["backlog_max"]
    assert np.polyfit(t, grow, 1)[0] > 50          # tokens per unit time
    # entering: a few thousand tokens, no trend (measured |slope| < 3)
    assert entering.summary["backlog_max"] < 60_000
    assert abs(np.polyfit(t, flat, 1)[0]) < 10


@pytest.mark.slow
def test_exiting_grows_in_growing_waves_over_a_long_run():
    """Over the scenario's 12000 units: a wave peaks in the first quarter, the
    backlog then drains by at least a quarter, and a later wave more than
    doubles the first peak.  Entering: the second half looks like the first."""
    exiting, _ = rs.simulate_priority("exiting", rs.HORIZON, seed=0)
    entering, _ = rs.simulate_priority("entering", rs.HORIZON, seed=0)
    t, grow = sampled_backlog(exiting.total)
    quarter = len(t) // 4
    first = int(np.argmax(grow[:quarter]))
    later = quarter + int(np.argmax(grow[quarter:]))
    assert grow[later] > 2 * grow[first]
    assert grow[first:later].min() < 0.75 * grow[first]
    _, flat = sampled_backlog(entering.total)
    half = len(flat) // 2
    assert flat[half:].max() < 60_000
    assert flat[half:].mean() < 1.5 * flat[:half].mean()
