"""Capacity planning (SPEC 8.7-8.10): plan, plan_engines, the CLI and the figure."""

import importlib
import json
import math
from concurrent.futures import ProcessPoolExecutor

import pytest

import llmqueue as q
from llmqueue.cli.main import main
from llmqueue.planning import EngineSpec, Traffic, parse_size, plan, plan_engines
from llmqueue.planning.engines import k_lower
from llmqueue.planning.probe import Rules, probe, t_quantile
from llmqueue.planning.replicate import Task
from llmqueue.planning.spec import arrivals
from llmqueue.theory.slo import SLO
from llmqueue.theory.stats import t975

# E8.5: the paper's staircase, bmax 512, no kmax, geometric 129/112, TTFT 1 s, TPOT 0.15 s
TRAFFIC = Traffic(q.Geometric(129), q.Geometric(112))
E85 = SLO(ttft=1.0, tpot=0.15)
LAMBDA_TOK = 13.87
QUICK = dict(n_requests=300, reps=3)


def engine(policy):
    return EngineSpec(policy, bmax=512, kmax=None)


@pytest.fixture(scope="module")
def quick():
    return {p: plan(TRAFFIC, engine(p), E85, **QUICK)
            for p in ("sarathi", "fastertransformer")}


def test_e85_short_hard_items(quick):
    for name, r in quick.items():
        assert r.goodput <= LAMBDA_TOK, name
        assert r.bounds.lambda_tok == pytest.approx(13.871, abs=1e-3)
        assert r.attainment_zero_load == 1.0
        first = r.probes[0]  # the bound: a FAIL without any simulation
        assert first.rate == pytest.approx(r.bounds.lambda_tok)
        assert first.decision == "fail" and first.reps == 0 and first.simulated_requests == 0
        assert all(p.rate < first.rate for p in r.probes[1:])
    assert quick["sarathi"].goodput > quick["fastertransformer"].goodput
    assert quick["fastertransformer"].goodput < 0.25


def test_result_reports(quick):
    r = quick["sarathi"]
    doc = r.as_dict()
    for key in ("goodput", "lo", "hi", "crossing", "lambda_tok", "attainment_zero_load",
                "probes"):
        assert key in doc
    assert r.lo == r.goodput < r.hi
    at = r.at_lo
    assert at["rate"] == r.lo and at["attainment"] >= 0.9
    assert at["ttft_p90"][0] < 1.0 and 0 < at["busy_fraction"][0] <= 1
    json.dumps(doc)


def test_same_arguments_same_result():
    a = plan(TRAFFIC, engine("orca"), E85, n_requests=150, reps=2, max_probes=4)
    b = plan(TRAFFIC, engine("orca"), E85, n_requests=150, reps=2, max_probes=4)
    assert a == b and a.probes == b.probes


def test_common_random_numbers():
    t1, p1, d1, s1 = arrivals(TRAFFIC, 50, 7, 2)
    t2, p2, d2, s2 = arrivals(TRAFFIC, 50, 7, 2)
    assert (p1 == p2).all() and (d1 == d2).all() and (t1 == t2).all() and s1 == s2
    # the same unit-rate draws at two rates: the first arrivals have the same sizes
    base = Task(TRAFFIC, engine("sarathi"), E85, 1.0, 0, 7, 5, 20, 0.9, "joint", True)
    from llmqueue.planning.replicate import run_replication
    from dataclasses import replace
    slow, fast = (run_replication(replace(base, rate=r)) for r in (2.0, 8.0))
    assert slow.simulated_requests == fast.simulated_requests == 25
    t3, _, _, _ = arrivals(TRAFFIC, 50, 7, 3)
    assert not (t3 == t1).all()  # another replication, other draws


