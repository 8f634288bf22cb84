"""Prefix caching in closed form (SPEC 10.4) against hand-worked cases, an
independent root finder, SPEC E10.2's capacity and E10.1's [T] figures."""

import math
import os
from types import SimpleNamespace

import pytest

from llmqueue import theory
from llmqueue.models.traces import read_trace
from llmqueue.models.workload import Arrival
from llmqueue.theory import prefix
from llmqueue.theory.capacity import lambda_star

H = 16


def req(time, vp, blocks=None, out_blocks=None):
    return SimpleNamespace(time=time, prefill=vp, blocks=blocks, out_blocks=out_blocks)


# --- ideal hits -------------------------------------------------------------------------

def test_second_shares_two_leading_blocks_third_is_exactly_covered():
    requests = [req(0.0, 64, ("a", "b", "c", "d")),
                req(1.0, 48, ("a", "b", "x")),   # a, b seen; x new: 2 blocks
                req(2.0, 32, ("a", "b"))]        # both seen, but one token is computed
    assert prefix.ideal_hits(requests, H) == [0, 2 * H, 2 * H - 1]
    assert prefix.ideal_hit_ratio(requests, H) == pytest.approx((32 + 31) / (64 + 48 + 32))


def test_only_leading_blocks_count():
    # b is seen but a is not: a chain breaks at its first miss
    requests = [req(0.0, 32, ("b", "c")), req(1.0, 32, ("a", "b"))]
    assert prefix.ideal_hits(requests, H) == [0, 0]


def test_requests_of_one_instant_share_nothing():
    requests = [req(0.0, 48, (1, 2, 3)), req(0.0, 48, (1, 2, 3)), req(0.5, 48, (1, 2, 4))]
    assert prefix.ideal_hits(requests, H) == [0, 0, 2 * H]


def test_partial_blocks_are_ignored():
    requests = [req(0.0, 40, ("a", "b", "c")),   # 40 // 16 = 2 full blocks: c is partial
                req(1.0, 48, ("a", "b", "c")),   # c was never full before: 2 blocks
                req(2.0, 40, ("a", "b", "c"))]   # c is seen now, but partial here
    assert prefix.ideal_hits(requests, H) == [0, 2 * H, 2 * H]
    # a prompt shorter than one block uses no id at all
    assert prefix.ideal_hits([req(0.0, 15, ("a",)), req(1.0, 16, ("a",))], H) == [0, 0]


def test_out_blocks_are_reused_by_a_later_request():
    requests = [req(0.0, 32, ("a", "b"), out_blocks=("c",)),
                req(5.0, 64, ("a", "b", "c", "d"))]
    assert prefix.ideal_hits(requests, H) == [0, 3 * H]
    # but not by a request of the same instant
    same = [req(0.0, 32, ("a", "b")), req(1.0, 32, ("a", "b"), out_blocks=("c",)),
            req(1.0, 64, ("a", "b", "c", "d"))]
    assert prefix.ideal_hits(same, H) == [0, 31, 2 * H]


def test_empty_and_zero_prompts():
    assert prefix.ideal_hits([], H) == []
    assert prefix.ideal_hit_ratio([], H) == 0.0
    assert prefix.ideal_hit_ratio([req(0.0, 0, ()), req(1.0, 0, ())], H) == 0.0
    assert prefix.ideal_hits([req(0.0, 1, None), req(1.0, 1, None)], 1) == [0, 0]


def test_requests_without_ids_share_nothing_and_arrival_works():
    plain = [Arrival(0.0, 32, 4), Arrival(1.0, 32, 4)]
    assert prefix.ideal_hits(plain, H) == [0, 0]
    extended = [Arrival(0.0, 32, 4, blocks=(7, 8)),
                Arrival(1.0, 32, 4, blocks=(7, 9))]
    assert prefix.ideal_hits(extended, H) == [0, H]


def test_requests_are_iterated_once():
    stream = (req(float(t), 32, (1, 2)) for t in range(3))
    # the first misses; the next two see both blocks, each capped at vp - 1 = 31
    assert prefix.ideal_hit_ratio(stream, H) == pytest.approx(62 / 96)


@pytest.mark.parametrize("requests, hash_block, match", [
    ([req(1.0, 32), req(0.5, 32)], H, "arrival order"),
    ([req(0.0, 32)], 0, "hash_block"),
    ([req(0.0, -1)], H, r"requests\[0\].prefill"),
    ([req(0.0, 2.5)], H, r"requests\[0\].prefill"),
    ([req(math.nan, 2)], H, r"requests\[0\].time"),
    ([req(0.0, 32, "ab")], H, r"requests\[0\].blocks"),
    ([req(0.0, 32, (1,), out_blocks=5)], H, r"requests\[0\].out_blocks"),
])
def test_ideal_rejects_bad_input(requests, hash_block, match):
    with pytest.raises(ValueError, match=match):
        prefix.ideal_hit_ratio(requests, hash_block)


# --- SPEC E10.1 [T]: the Mooncake traces ------------------------------------------------

TRACES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                      "shared", "traces", "mooncake")


