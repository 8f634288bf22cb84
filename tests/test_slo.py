"""SLOs, attainment and the inter-token gap histogram (SPEC 8.5).

Every expected value below is worked out by hand in the comments next to it."""

import math

import numpy as np
import pytest

import llmqueue as q
from llmqueue.theory import (SLO, GapHistogram, RequestLatency, Unloaded, attainment,
                             good_throughput)

R = RequestLatency

# Five requests against SLO(ttft=1, tpot=0.15):
#   r0 ttft 0.5, tpot 0.10            -> good
#   r1 ttft 1.5, tpot 0.05            -> TTFT fails
#   r2 ttft 0.2, tpot 0.20            -> TPOT fails
#   r3 ttft 0.3, vd = 1 (tpot None)   -> good (vd = 1 passes any TPOT SLO)
#   r4 unfinished (ttft 0.1 known)    -> not good, +inf on every metric
RECORDS = [
    R(ttft=0.5, tpot=0.10, tbt_max=0.2, e2e=5.0, sched_delay=0.1),
    R(ttft=1.5, tpot=0.05, tbt_max=0.1, e2e=3.0, sched_delay=0.9),
    R(ttft=0.2, tpot=0.20, tbt_max=0.4, e2e=9.0, sched_delay=0.0),
    R(ttft=0.3, e2e=0.3, sched_delay=0.05),
    R(ttft=0.1, sched_delay=0.0, finished=False),
]
SLO_1 = SLO(ttft=1, tpot=0.15)


def test_slo_is_in_the_top_level_package():
    assert q.SLO is SLO and "SLO" in q.__all__


def test_joint_and_per_metric_attainment_by_hand():
    a = attainment(RECORDS, SLO_1)
    assert (a.mode, a.n, a.good) == ("joint", 5, 2)
    assert a.joint == pytest.approx(2 / 5)
    # TTFT: r0, r2, r3 pass (r1 is 1.5 s, r4 unfinished); TPOT: r0, r1, r3 pass.
    assert a.per_metric == pytest.approx({"ttft": 3 / 5, "tpot": 3 / 5})
    assert a.quantiles == {} and a.meets == {}
    assert a.passes(0.4) and not a.passes(0.41)


def test_ungated_metrics_do_not_count_and_no_gate_means_finished():
    # Gating only e2e <= 4 s: r1 (3 s) and r3 (0.3 s) pass.
    a = attainment(RECORDS, SLO(e2e=4))
    assert a.good == 2 and a.per_metric == {"e2e": pytest.approx(0.4)}
    # Nothing gated: every finished request is good, the unfinished one is not.
    assert attainment(RECORDS, SLO()).good == 4


def test_tbt_is_undefined_at_one_decode_token_and_passes():
    # tbt <= 0.3: r0 (0.2), r1 (0.1), r3 (vd = 1) pass; r2 (0.4) fails; r4 unfinished.
    assert attainment(RECORDS, SLO(tbt=0.3)).per_metric["tbt"] == pytest.approx(3 / 5)


@pytest.mark.parametrize("qq, ttft_q, tpot_q, ok", [
    # sorted TTFT scores 0.2 0.3 0.5 1.5 inf; sorted TPOT scores 0 0.05 0.10 0.20 inf
    # (vd = 1 counts as 0, unfinished as +inf); the q-quantile is the ceil(5q)-th.
    (0.6, 0.5, 0.10, True),      # 3rd
    (0.8, 1.5, 0.20, False),     # 4th: both over their thresholds
    (0.9, math.inf, math.inf, False),  # 5th: the unfinished request
    (0.2, 0.2, 0.0, True),       # 1st
])
def test_quantile_mode_by_hand(qq, ttft_q, tpot_q, ok):
    a = attainment(RECORDS, SLO_1, mode="quantile", q=qq)
    assert a.mode == "quantile" and a.q == qq
    assert a.quantiles == {"ttft": ttft_q, "tpot": tpot_q}
    assert a.passes() is ok
    assert a.joint == pytest.approx(0.4)  # the joint figure is reported in both modes


