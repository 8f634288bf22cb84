"""``plan`` with the SLOs of SPEC 8.5 beyond TTFT/TPOT (largest inter-token gap,
scheduling delay), per-class SLOs on a mix of request classes, and the memory
bound ``lambda_kv`` of an engine with a KV cache (SPEC 8.6-8.7)."""

import json

import pytest

import llmqueue as q
from llmqueue.cli.main import main
from llmqueue.planning import EngineSpec, Traffic, plan
from llmqueue.planning.replicate import Task, run_replication
from llmqueue.planning.spec import arrivals, request_classes
from llmqueue.theory.bounds import memory_bound, smallest_iteration, zero_load
from llmqueue.theory.slo import SLO, attainment

TRAFFIC = Traffic(q.Geometric(129), q.Geometric(112))
MIX = Traffic.mix({"chat": (0.7, q.Geometric(129), q.Geometric(112)),
                   "code": (0.3, q.Geometric(600), q.Geometric(30))})
ENGINE = EngineSpec("sarathi", bmax=512, kmax=None)
QUICK = dict(n_requests=200, reps=2, max_reps=4)


def simulated_records(traffic, rate, n_warm, n_meas, seed=0, replication=0):
    """The measured requests of a replication, simulated again by ``simulate``
    from the same draws, as SLO records."""
    n = n_warm + n_meas
    unit, vp, vd, _ = arrivals(traffic, n, seed, replication)
    classes = request_classes(traffic, n, seed, replication) or [None] * n
    rows = [(float(t) / rate, int(p), int(d), c) for t, p, d, c in zip(unit, vp, vd, classes)]
    result = q.simulate(q.from_list(rows), "sarathi", bmax=512, kmax=None, requests=True)
    return result.latencies()[n_warm:]


@pytest.mark.parametrize("traffic, slo", [
    (TRAFFIC, SLO(ttft=1.0, tbt=0.2)),
    (TRAFFIC, SLO(tpot=0.15, sched_delay=0.2)),
    (MIX, {"chat": SLO(tbt=0.17, tpot=0.15), "code": SLO(ttft=0.8, sched_delay=0.3)}),
])
@pytest.mark.parametrize("mode", ["joint", "quantile"])
def test_a_replication_judges_requests_as_the_slo_theory_does(traffic, slo, mode):
    # the plan's monitor (request timestamps, the recorder's largest gaps and
    # scheduling delays) against theory.slo.attainment on simulate()'s records
    for rate in (8.0, 12.5):
        run = run_replication(Task(traffic, ENGINE, slo, rate, 0, 0, 30, 300, 0.9, mode, False))
        expected = attainment(simulated_records(traffic, rate, 30, 300), slo, mode=mode)
        if mode == "joint":
            assert run.attainment == pytest.approx(expected.joint)
        else:
            parts = expected.by_class.values() if expected.by_class else [expected]
            assert run.attainment == pytest.approx(
                min(v for a in parts for v in a.per_metric.values()))
        assert not run.stopped


def test_tbt_gating_lowers_attainment_where_gaps_exceed_it():
    loose = run_replication(Task(TRAFFIC, ENGINE, SLO(ttft=1.0), 11.0, 0, 0, 30, 300, 0.9,
                                 "joint", False))
    tight = run_replication(Task(TRAFFIC, ENGINE, SLO(ttft=1.0, tbt=0.1), 11.0, 0, 0, 30, 300,
                                 0.9, "joint", False))
    # every iteration of a busy sarathi-512 lasts t(512) = 0.153 s > 0.1 s: only
    # requests of one output token (no gap) can meet the gap SLO
    assert tight.attainment < loose.attainment
    assert tight.tbt[0] == pytest.approx(q.Staircase().tokens_time(512))


def test_plan_with_a_gap_slo_reports_gaps_at_lo():
    r = plan(TRAFFIC, ENGINE, SLO(ttft=1.0, tpot=0.15, tbt=0.5), **QUICK)
    assert 0 < r.goodput <= r.bounds.lambda_tok
    assert r.config["slo"] == {"ttft": 1.0, "tpot": 0.15, "tbt": 0.5}
    mean, _ = r.at_lo["tbt_p90"]
    assert q.Staircase().tokens_time(1) <= mean <= 0.5


def test_per_class_plan():
    slo = {"chat": SLO(ttft=1.0, tpot=0.15), "code": SLO(ttft=3.0)}
    r = plan(MIX, ENGINE, slo, **QUICK)
    a0 = 0.7 * zero_load(ENGINE.latency, 512, q.Geometric(129), q.Geometric(112),
                         slo["chat"]).attainment + \
        0.3 * zero_load(ENGINE.latency, 512, q.Geometric(600), q.Geometric(30),
                        slo["code"]).attainment
    assert r.attainment_zero_load == pytest.approx(a0)
    assert r.config["slo"] == {"chat": {"ttft": 1.0, "tpot": 0.15}, "code": {"ttft": 3.0}}
    assert 0 < r.goodput <= r.bounds.lambda_tok
    json.dumps(r.as_dict())


