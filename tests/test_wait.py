"""WAIT and Nested WAIT (SPEC 7.5): the pure rule on hand-built views, small
engine runs worked out by hand (iterations of 1 s, so times are iteration
numbers), the fixed point of SPEC 7.8.3-7.8.4, the drain, threshold errors,
Nested WAIT's quotas in closed form, and the command line."""

import collections
import json

import pytest

import llmqueue as q
from llmqueue.cli.main import main
from llmqueue.common.units import UNLIMITED
from llmqueue.models.arrivals import Renewal
from llmqueue.models.workload import compose
from llmqueue.policies import IDLE, SimpleView, Wait, make_policy
from llmqueue.policies.view import Request, check_plan
from llmqueue.theory.memory import kv_area
from llmqueue.theory.wait import nested_wait_quotas, wait_thresholds

ONE = q.Constant(1.0)


# -- hand-built views ----------------------------------------------------------
def resident(rid, vp, vd, decoded=None, klass=None):
    """A resident in admission order ``rid``: unstarted (``decoded=None``), or
    started with its prompt done and ``decoded`` tokens decoded."""
    r = Request(rid, vp, vd, klass=klass, seq=rid)
    if decoded is not None:
        r.prefill_left = 0
        r.decode_left = vd - decoded
    return r


def view(residents, draining=False):
    """Started residents first, then unstarted ones, as the engine shows them."""
    decoding = [r for r in residents if r.prefill_left == 0]
    prefilling = [r for r in residents if r.prefill_left > 0]
    return SimpleView(decoding, prefilling, None, draining)


def planned(policy, v):
    plan = policy.plan(v, UNLIMITED)
    if plan is IDLE:
        return "idle"
    check_plan(plan, v, UNLIMITED, policy.name)
    return ([r.rid for r in plan.decode], [(r.rid, n) for r, n in plan.prefill])


def two_started_and(*unstarted):
    return [resident(0, 20, 200, decoded=5), resident(1, 20, 200, decoded=0), *unstarted]


def test_ready_batch_decodes_every_started_one_and_starts_n_whole_prompts():
    rs = two_started_and(*(resident(i, 20 + i, 200) for i in range(2, 7)))  # 5 unstarted
    # the first 4 unstarted in order, whole (no budget), plus a decode for each started one
    assert planned(Wait(4), view(rs)) == ([0, 1], [(2, 22), (3, 23), (4, 24), (5, 25)])


def test_not_ready_strict_idles_even_with_started_residents():
    rs = two_started_and(resident(2, 20, 200), resident(3, 20, 200))
    assert planned(Wait(4), view(rs)) == "idle"
    assert Wait(4).plan(view(rs), UNLIMITED) is IDLE


def test_not_ready_decode_serves_the_started_only_and_idles_without_them():
    rs = two_started_and(resident(2, 20, 200))
    assert planned(Wait(4, idle="decode"), view(rs)) == ([0, 1], [])
    assert planned(Wait(4, idle="decode"), view([resident(2, 20, 200)])) == "idle"


def test_gate_all_needs_every_type_and_any_starts_the_ready_types_only():
    n = {"a": 2, "b": 1}
    kind = lambda r: r.klass  # noqa: E731
    a1, b1, a2 = (resident(0, 3, 5, klass="a"), resident(1, 4, 5, klass="b"),
                  resident(2, 5, 5, klass="a"))
    assert planned(Wait(n, classify=kind), view([a1, b1])) == "idle"
    assert planned(Wait(n, classify=kind, gate="any"), view([a1, b1])) == ([], [(1, 4)])
    # both ready: first n_j of each, in the line's order
    assert planned(Wait(n, classify=kind), view([a1, b1, a2])) == ([], [(0, 3), (1, 4), (2, 5)])


def test_default_type_is_the_sizes():
    rs = [resident(0, 20, 200), resident(1, 30, 100), resident(2, 20, 200)]
    policy = Wait({(20, 200): 2, (30, 100): 2}, gate="any")
    assert planned(policy, view(rs)) == ([], [(0, 20), (2, 20)])


def test_the_line_order_is_the_views_and_unstarted_decoders_merge_by_it():
    # the engine lists a preempted request first (lowest key); one with nothing to
    # prefill (vp = 0) waits among the decoders and still counts by its place
    preempted = resident(0, 0, 7)
    fresh = [resident(i, 10, 7) for i in (1, 2, 3)]
    assert planned(Wait(2), view([preempted, *fresh])) == ([0], [(1, 10)])