def test_early_stop_same_decision_less_work():
    rules = Rules(0.9, 0.95, 3, 6)
    base = Task(TRAFFIC, engine("fastertransformer"), E85, 1.0, 0, 0, 30, 300, 0.9, "joint",
                True)
    from dataclasses import replace
    early = probe(base, 3.0, 1, rules)
    full = probe(replace(base, early_stop=False), 3.0, 1, rules)
    assert early.decision == full.decision == "fail"
    assert early.stopped > 0 and full.stopped == 0
    assert early.simulated_time < full.simulated_time
    for a, b in zip(early.runs, full.runs):  # U_r bounds A_r from above
        assert a.attainment >= b.attainment - 1e-12


def test_infeasible_slo_before_any_simulation():
    r = plan(TRAFFIC, engine("sarathi"), SLO(ttft=0.01, tpot=0.15), **QUICK)
    assert r.infeasible and r.goodput == 0 and r.probes == ()
    assert "infeasible" in r.reason


@pytest.mark.parametrize("kwargs, name", [
    (dict(target=1.0), "target"), (dict(target=0), "target"), (dict(reps=1), "reps"),
    (dict(router="nearest"), "router"), (dict(mode="mean"), "mode"),
    (dict(slo=SLO()), "slo"), (dict(slo={"chat": E85}), "no classes"),
    (dict(n_requests=1), "n_requests"), (dict(engines=0), "engines"),
    (dict(n_requests=10**8), "n_requests=100000000 .* the limit is 10,000,000")])
def test_bad_input_names_the_parameter(kwargs, name):
    slo = kwargs.pop("slo", E85)
    with pytest.raises(ValueError, match=name):
        plan(TRAFFIC, engine("sarathi"), slo, **kwargs)


def test_t_quantiles():
    for df in (1, 2, 5, 19):
        assert t_quantile(0.975 + 1e-13, df) == pytest.approx(t975(df), rel=1e-5)
    assert t_quantile(0.95, 4) == pytest.approx(2.131847, rel=1e-5)


def test_size_law_strings():
    assert parse_size("vp", "7").mean == 7
    assert parse_size("vp", "uniform:2:4").mean == 3  # both ends included
    assert parse_size("vd", "geometric:112").mean == 112
    assert parse_size("vd", "lognormal:512:1").mean == 512
    with pytest.raises(ValueError, match="vd"):
        parse_size("vd", "poisson:3")


def test_serial_and_pool_agree():
    kw = dict(n_requests=100, reps=2, max_probes=3)
    serial = plan(TRAFFIC, engine("sarathi"), E85, **kw)
    with ProcessPoolExecutor(2) as pool:
        pooled = plan(TRAFFIC, engine("sarathi"), E85, executor=pool, **kw)
    assert serial == pooled


def test_plan_engines_short():
    assert k_lower(39, LAMBDA_TOK) == 3 == k_lower(39, 13.871)
    r = plan_engines(39, TRAFFIC, engine("sarathi"), E85, n_requests=200, reps=2,
                     price=2.21)
    assert r.k_lb == 3 and r.k_min is not None and r.k_min >= r.k_lb
    passed = {p.engines: p for p in r.probes}[r.k_min]
    assert passed.decision == "pass" and passed.mean - passed.hw >= 0.9
    assert r.cost is not None and r.cost.per_hour == pytest.approx(r.k_min * 2.21)
    assert 0 < r.load < 1