def test_quantile_pass_iff_per_metric_attainment_reaches_q():
    rng = np.random.default_rng(3)
    records = [R(ttft=float(x), e2e=1.0, finished=bool(f))
               for x, f in zip(rng.exponential(0.5, 200), rng.random(200) > 0.05)]
    for qq in (0.5, 0.8, 0.9, 0.95, 0.99):
        a = attainment(records, SLO(ttft=0.9), mode="quantile", q=qq)
        assert a.meets["ttft"] == (a.per_metric["ttft"] >= qq)


def test_relative_slo_uses_each_requests_unloaded_latencies():
    u = Unloaded(ttft=0.1, tpot=0.05, tbt_max=0.06, e2e=1.0)
    records = [r._replace(unloaded=u) for r in RECORDS]
    slo = SLO.relative(ttft=4, tpot=3)
    assert slo.is_relative and slo.gated == {"ttft": 4, "tpot": 3}
    # Thresholds 0.4 s TTFT and 0.15 s TPOT for every request:
    # r0 TTFT 5x fails; r1 15x fails; r2 TTFT 2x passes, TPOT 4x fails; r3 passes.
    a = attainment(records, slo)
    assert a.good == 1
    assert a.per_metric == pytest.approx({"ttft": 2 / 5, "tpot": 3 / 5})
    # r2 with a slower unloaded TPOT (0.1 s, so 2x) becomes good.
    records[2] = records[2]._replace(unloaded=u._replace(tpot=0.1))
    assert attainment(records, slo).good == 2
    # quantile mode reports multiples: sorted TTFT ratios 2 3 5 15 inf, the 3rd is 5.
    assert attainment(records, slo, "quantile", 0.6).quantiles["ttft"] == pytest.approx(5)


def test_relative_slo_needs_unloaded_latencies():
    with pytest.raises(ValueError, match=r"records\[0\]\.unloaded"):
        attainment(RECORDS, SLO.relative(ttft=5))


def test_per_class_slos():
    records = [r._replace(klass="chat") for r in RECORDS] + [
        R(ttft=30.0, e2e=50.0, klass="batch"),    # good under e2e <= 100
        R(ttft=2.0, e2e=200.0, klass="batch"),    # bad
        R(ttft=2.0, klass="batch", finished=False),
    ]
    slos = {"chat": SLO_1, "batch": SLO(e2e=100)}
    a = attainment(records, slos)
    assert (a.n, a.good) == (8, 3) and a.joint == pytest.approx(3 / 8)
    assert a.by_class["chat"].good == 2 and a.by_class["batch"].good == 1
    assert a.by_class["batch"].per_metric == {"e2e": pytest.approx(1 / 3)}
    # pooled over the requests whose class gates the metric
    assert a.per_metric == pytest.approx({"ttft": 3 / 5, "tpot": 3 / 5, "e2e": 1 / 3})
    qa = attainment(records, slos, mode="quantile", q=0.3)
    # chat: 2nd of 5 TTFT (0.3) and TPOT (0.05) pass; batch: 1st of 3 e2e (50) passes
    assert qa.meets == {"ttft": True, "tpot": True, "e2e": True} and qa.passes()
    with pytest.raises(ValueError, match="klass='other'"):
        attainment([R(ttft=1.0, klass="other")], slos)


def test_good_throughput():
    # 2 good requests over an arrival span of 4 s
    assert good_throughput(RECORDS, SLO_1, arrival_span=4.0) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="arrival_span"):
        good_throughput(RECORDS, SLO_1, arrival_span=0)


def test_request_latency_from_timestamps():
    r = R.from_times(arrival=1.0, first_token=1.5, finish=3.5, vd=5, scheduled=1.2,
                     tbt_max=0.7, klass="a")
    # ttft 0.5, tpot (3.5 - 1.5)/4 = 0.5, e2e 2.5, sched_delay 0.2
    assert r.ttft == pytest.approx(0.5) and r.tpot == pytest.approx(0.5)
    assert r.e2e == pytest.approx(2.5) and r.sched_delay == pytest.approx(0.2)
    assert r.tbt_max == 0.7 and r.finished and r.klass == "a"
    one = R.from_times(1.0, 1.5, 1.5, vd=1, scheduled=1.0, tbt_max=None)
    assert one.tpot is None and one.tbt_max is None and one.finished
    waiting = R.from_times(1.0, 1.5, None, vd=3)
    assert not waiting.finished and waiting.e2e is None and waiting.tpot is None