def test_per_class_slo_must_name_the_classes():
    with pytest.raises(ValueError, match="one entry per class"):
        plan(MIX, ENGINE, {"chat": SLO(ttft=1.0)}, **QUICK)


def test_the_bracket_includes_the_memory_bound():
    kv = q.KV(capacity_tokens=10_000)
    r = plan(TRAFFIC, EngineSpec("sarathi", bmax=512, kmax=None, kv=kv), SLO(ttft=1.0, tpot=0.15),
             **QUICK)
    expected = memory_bound(10_000, smallest_iteration(ENGINE.latency), q.Geometric(129),
                            q.Geometric(112))
    assert r.bounds.lambda_kv == pytest.approx(expected)
    assert expected < r.bounds.lambda_tok  # the memory binds here
    first = r.probes[0]
    assert first.rate == pytest.approx(expected) and first.reps == 0 and first.decision == "fail"
    assert r.goodput < expected
    assert r.as_dict()["lambda_kv"] == pytest.approx(expected)
    without = plan(TRAFFIC, ENGINE, SLO(ttft=1.0, tpot=0.15), **QUICK)
    assert without.bounds.lambda_kv is None
    assert without.probes[0].rate == pytest.approx(without.bounds.lambda_tok)


def test_per_class_memory_bound_combines_the_classes():
    kv = q.KV(capacity_tokens=50_000)
    r = plan(MIX, EngineSpec("sarathi", bmax=512, kmax=None, kv=kv),
             {"chat": SLO(ttft=0.001), "code": SLO(ttft=0.001)}, **QUICK)  # infeasible: no runs
    t1 = smallest_iteration(ENGINE.latency)
    chat = memory_bound(50_000, t1, q.Geometric(129), q.Geometric(112))
    code = memory_bound(50_000, t1, q.Geometric(600), q.Geometric(30))
    assert r.infeasible and r.probes == ()
    assert r.bounds.lambda_kv == pytest.approx(1 / (0.7 / chat + 0.3 / code))


def test_cli_plan_tbt_and_kv(capsys):
    args = ["plan", "--set", "bmax=512", "--set", "kmax=none", "--set", "vp=geometric:129",
            "--set", "vd=geometric:112", "--set", "kv=10000", "--ttft", "1", "--tbt", "0.5",
            "--requests", "100", "--reps", "2", "--json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    expected = memory_bound(10_000, smallest_iteration(q.Staircase()), q.Geometric(129),
                            q.Geometric(112))
    assert doc["lambda_kv"] == pytest.approx(expected)
    assert doc["config"]["slo"] == {"ttft": 1.0, "tbt": 0.5}
    assert "capacity_tokens=10000" in doc["config"]["kv"]
    assert doc["probes"][0]["rate"] == pytest.approx(expected)


def test_cli_plan_kv_auto_reads_the_gpu(capsys):
    roofline = q.Roofline("H100", "llama-3-8b")
    args = ["plan", "--set", "latency=roofline", "--set", "gpu=H100", "--set",
            "model=llama-3-8b", "--set", "bmax=2048", "--set", "vp=512", "--set", "vd=256",
            "--set", "kv=auto", "--ttft", "0.001", "--json"]  # infeasible: bounds only
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["infeasible"]
    assert f"capacity_tokens={roofline.kv_capacity}" in doc["config"]["kv"]
    assert doc["lambda_kv"] == pytest.approx(memory_bound(
        roofline.kv_capacity, smallest_iteration(roofline), q.Fixed(512), q.Fixed(256)))
    staircase = ["plan", "--set", "bmax=2048", "--set", "kv=auto", "--ttft", "0.001"]
    assert main(staircase) == 2  # no GPU named: no capacity to read
    assert "kv=auto" in capsys.readouterr().err


def test_fewest_engines_with_a_kv_cache_start_at_the_memory_bound():
    from llmqueue.planning import plan_engines
    kv = q.KV(capacity_tokens=10_000)
    r = plan_engines(20.0, TRAFFIC, EngineSpec("sarathi", bmax=512, kmax=None, kv=kv),
                     SLO(ttft=1.0, tpot=0.15), **QUICK)
    lambda_kv = r.bounds.lambda_kv
    assert lambda_kv < r.bounds.lambda_tok
    assert r.k_lb == int(20.0 // lambda_kv) + 1 == 3
    assert r.k_min is not None and r.k_min >= r.k_lb
    assert r.probes[0].engines == r.k_lb - 1 and r.probes[0].reps == 0  # below K_lb: no run