def test_drain_starts_what_it_has_up_to_the_quota():
    rs = two_started_and(resident(2, 20, 200), resident(3, 20, 200))
    assert planned(Wait(4), view(rs, draining=True)) == ([0, 1], [(2, 20), (3, 20)])
    many = [resident(i, 20, 200) for i in range(6)]
    assert planned(Wait(4), view(many, draining=True))[1] == [(i, 20) for i in range(4)]


def test_a_type_without_quota_is_an_error_naming_n():
    policy = Wait({"a": 1}, classify=lambda r: r.klass)
    with pytest.raises(ValueError, match="type 'b', which has no quota in n"):
        policy.plan(view([resident(0, 1, 1, klass="b")]), UNLIMITED)


@pytest.mark.parametrize("kwargs, match", [
    (dict(n=0), "n must be an integer quota >= 1; got 0"),
    (dict(n=-2), "n must be an integer quota >= 1; got -2"),
    (dict(n=True), "n must be an integer quota >= 1"),
    (dict(n=2.5), "n must be an integer >= 1 or a non-empty mapping"),
    (dict(n={}), "n must be an integer >= 1 or a non-empty mapping"),
    (dict(n={"a": 0}), r"n\['a'\] must be an integer quota >= 1"),
    (dict(n=4, gate="some"), "gate must be one of all, any; got 'some'"),
    (dict(n=4, idle="sleep"), "idle must be one of strict, decode; got 'sleep'"),
    (dict(n=4, classify=lambda r: 0), "classify needs n as a mapping"),
    (dict(n={"a": 1}, classify=3), "classify must be a function"),
    (dict(lengths=[5, 5], stages=[1, 1]), "lengths must be increasing"),
    (dict(lengths=[5, 9], stages=[1]), "stages must give one quota per length"),
    (dict(lengths=[5, 9], stages=[1, 0]), "stages must be an integer quota >= 1"),
    (dict(lengths=[5]), "Nested WAIT needs lengths"),
    (dict(n=2, lengths=[5], stages=[2]), "Nested WAIT takes its quotas from stages"),
])
def test_bad_settings_name_the_parameter(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Wait(**kwargs)


def test_registry_builds_it_and_an_engine_refuses_it_without_quota_or_cache():
    assert "wait" in q.policy_names()
    assert make_policy("wait", n=3).quotas == {None: 3}
    assert make_policy("wait").work_conserving is False
    one = q.from_list([(0, 1, 1)])
    with pytest.raises(ValueError, match="needs its quota n"):
        q.simulate(one, "wait", kv=q.KV(capacity_tokens=10))
    with pytest.raises(ValueError, match="needs a KV cache"):
        q.simulate(one, Wait(1))


# -- engine runs ---------------------------------------------------------------
def run(rows, policy, M=1000, **kw):
    return q.simulate(q.from_list(rows), policy, bmax=None, kmax=None, latency=ONE,
                      kv=q.KV(capacity_tokens=M, **kw), batches=True, requests=True,
                      check_invariants=True)


def starts(result):
    return [b.start / 1e9 for b in result.batch_log]


def test_strict_leaves_the_gpu_idle_with_work_present_until_ready():
    # n=2: A and B start at t0; at t1 nothing waits, so strict idles although A
    # and B hold KV with tokens to decode; C (t2) alone is not enough; D (t50)
    # makes a group: A and B decode again and C, D start together; then nothing
    # waits again until E, the last arrival (t90), after which the rest drains
    rows = [(0, 1, 3), (0, 1, 3), (2, 1, 3), (50, 1, 3), (90, 1, 3)]
    r = run(rows, Wait(2))
    assert starts(r) == [0.0, 50.0, 90.0, 91.0, 92.0, 93.0]
    assert (r.batch_log[1].decode, r.batch_log[1].prefill) == ((0, 1), ((2, 1), (3, 1)))
    assert (r.batch_log[2].decode, r.batch_log[2].prefill) == ((0, 1, 2, 3), ((4, 1),))
    # idle="decode" keeps decoding A and B (t1-t3, done at t4), then idles until D
    assert starts(run(rows, Wait(2, idle="decode")))[:5] == [0.0, 1.0, 2.0, 3.0, 50.0]


def test_a_finite_run_with_fewer_than_n_requests_drains():
    # three requests for a quota of four: once the last has arrived (t2) no
    # arrival can come, so the three start together and all finish
    r = run([(0, 2, 2), (1, 2, 2), (2, 2, 2)], Wait(4))
    assert starts(r) == [2.0, 3.0, 4.0]
    assert r.batch_log[0].prefill == ((0, 2), (1, 2), (2, 2))
    assert r.summary["completed"] == 3 and r.summary["threshold_error"] == 0


def test_every_slot_taken_counts_as_draining():
    # kmax=2 < n=3: no third resident can join while two hold the slots
    r = q.simulate(q.from_list([(0, 1, 2)] * 2 + [(60, 1, 2)]), Wait(3), bmax=None, kmax=2,
                   latency=ONE, kv=q.KV(capacity_tokens=100), batches=True)
    assert starts(r)[0] == 0.0 and r.summary["completed"] == 3


def test_threshold_error_counts_the_preemptions_quotas_let_happen():
    # four (5 + 6)-token requests, groups of 2, 30 tokens: A, B start at t0
    # (10 in use), C, D at t1 (22), four decodes at t2 (26) and t3 (30); at t4
    # A needs a token with none free: D, the latest start, holding 7, is
    # preempted (26 after the three decodes); at t6 C is (A and B are at 10, C at 10)
    r = run([(0, 5, 6)] * 4, Wait(2), M=30)
    assert [k.kv_tokens for k in r.kv_log[:5]] == [10, 22, 26, 30, 26]
    assert [k.preemptions for k in r.kv_log[:7]] == [0, 0, 0, 0, 1, 0, 1]
    assert r.summary["threshold_error"] == r.summary["preemptions"] == 2
    # the victims restart as a group, the latest preemption first (SPEC 7.2), each
    # with its decoded tokens as prompt (keep): C 5 + 4, D 5 + 2
    assert r.batch_log[7].prefill == ((2, 9), (3, 7))
    assert "threshold_error" not in run([(0, 5, 6)] * 4, "sarathi", M=30).summary


def saturated(n, count, restart="keep"):
    """WAIT(n) on (20, 200) with M = 100,000, tau = 1 and ``count`` requests at t0."""
    workload = compose(Renewal(1.0), 20, 200, count=count, initial=count)
    return q.simulate(workload, Wait(n), bmax=None, kmax=None, latency=ONE,
                      kv=q.KV(capacity_tokens=100_000, restart=restart), batches=True,
                      requests=True)


def test_wait4_holds_the_fixed_point_and_finishes_four_per_iteration():
    # SPEC 7.8.3-7.8.4: g = 201 * 20 + 200 * 201 / 2 = 24,120; a group starts each
    # iteration and lives 201, so once 201 groups overlap the KV after allocation
    # is sum over ages 0..200 of 4 (20 + age) = 4 g = 96,480 <= 100,000: no
    # preemption ever, and from iteration 201 on exactly 4 finish per iteration
    g = 201 * 20 + 200 * 201 // 2
    assert kv_area(20, 200) == g == 24_120 and wait_thresholds([(20, 200, 1)], 100_000) == [4]
    r = saturated(4, 1200, restart="scratch")
    s = r.summary
    assert s["preemptions"] == s["threshold_error"] == 0
    assert s["kv_max"] == 4 * g == 96_480
    assert {k.kv_tokens for k in r.kv_log[200:300]} == {96_480}
    finished = collections.Counter(x.finished for x in r.request_log)
    assert set(finished.values()) == {4}
    assert sorted(finished) == [t * 10**9 for t in range(201, 501)]


def test_wait5_is_too_big_for_the_cache():
    # 5 g = 120,600 > 100,000: once about 170 groups overlap (5 (20 k + k (k - 1) / 2)
    # tokens for k groups) the quota overflows memory and preempts
    s = saturated(5, 1000).summary
    assert s["threshold_error"] == s["preemptions"] > 0 and s["completed"] == 1000


# -- Nested WAIT ---------------------------------------------------------------
def test_nested_quotas_closed_form():
    # vp = 10, lengths 10 and 30 equally likely: segment areas sum_{x=10}^{20} x = 165
    # and sum_{x=21}^{40} x = 610; survival 1, 1/2; E[g] = 165 + 305 = 470, the mean of
    # g(10, 10) = 165 and g(10, 30) = 775
    assert (kv_area(10, 10) + kv_area(10, 30)) / 2 == 470
    assert nested_wait_quotas(10, [10, 30], [0.5, 0.5], 10_000) == [10_000 // 470, 5_000 // 470]
    assert nested_wait_quotas(10, [10, 30], [1, 1], 10_000, headroom=600) == [20, 10]
    # one length is WAIT (tokens and blocks)
    for block in (1, 16):
        assert nested_wait_quotas(20, [200], [1], 100_000, block_size=block) == \
            wait_thresholds([(20, 200, 1)], 100_000, block_size=block)
    with pytest.raises(ValueError, match="lengths must be increasing"):
        nested_wait_quotas(10, [30, 10], [1, 1], 1000)
    with pytest.raises(ValueError, match="probs must give one weight per length"):
        nested_wait_quotas(10, [10, 30], [1], 1000)


NESTED = [(0, 1, 2 if i % 2 == 0 else 5) for i in range(8)]  # A(2) B(5) C(2) D(5) ...


def decoded_at(result, rid):
    return [b.start / 1e9 for b in result.batch_log if rid in b.decode]


def test_nested_wait_pauses_at_a_boundary_until_a_group_forms():
    # lengths 2 < 5, two per stage; pairs start at t0, t1, t2, t3.  B (1) has 2
    # tokens at t3 and pauses alone (it keeps its KV); D (3) reaches the boundary
    # at t4 and the pair advances together; F (5) and H (7) likewise at t6.  A
    # ninth request at t100 keeps the arrivals open meanwhile.
    policy = Wait(lengths=[2, 5], stages=[2, 2], idle="decode")
    r = run(NESTED + [(100, 1, 2)], policy)
    assert decoded_at(r, 1) == [1.0, 2.0, 4.0, 5.0, 6.0]
    assert decoded_at(r, 3) == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert decoded_at(r, 5)[2] == decoded_at(r, 7)[2] == 6.0 and 5.0 not in decoded_at(r, 5)
    assert r.summary["completed"] == 9
    # once the arrivals are over a paused request advances alone
    assert decoded_at(run(NESTED, policy), 1) == [1.0, 2.0, 3.0, 4.0, 5.0]


# -- command line --------------------------------------------------------------
def run_json(capsys, *argv):
    assert main(list(argv) + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


SATURATED = ["run", "single", "--set", "scheduler=wait", "--set", "kv=100000", "--set", "vp=20",
             "--set", "vd=200", "--set", "kmax=none", "--set", "rate=100", "--set", "c=1",
             "--set", "a=0", "--set", "bmax=none", "--horizon", "260"]


def test_cli_wait_computes_its_quota_from_the_cache_or_takes_wait_n(capsys):
    row = run_json(capsys, *SATURATED)["rows"][0]
    assert row["kv_max"] == 4 * 24_120 and row["threshold_error"] == 0  # n = 4
    assert row["binding"] == "memory"
    row = run_json(capsys, *SATURATED, "--set", "wait_n=3")["rows"][0]
    assert row["kv_max"] == 3 * 24_120


@pytest.mark.parametrize("argv, match", [
    (["--set", "wait_n=2"], "wait_n needs scheduler=wait"),
    (["--set", "scheduler=wait"], "needs a KV cache"),
    (["--set", "scheduler=wait", "--set", "wait_n=0"], "wait_n must be an integer >= 1"),
])
def test_cli_refuses_bad_wait_settings(capsys, argv, match):
    assert main(["run", "single", "--horizon", "5", *argv]) == 2
    assert match in capsys.readouterr().err


@pytest.mark.slow
def test_wait4_saturated_serves_lambda_wait():
    # SPEC 7.8.3: t = 0.02 + 2e-5 b, arrivals above capacity: lambda_WAIT =
    # 4 / t(4 * 220) = 106.38 req/s with no preemption
    from llmqueue.models.arrivals import Poisson
    from llmqueue.theory.wait import lambda_wait
    latency = q.Staircase(0.02, 2e-5, 1)
    workload = compose(Poisson(110.0), 20, 200, seed=1, initial=500)
    s = q.simulate(workload, Wait(4), bmax=None, kmax=None, latency=latency, horizon=300,
                   warmup=150, kv=q.KV(capacity_tokens=100_000)).summary
    assert s["threshold_error"] == 0 and s["kv_max"] == 96_480
    assert s["throughput_requests_per_s"] == pytest.approx(
        lambda_wait([(20, 200, 1)], [4], latency), rel=0.002)