@pytest.mark.parametrize("kwargs, name", [
    ({"ttft": -1}, "ttft"), ({"tpot": 0}, "tpot"), ({"tbt": math.inf}, "tbt"),
    ({"e2e": "1"}, "e2e"), ({"sched_delay": -0.5}, "sched_delay"),
])
def test_bad_thresholds_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name} must be"):
        SLO(**kwargs)


def test_bad_arguments_name_the_parameter():
    with pytest.raises(ValueError, match="^mode must be one of joint, quantile"):
        attainment(RECORDS, SLO_1, mode="median")
    for bad in (0, 1, 1.5, -0.1, True):
        with pytest.raises(ValueError, match=r"^q must be a number in \(0, 1\)"):
            attainment(RECORDS, SLO_1, mode="quantile", q=bad)
    with pytest.raises(ValueError, match="^records must hold"):
        attainment([], SLO_1)
    with pytest.raises(ValueError, match=r"records\[0\]\.ttft"):
        attainment([R(ttft=-1.0)], SLO_1)
    with pytest.raises(ValueError, match=r"records\[0\]\.e2e"):
        attainment([R(ttft=1.0)], SLO(e2e=3))  # finished, yet no E2E
    with pytest.raises(ValueError, match="sched_delay cannot be relative"):
        SLO(sched_delay=2, is_relative=True)
    with pytest.raises(ValueError, match="^slo must be"):
        attainment(RECORDS, {"a": 1.0})
    with pytest.raises(ValueError, match="^target"):
        attainment(RECORDS, SLO_1).passes(1.5)


# --- the histogram of inter-token gaps ---------------------------------------

QS = (0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0)


# Sample sizes are primes, so q * n is never a whole number: numpy computes the rank
# from 100 q / 100 and rounds 0.999 * 20000 up to 19981, the histogram takes 19980.
@pytest.mark.parametrize("draw", [
    lambda rng: rng.lognormal(-3.5, 0.8, 20_011),           # gaps around 30 ms
    lambda rng: rng.exponential(0.05, 20_011),
    lambda rng: np.concatenate([rng.uniform(0.020, 0.021, 5_003),   # two iteration sizes
                                rng.uniform(0.15, 0.16, 499), np.zeros(199)]),
])
def test_histogram_quantiles_within_one_percent_of_numpy(draw):
    gaps = draw(np.random.default_rng(7))
    h = GapHistogram()
    h.add_many(gaps)
    assert h.count == gaps.size
    for qq in QS:
        exact = np.percentile(gaps, 100 * qq, method="inverted_cdf")
        assert h.quantile(qq) == pytest.approx(exact, rel=0.01, abs=1e-12)
    # the default (linearly interpolated) percentile too, away from the extremes
    for qq in (0.1, 0.5, 0.9, 0.99):
        assert h.quantile(qq) == pytest.approx(np.percentile(gaps, 100 * qq), rel=0.01)


def test_histogram_add_and_add_many_agree():
    gaps = np.random.default_rng(1).gamma(2.0, 0.02, 3_000)
    one, many = GapHistogram(), GapHistogram()
    for g in gaps:
        one.add(float(g))
    many.add_many(list(gaps[:1000]))
    many.add_many(gaps[1000:])
    assert one.counts == many.counts and one.count == many.count == 3_000
    assert (one.min, one.max) == (many.min, many.max) == (gaps.min(), gaps.max())


def test_histogram_bins_are_one_percent_wide_and_hold_their_edges():
    h = GapHistogram()
    h.add_many([1.0, 1.0099, 1.01, 1.01 ** -3])
    # 1.0 and 1.0099 share bin 0 ([1, 1.01)); 1.01 opens bin 1; 1.01**-3 is bin -3
    assert h.counts == {0: 2, 1: 1, -3: 1}


def test_histogram_bad_input():
    h = GapHistogram()
    with pytest.raises(ValueError, match="^q: the histogram holds no gaps"):
        h.quantile(0.5)
    with pytest.raises(ValueError, match="^gap must be"):
        h.add(-0.1)
    with pytest.raises(ValueError, match="^gaps must be"):
        h.add_many([0.1, math.nan])
    h.add(0.1)
    with pytest.raises(ValueError, match="^q must be"):
        h.quantile(1.2)
