"""Theorem 10's region (SPEC 6.5) and the step-fill policy that stays inside it."""

import pytest

import llmqueue as q
from llmqueue.models.latency import Constant, Staircase
from llmqueue.policies.builtin import StepFill
from llmqueue.theory.capacity import peak_token_rate
from llmqueue.theory.region import stability_region, vertex_c

L = Staircase()
T = L.tokens_time


def close(points, expected):
    assert len(points) == len(expected)
    for (x, y), (ex, ey) in zip(points, expected):
        assert x == pytest.approx(ex) and y == pytest.approx(ey)


def test_vertex_c_has_its_formula():
    assert vertex_c(100, L) == pytest.approx(((128 - 100 + 1) / T(128), 99 / T(128)))


def test_region_at_bmax_128_is_the_closed_form_quadrilateral():
    # prefill-only 128/t128; C; decode-only 100 requests in one step: 100/t128
    r = stability_region(128, 100, L)
    close(r.vertices, [(0, 0), (128 / T(128), 0), vertex_c(100, L), (0, 100 / T(128))])


@pytest.mark.parametrize("bmax", [128, 1024])
def test_point_c_sits_on_the_boundary(bmax):
    r = stability_region(bmax, 100, L)
    lp, ld = 290 / 0.4675, 990 / 0.4675  # SPEC 6.1's rates
    assert r.is_inside(lp, ld)
    assert not r.is_inside(lp * 1.001, ld) and not r.is_inside(lp, ld * 1.001)


def test_bigger_budget_adds_prefill_capacity_but_no_decode_capacity():
    small, big = stability_region(128, 100, L), stability_region(1024, 100, L)
    assert big.vertices[1] == pytest.approx((1024 / T(1024), 0))
    assert big.vertices[-1] == small.vertices[-1]  # decode axis: kmax caps it
    assert big.is_inside(3000, 100) and not small.is_inside(3000, 100)


def test_without_kmax_the_region_is_theorem_2s_triangle():
    r = stability_region(512, None, L)
    cap = 512 / T(512)
    close(r.vertices, [(0, 0), (cap, 0), (0, cap)])


def test_other_latency_models_enumerate_every_split():
    r = stability_region(8, 3, Constant(1.0))
    # one time unit per batch: 8 prefill; 6 prefill + 2 decodes (kmax 3 leaves
    # room for 2 decoders beside a chunk); 3 decodes alone
    close(r.vertices, [(0, 0), (8, 0), (6, 2), (0, 3)])


def test_step_fill_stays_within_the_decodes_step_while_the_pool_is_full():
    full = StepFill(kmax=100)
    view = q.make_view([(f"d{i}", 0, 5) for i in range(99)] + [("p", 290, 9)])
    plan = full(view, 1024)  # 100 residents: 99 decodes + 29 fill the first step
    assert len(plan.decode) == 99 and [(r.rid, n) for r, n in plan.prefill] == [("p", 29)]
    view = q.make_view([(f"d{i}", 0, 5) for i in range(130)] + [("p", 290, 9)])
    assert StepFill(kmax=131)(view, 1024).prefill[0][1] == 256 - 130
    # a free slot (or no kmax): Sarathi's batch
    view = q.make_view([(f"d{i}", 0, 5) for i in range(98)] + [("p", 290, 9)])
    assert [n for _, n in full(view, 1024).prefill] == [290]
    assert [n for _, n in StepFill()(view, 1024).prefill] == [290]
    # nothing decoding: the budget, even with the pool full
    view = q.make_view([("p", 290, 9), ("p2", 900, 9)])
    assert [n for _, n in StepFill(kmax=2)(view, 1024).prefill] == [290, 734]


def test_step_fill_prices_steps_with_the_engines_latency_model():
    # a 64-token staircase: 10 decoders pay for a step ending at 64
    policy = StepFill().for_engine(Staircase(0.01, 0.02, 64), 11)
    view = q.make_view([(f"d{i}", 0, 5) for i in range(10)] + [("p", 500, 9)])
    assert policy(view, 1024).prefill[0][1] == 54
    flat = StepFill().for_engine(Constant(1.0), 11)  # no step ever ends: the budget
    assert flat(view, 1024).prefill[0][1] == 500


def test_step_fill_is_stable_at_point_c_with_bmax_1024_where_sarathi_is_not():
    wl = q.renewal(0.4675, 290, 990)
    step = q.simulate(wl, "step-fill", bmax=1024, horizon=1500, batches=True)
    sarathi = q.simulate(wl, "sarathi", bmax=1024, horizon=1500).summary
    assert {(p, d) for _, _, p, d, _, _, _ in step.batch_log[-2000:]} == {(29, 99)}
    # point C has zero slack: the start-up backlog never drains, but never grows
    assert step.summary["verdict"] == "stable"
    assert step.summary["pending_max"] < 130
    assert abs(step.summary["backlog_slope"]) < 3 * step.summary["backlog_slope_se"] + 1
    assert sarathi["backlog_slope"] > 100 * sarathi["backlog_slope_se"]


@pytest.mark.parametrize("bmax", [4096, 4097, 8192, 10**6])
def test_big_budgets_keep_the_decode_axis(bmax):
    # found in review: beyond the enumeration limit the decode-only shapes were lost;
    # 100 decodes in one 46.75 ms step stay feasible whatever the budget
    r = stability_region(bmax, 100, L)
    assert max(y for x, y in r.vertices if x == 0) == pytest.approx(100 / T(128))
    assert r.is_inside(0, 0.99 * 100 / T(128))
    assert r.is_inside(*vertex_c(100, L))
    # prefill axis: the best rate of any batch up to bmax (Theorem 2's peak)
    assert max(x for x, y in r.vertices) == pytest.approx(peak_token_rate(bmax, L))
