"""The SimPy engine against the paper's examples, the event-order rules and closed forms."""

import random

import pytest
from conftest import fig8_labels
from invariants import check_run

import llmqueue as q
from llmqueue.common.units import to_ticks
from llmqueue.models.latency import Staircase

FIG8 = q.from_list([(0, 0, 2), (0, 0, 4), (0, 0, 3), (0.5, 1, 1), (0.5, 1, 1)])


@pytest.mark.parametrize("policy, bmax, expected", [
    ("vllm", 4, ["ABC", "DpEp", "ABCD", "BCE", "B"]),
    ("orca", 5, ["ABC", "ABC+DpEp", "BCDE", "B"]),
    ("fastertransformer", 4, ["ABC", "ABC", "BC", "B", "DpEp", "DE"]),
    ("sarathi", 4, ["ABC", "ABC+Dp", "BCD+Ep", "BE"]),
])
def test_paper_figure_8(policy, bmax, expected):
    for skip in (True, False):
        r = q.simulate(FIG8, policy, bmax=bmax, kmax=None, latency=q.Constant(1.0),
                       batches=True, requests=True, skip_ahead=skip)
        assert fig8_labels(r.batches()) == expected
        assert [b["start"] for b in r.batches()] == list(range(len(expected)))
        check_run(r, bmax, None)


def test_arrival_at_an_iteration_end_is_in_the_next_batch():
    # iterations last 1 s; B arrives exactly when A's first iteration ends
    wl = q.from_list([(0, 0, 3), (1.0, 0, 1), (1.5, 0, 1)])
    r = q.simulate(wl, "sarathi", bmax=8, latency=q.Constant(1.0), batches=True)
    assert [b["decode"] for b in r.batches()] == [[0], [0, 1], [0, 2]]


def test_arrival_during_a_batch_waits_for_the_next_even_with_a_free_slot():
    wl = q.from_list([(0, 10, 1), (0.2, 0, 1)])
    r = q.simulate(wl, "sarathi", bmax=100, latency=q.Constant(1.0), batches=True,
                   requests=True)
    assert [(b["decode"], b["prefill"]) for b in r.batches()] == [([], {0: 10}), ([0, 1], {})]
    admitted = {x.rid: x.admitted for x in r.request_log}
    assert admitted[1] == to_ticks(0.2)  # admitted at once: it counts as resident


def test_waiting_requests_take_freed_slots_fifo_before_the_next_batch():
    # kmax 1: B and C wait; B gets A's slot at the end of A's last iteration
    wl = q.from_list([(0, 0, 2), (0.1, 0, 1), (0.2, 0, 1)])
    r = q.simulate(wl, "sarathi", bmax=8, kmax=1, latency=q.Constant(1.0), batches=True,
                   requests=True)
    assert [b["decode"] for b in r.batches()] == [[0], [0], [1], [2]]
    assert [x.admitted for x in sorted(r.request_log, key=lambda x: x.rid)] == \
        [0, to_ticks(2.0), to_ticks(3.0)]


def test_a_lone_request_has_closed_form_latencies():
    # vp=200 over bmax=128: two prefill iterations (128, 72), then 10 decodes of 1 token
    lat = Staircase()
    t1 = lat.tokens_time(128)
    t2 = lat.tokens_time(72)
    td = lat.tokens_time(1)
    r = q.simulate(q.from_list([(3.0, 200, 10)]), "sarathi", requests=True)
    x = r.request_log[0]
    assert x.prefill_done == to_ticks(3.0) + to_ticks(t1) + to_ticks(t2)
    assert x.first_token == x.prefill_done + to_ticks(td)
    assert x.finished == x.prefill_done + 10 * to_ticks(td)
    assert r.summary["ttft_p50"] == pytest.approx(t1 + t2 + td, abs=1e-9)
    assert r.summary["tpot_p50"] == pytest.approx(td, abs=1e-9)


def test_light_renewal_load_gives_littles_law_exactly():
    # each request is served alone: E2E = 11 * t_b(small); pending mean = E2E / gap
    gap, t = 2.0, Staircase().tokens_time(100)
    r = q.simulate(q.renewal(gap, 100, 10), "orca", horizon=1000.0 + gap / 2)
    s = r.summary
    assert s["e2e_mean"] == pytest.approx(11 * t, abs=1e-9)
    assert s["pending_mean"] == pytest.approx(500 * 11 * t / (1000 + gap / 2), rel=1e-9)
    assert s["busy_fraction"] == pytest.approx(s["pending_mean"], rel=1e-9)
    assert s["arrivals"] == 500 and s["completed"] == 500


@pytest.mark.parametrize("policy", ["sarathi", "orca", "vllm", "fastertransformer"])
def test_random_runs_obey_every_rule(policy):
    rng = random.Random(policy)
    for _ in range(4):
        rows, t = [], 0.0
        for _ in range(120):
            t += rng.expovariate(4.0)
            rows.append((round(t, 4), rng.randint(0, 400), rng.randint(1, 50)))
        bmax, kmax = rng.choice([32, 128, 512]), rng.choice([None, 3, 16])
        horizon = rng.choice([None, 20.0])
        r = q.simulate(q.from_list(rows), policy, bmax=bmax, kmax=kmax, horizon=horizon,
                       batches=True, requests=True)
        check_run(r, bmax, kmax, work_conserving=policy in ("sarathi", "orca"))


def test_vllm_and_fastertransformer_are_not_work_conserving_at_point_c():
    for policy in ("vllm", "fastertransformer"):
        r = q.simulate(q.renewal(0.4675, 290, 990), policy, horizon=120, batches=True,
                       requests=True)
        assert check_run(r, 128, 100)["violations"] > 0


def test_prompt_that_never_fits_whole_is_refused():
    with pytest.raises(ValueError, match="can never fit bmax=128"):
        q.simulate(q.from_list([(0, 200, 5)]), "vllm", chunked=False)


def test_empty_batch_from_a_user_policy_is_reported_not_a_hang():
    def lazy(view, budget):
        return q.Plan((), ())

    with pytest.raises(q.Stalled, match="empty batch"):
        q.simulate(q.from_list([(0, 10, 5)]), lazy)


def test_plans_that_break_the_rules_are_refused():
    def greedy(view, budget):
        return q.Plan(view.decoding, [(r, r.prefill_left) for r in view.prefilling])

    with pytest.raises(ValueError, match="bmax is 128"):
        q.simulate(q.from_list([(0, 500, 5)]), greedy)


def test_same_seed_same_numbers():
    def run(seed):
        return q.simulate(q.poisson(3.0, 200, 100, seed=seed), "sarathi", horizon=60).summary

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_endless_workload_needs_a_horizon():
    with pytest.raises(ValueError, match="horizon"):
        q.simulate(q.renewal(1.0, 10, 10))