def test_cli_plan_json(capsys):
    code = main(["plan", "--set", "scheduler=sarathi", "--set", "bmax=512", "--set",
                 "kmax=none", "--set", "vp=geometric:129", "--set", "vd=geometric:112",
                 "--ttft", "1", "--tpot", "0.15", "--requests", "200", "--reps", "2",
                 "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    for key in ("goodput", "lo", "hi", "crossing", "lambda_tok", "attainment_zero_load",
                "probes"):
        assert key in doc
    assert 0 < doc["goodput"] <= doc["lambda_tok"]


def test_cli_infeasible_and_bad_input(capsys):
    args = ["plan", "--set", "bmax=512", "--set", "vp=129", "--set", "vd=112"]
    assert main(args + ["--ttft", "0.01", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["goodput"] == 0 and doc["infeasible"] and doc["reason"]
    assert main(args + ["--ttft", "0.01"]) == 0
    assert "infeasible" in capsys.readouterr().out
    assert main(args + ["--ttft", "1", "--target", "1.5"]) == 2
    assert main(args + ["--ttft", "1", "--tbt", "-0.2"]) == 2
    assert main(args + ["--ttft", "1", "--set", "vd=uniform:9"]) == 2
    capsys.readouterr()
    assert main(args + ["--ttft", "1", "--workers", "0"]) == 2
    assert "--workers must be an integer >= 1" in capsys.readouterr().err
    assert main(args + ["--ttft", "1", "--router", "jsq"]) == 2  # without --engines-for
    assert "give --engines-for RATE too" in capsys.readouterr().err


def test_plot_capacity(quick, tmp_path):
    pytest.importorskip("matplotlib")
    from llmqueue.plotting import plot_capacity, save
    fig = plot_capacity(list(quick.values()))
    assert len(fig.axes) >= 2
    assert save(fig, str(tmp_path / "cap.png"))


@pytest.mark.slow
def test_e85_full_ordering():
    goodput = {p: plan(TRAFFIC, engine(p), E85, n_requests=3000, reps=5).goodput
               for p in ("sarathi", "orca", "vllm", "fastertransformer")}
    assert all(g <= LAMBDA_TOK for g in goodput.values())
    assert goodput["sarathi"] > goodput["orca"] > goodput["vllm"] > \
        goodput["fastertransformer"]


@pytest.mark.slow
def test_e86_routers():
    k = {router: plan_engines(39, TRAFFIC, engine("sarathi"), E85, router=router,
                              n_requests=3600, reps=3).k_min
         for router in ("jsq-tokens", "random")}
    assert k["jsq-tokens"] is not None and k["random"] is not None
    assert 3 <= k["jsq-tokens"] <= k["random"]
    assert not math.isnan(k["jsq-tokens"])


def test_strict_wait_drains_at_the_end_of_each_replication():
    """Strict WAIT idles until its quota of requests is present, and drains
    once the arrivals are over (SPEC 7.5).  The planner never said they were
    over, so the last requests of every replication waited for ever, counted
    as misses: goodput 0 at every rate.  At a quarter of lambda_tok = 13.87
    req/s WAIT's TTFT is far below 5 s (it waits for a group of whole prompts,
    of some tenths of a second at this rate)."""
    # quota 4: g = 112 * 129 + 112 * 113 / 2 = 20,776 tokens each, 4 g <= 100,000
    wait = EngineSpec(q.Wait(n=4), bmax=512, kmax=None, kv=q.KV(capacity_tokens=100_000))
    r = plan(Traffic(q.Fixed(129), q.Fixed(112)), wait, SLO(ttft=5.0), n_requests=300, reps=2)
    assert r.attainment_zero_load == 1.0
    assert r.goodput > 0.25 * LAMBDA_TOK


def test_a_boundary_before_anything_passed_searches_below(monkeypatch):
    # An engine that meets the SLO below 9 req/s and cannot be told from the target
    # above: SPEC 8.7 stops at the first boundary probe, which for a model not of the
    # batch size alone is the first probe, at 1.1 times the bound, and answered a
    # goodput of 0.  The search now bisects below it until a rate passes.
    planning = importlib.import_module("llmqueue.planning.plan")  # the module, not plan()

    def fake(base, rate, engines, rules, executor, bar, above_bound=False):
        return planning.Probe(rate, engines, 3, 0.95 if rate < 9 else 0.9, 0.01,
                              planning.PASS if rate < 9 else planning.BOUNDARY)
    monkeypatch.setattr(planning, "probe", fake)
    r = plan(TRAFFIC, EngineSpec("sarathi", bmax=512, kmax=None, latency=q.StepModel()), E85)
    assert not r.bounds.exact  # the step model's time depends on the split: approximate
    first = r.probes[0]
    assert first.rate == pytest.approx(1.1 * r.bounds.lambda_tok)
    assert first.decision == "boundary"
    assert 0 < r.goodput < 9 and r.probes[-1].decision == "boundary"
    assert [p.decision for p in r.probes].count("pass") >= 1