@pytest.mark.parametrize("name, ideal", [("conversation_trace.jsonl", 0.3733),
                                         ("synthetic_trace.jsonl", 0.6504)])
def test_e10_1_mooncake_ideal_hit_ratio(name, ideal):
    if not os.path.isfile(os.path.join(TRACES, name)):
        pytest.skip(f"{TRACES} holds no {name}")
    requests = read_trace(os.path.join(TRACES, name)).workload()
    assert prefix.ideal_hit_ratio(requests, hash_block=512) == pytest.approx(ideal, abs=5e-5)


# --- Che's approximation ----------------------------------------------------------------

def newton(f, df, x, steps=50):
    for _ in range(steps):
        x -= f(x) / df(x)
    return x


def test_che_hand_solved_one_group():
    # n = 1, E[u] = 1, lambda p = 1: 1 - exp(-T) + T = 1.5, solved by Newton here
    t = newton(lambda x: 1 - math.exp(-x) + x - 1.5, lambda x: math.exp(-x) + 1, 1.0)
    assert 0.8 < t < 1.0  # 1 - e^-0.8 + 0.8 = 1.35, 1 - e^-1 + 1 = 1.63
    assert prefix.che_characteristic_time(1.0, [1.0], 1, 1.0, 1.5) == pytest.approx(t, rel=1e-12)
    result = prefix.che(1.0, [1.0], 1, 1.0, 1.5, H, 2 * H)
    assert result.time == pytest.approx(t, rel=1e-12)
    assert result.group_hits == pytest.approx((1 - math.exp(-t),))
    # the prefix is half the prompt
    assert result.hit_ratio == pytest.approx((1 - math.exp(-t)) / 2)
    assert prefix.che_hit_ratio(1.0, [1.0], 1, 1.0, 1.5, H, 2 * H) == result.hit_ratio


def test_che_against_brentq_on_three_groups():
    brentq = pytest.importorskip("scipy.optimize").brentq
    rate, p, n, u, c = 3.0, [0.5, 0.3, 0.2], [10, 20, 5], 2.0, 25.0

    def left(t):
        return sum(ng * (1 - math.exp(-rate * pg * t)) for pg, ng in zip(p, n)) + rate * u * t

    t = brentq(lambda x: left(x) - c, 0.0, c / (rate * u), xtol=1e-14)
    result = prefix.che(rate, p, n, u, c, H, 600.0)
    assert result.time == pytest.approx(t, rel=1e-10)
    expected = sum(pg * (1 - math.exp(-rate * pg * t)) * ng * H for pg, ng in zip(p, n)) / 600
    assert result.hit_ratio == pytest.approx(expected, rel=1e-10)


def test_che_without_unique_blocks_and_a_cache_too_small():
    brentq = pytest.importorskip("scipy.optimize").brentq
    # E[u] = 0, C = 6 < n = 8: the cache keeps each group part of the time
    t = brentq(lambda x: 4 * (1 - math.exp(-0.5 * x)) * 2 - 6, 0.0, 100.0, xtol=1e-14)
    result = prefix.che(1.0, [1, 1], 4, 0.0, 6, H, 100.0)
    assert result.time == pytest.approx(t, rel=1e-10)
    assert result.group_hits == pytest.approx((0.75, 0.75))  # each group fills 3 of its 4


def test_che_unlimited_cache_every_group_hits():
    p = prefix.zipf_popularity(4, 1.0)
    n = [2, 3, 4, 5]
    every = sum(pg * ng for pg, ng in zip(p, n)) * H / 200
    assert prefix.che_hit_ratio(5.0, p, n, 3.0, 1e12, H, 200) == pytest.approx(every, rel=1e-9)


def test_che_single_group_held_whole_hits_fully():
    for capacity in (8, 8.5, 1000):
        result = prefix.che(2.0, [1.0], 8, 0.0, capacity, H, 8 * H + 20)
        assert result.time == math.inf
        assert result.group_hits == (1.0,)
        assert result.hit_ratio == pytest.approx(8 * H / (8 * H + 20))


def test_che_rises_with_capacity():
    p = prefix.zipf_popularity(200, 0.8)
    ratios = [prefix.che_hit_ratio(1.694, p, 32, 4.0, c, H, 576.0)
              for c in (0, 10, 100, 1000, 2500, 6000, 7000)]
    assert ratios[0] == 0.0
    assert all(a < b for a, b in zip(ratios, ratios[1:]))
    # 7000 blocks hold the 200 x 32 shared ones and little else: the rarest
    # groups still age out, so the ratio stays below every prefix's share
    assert ratios[-1] < 512 / 576
    assert prefix.che_hit_ratio(1.694, p, 32, 4.0, 10**6, H, 576.0) == pytest.approx(512 / 576)


def test_che_normalises_and_ignores_groups_never_requested():
    a = prefix.che(1.0, [2, 2], [3, 5], 1.0, 4, H, 100.0)
    b = prefix.che(1.0, [0.5, 0.5], [3, 5], 1.0, 4, H, 100.0)
    assert a.time == pytest.approx(b.time) and a.hit_ratio == pytest.approx(b.hit_ratio)
    # a group of share 0 fills nothing, so one of 5 blocks fits whole in C = 5
    c = prefix.che(1.0, [1, 0], [5, 7], 0.0, 5, H, 100.0)
    assert c.time == math.inf and c.group_hits == (1.0, 0.0)
    assert c.hit_ratio == pytest.approx(5 * H / 100)


