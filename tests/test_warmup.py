"""Warm-up deletion: the summary covers [warmup, horizon] only."""

import pytest

import llmqueue as q
from llmqueue import Constant, poisson, renewal, simulate


def one_token_every_second(horizon: float, warmup: float):
    # a request (0 prefill + 1 decode) every 1 s, served in one 0.25 s batch:
    # pending is 1 on [k, k + 0.25) for arrivals k = 1, 2, ... < horizon
    return simulate(renewal(1.0, 0, 1), latency=Constant(0.25), horizon=horizon,
                    warmup=warmup).summary


def test_no_warmup_averages_over_the_whole_run():
    s = one_token_every_second(10.0, 0.0)
    assert s["pending_mean"] == pytest.approx(9 * 0.25 / 10)
    assert (s["arrivals"], s["completed"], s["duration"]) == (9, 9, 10.0)


def test_warmup_between_arrivals_counts_only_what_follows():
    s = one_token_every_second(10.0, 2.5)
    assert s["pending_mean"] == pytest.approx(7 * 0.25 / 7.5)
    assert (s["arrivals"], s["completed"], s["batches"]) == (7, 7, 7)
    assert s["duration"] == pytest.approx(7.5)
    assert s["busy_fraction"] == pytest.approx(7 * 0.25 / 7.5)


def test_warmup_inside_a_batch_keeps_the_request_in_flight():
    # at 4.1 s the request that arrived at 4 s is pending until 4.25 s
    s = one_token_every_second(10.0, 4.1)
    assert s["pending_mean"] == pytest.approx((0.15 + 5 * 0.25) / 5.9)
    assert s["arrivals"] == 5 and s["completed"] == 6 and s["pending_max"] == 1


def test_warmup_must_lie_inside_the_run():
    with pytest.raises(ValueError, match="warmup must be below the horizon"):
        one_token_every_second(10.0, 10.0)
    with pytest.raises(ValueError, match="warmup must be a finite number >= 0"):
        one_token_every_second(10.0, -1.0)


def test_poisson_arrivals_after_warmup_match_the_stream():
    # the arrivals counted are exactly the stream's arrivals in [warmup, horizon)
    stream = poisson(3.0, 0, 1, seed=7)
    times = [a.time for a, _ in zip(stream, range(200))]
    s = simulate(poisson(3.0, 0, 1, seed=7), latency=Constant(0.01), horizon=30.0,
                 warmup=12.0).summary
    assert s["arrivals"] == sum(12.0 <= t < 30.0 for t in times)


@pytest.mark.parametrize("kv", [None, 6000])
def test_every_request_of_the_observed_span_is_accounted_for(kv):
    """After a warm-up, arrivals = completed + ignored + pending at the end
    - pending at the warm-up's end (reported as ``pending_start``)."""
    wl = q.poisson(2.2, 290, 990, seed=1)
    cache = None if kv is None else q.KV(capacity_tokens=kv)
    s = q.simulate(wl, horizon=300, warmup=100, kv=cache).summary
    ignored = s.get("ignored") or 0
    assert s["pending_start"] > 0
    assert s["arrivals"] == s["completed"] + ignored + s["pending_final"] - s["pending_start"]