@pytest.mark.parametrize("args, match", [
    ((0.0, [1.0], 1, 0.0, 1, H, 64), "rate"),
    ((1.0, [], 1, 0.0, 1, H, 64), "popularity"),
    ((1.0, [1.0, -0.1], 1, 0.0, 1, H, 64), r"popularity\[1\]"),
    ((1.0, [0, 0], 1, 0.0, 1, H, 64), "sum > 0"),
    ((1.0, "ab", 1, 0.0, 1, H, 64), "popularity"),
    ((1.0, [1, 1], [1, 2, 3], 0.0, 1, H, 64), "shared_blocks"),
    ((1.0, [1.0], -1, 0.0, 1, H, 64), "shared_blocks"),
    ((1.0, [1.0], 1, -1.0, 1, H, 64), "unique_blocks_mean"),
    ((1.0, [1.0], 1, 0.0, -1, H, 64), "capacity_blocks"),
    ((1.0, [1.0], 1, 0.0, math.inf, H, 64), "capacity_blocks"),
    ((1.0, [1.0], 1, 0.0, 1, 0, 64), "hash_block"),
    ((1.0, [1.0], 4, 0.0, 1, H, 63), "mean_prompt"),
])
def test_che_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        prefix.che_hit_ratio(*args)


# --- Zipf ----------------------------------------------------------------------------------

@pytest.mark.parametrize("groups, s", [(1, 1.0), (8, 1.0), (200, 0.8), (32, 1.1), (5, 0.0)])
def test_zipf_sums_to_one_and_falls_as_a_power(groups, s):
    p = prefix.zipf_popularity(groups, s)
    assert len(p) == groups and math.fsum(p) == pytest.approx(1.0, abs=1e-12)
    if groups > 2:
        assert p[0] / p[1] == pytest.approx(2**s)
        assert p[1] / p[2] == pytest.approx(1.5**s)


def test_zipf_of_eight_groups_matches_the_harmonic_number():
    h8 = sum(1 / g for g in range(1, 9))
    assert h8 == pytest.approx(761 / 280)
    assert prefix.zipf_popularity(8, 1.0)[0] == pytest.approx(280 / 761)
    assert prefix.zipf_popularity(8, 1.0)[7] == pytest.approx(1 / (8 * h8))


@pytest.mark.parametrize("groups, s, match", [(0, 1.0, "groups"), (2.0, 1.0, "groups"),
                                              (3, -1.0, "s"), (3, math.nan, "s")])
def test_zipf_rejects_bad_input(groups, s, match):
    with pytest.raises(ValueError, match=match):
        prefix.zipf_popularity(groups, s)


# --- capacity with hits (SPEC E10.2) ------------------------------------------------------

def test_e10_2_capacity_with_hits_and_gain():
    t512 = 0.01128 + 4 * 0.03547  # the staircase at 512 tokens: 4 steps of 128
    expected = (512 / t512) / (1152 - 1024 + 128)
    assert prefix.lambda_star_cached(512, 1152, 128, 1024) == pytest.approx(expected, rel=1e-12)
    assert prefix.lambda_star_cached(512, 1152, 128, 1024) == pytest.approx(13.06, abs=0.005)
    assert prefix.prefix_gain(1152, 128, 1024) == 5.0
    # the gain is the ratio of the capacities with and without hits
    assert (prefix.lambda_star_cached(512, 1152, 128, 1024) / lambda_star(512, 1152, 128)
            == pytest.approx(5.0))


def test_no_hits_is_theorem_2():
    assert prefix.lambda_star_cached(128, 290, 990, 0) == lambda_star(128, 290, 990)
    assert prefix.prefix_gain(290, 990, 0) == 1.0
    # every prompt token cached leaves the decodes alone
    assert prefix.prefix_gain(100, 50, 100) == 3.0


@pytest.mark.parametrize("hit, match", [(-1, "mean_hit"), (1153, "mean_hit"),
                                        (math.nan, "mean_hit")])
def test_capacity_with_hits_rejects_bad_hits(hit, match):
    with pytest.raises(ValueError, match=match):
        prefix.lambda_star_cached(512, 1152, 128, hit)
    with pytest.raises(ValueError, match=match):
        prefix.prefix_gain(1152, 128, hit)


def test_gain_needs_decodes():
    with pytest.raises(ValueError, match="mean_decode"):
        prefix.prefix_gain(100, 0, 100)


# --- the public face ----------------------------------------------------------------------

def test_theory_exports_the_prefix_names():
    for name in ("Che", "che", "che_characteristic_time", "che_hit_ratio", "ideal_hit_ratio",
                 "ideal_hits", "lambda_star_cached", "prefix_gain", "zipf_popularity"):
        assert getattr(theory, name) is getattr(prefix, name) and name in theory.__all__
