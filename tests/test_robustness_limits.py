"""Issue 18, round 2: limits on engines and heat-map cells, and the memory and
planning features' bad input.  From the command line each is exit code 2 with
one line on stderr (or a one-line warning or message where the issue asks for
one), never a traceback or a hang; from the API a ``ValueError``."""

import json
import subprocess
import sys
import time

import pytest

import llmqueue as q
from llmqueue.cli.main import main
from llmqueue.common import limits
from llmqueue.hardware.specs import ModelShape


def one_line_error(argv, capsys, fragment):
    """``main(argv)`` fails with exit code 2, one stderr line holding ``fragment``."""
    start = time.perf_counter()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmqueue: error: ") and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and fragment in err, err
    assert time.perf_counter() - start < 10  # refused before anything long runs


@pytest.mark.parametrize("argv, fragment", [
    # engines: networks and the plan's searches over K
    (["run", "parallel", "--set", "engines=100000000"], "LLMQUEUE_MAX_ENGINES"),
    (["run", "disaggregated", "--set", "gpus=100000000"], "LLMQUEUE_MAX_ENGINES"),
    (["run", "engines", "--set", "rate=1e9"], "(K_lb) would hold 72,092,891 engines"),
    (["plan", "--ttft", "1", "--engines-for", "1e9"], "LLMQUEUE_MAX_ENGINES"),
    (["plan", "--ttft", "1", "--engines-for", "0"], "--engines-for must be"),
    # events per simulated second: sub-tick batch times and gaps, huge rates
    (["run", "single", "--set", "c=0", "--set", "a=1e-300"], "batch time <= 0"),
    (["run", "single", "--set", "gap=1e-300"], "LLMQUEUE_MAX_REQUESTS"),
    (["run", "kmax-point", "--set", "gap=1e-9"], "LLMQUEUE_MAX_REQUESTS"),
    (["run", "kmax-region", "--set", "gap=1e-9"], "LLMQUEUE_MAX_REQUESTS"),
    # capacity below one block
    (["run", "single", "--set", "kv=8", "--set", "kv_block=16"],
     "(kv on the command line) must hold at least one block"),
    (["capacity", "--set", "kv=8", "--set", "kv_block=16"], "at least one block"),
    (["plan", "--ttft", "1", "--set", "kv=8", "--set", "kv_block=16"], "at least one block"),
    # WAIT quotas of 0
    (["run", "single", "--scheduler", "wait", "--set", "kv=10000", "--set", "wait_n=0"],
     "wait_n must be"),
    (["run", "single", "--scheduler", "wait", "--set", "kv=10000", "--set", "wait_n=3,0"],
     "wait_n must be"),
    # unknown GPU or model names, and a model that does not fit
    (["run", "single", "--set", "latency=roofline", "--set", "gpu=Z100",
      "--set", "model=llama-3-8b"], "gpu must be one of"),
    (["run", "single", "--set", "latency=roofline", "--set", "gpu=H100",
      "--set", "model=gpt-9"], "model must be one of"),
    (["latency", "--gpu", "Z100", "--model", "llama-3-8b", "--prefill", "10"],
     "gpu must be one of"),
    (["latency", "--gpu", "L40S", "--model", "llama-3-70b", "--prefill", "10"],
     "model does not fit"),
    (["run", "single", "--set", "kv=auto", "--set", "gpu=L40S", "--set", "model=llama-3-70b"],
     "model does not fit"),
    (["plan", "--ttft", "1", "--set", "latency=roofline", "--set", "gpu=L40S",
      "--set", "model=llama-3-70b"], "model does not fit"),
    # no arrivals: a header-only trace, rate 0
    (["run", "trace", "--set", "path={empty}"], "holds no requests"),
    (["run", "single", "--set", "rate=0"], "rate must be"),
    (["capacity", "--set", "rate=0"], "rate must be"),
    (["plan", "--ttft", "1", "--set", "rate=0"], "rate cannot be set for plan"),
    (["plan", "--ttft", "1", "--set", "vp=empirical:{blank}"], "non-empty list"),
    (["plan", "--ttft", "1", "--requests", "0"], "n_requests must be"),
])
def test_bad_input_is_one_line_and_exit_2(argv, fragment, capsys, tmp_path):
    empty, blank = tmp_path / "empty.csv", tmp_path / "blank.txt"
    empty.write_text("arrival,prefill,decode\n")
    blank.write_text("")
    argv = [a.format(empty=empty, blank=blank) for a in argv]
    one_line_error(argv, capsys, fragment)


def test_a_heat_map_larger_than_the_cell_limit_is_refused(tmp_path, capsys, monkeypatch):
    """(The file has no horizon or warmup column: it plots all the same.)"""
    rows = ["bmax,kmax,scheduler,replicate,seed,scenario,label,pending_mean"]
    rows += [f"{b},{k},sarathi,0,1,single,x,{b * k}" for b in range(1, 6) for k in range(1, 6)]
    path = tmp_path / "s.csv"
    path.write_text("\n".join(rows) + "\n")
    argv = ["plot", str(path), "--x", "bmax,kmax", "--y", "pending_mean",
            "--out", str(tmp_path / "h.png")]
    monkeypatch.setenv("LLMQUEUE_MAX_CELLS", "24")
    one_line_error(argv, capsys, "5 x 5 = 25 cells; the limit is 24")
    monkeypatch.setenv("LLMQUEUE_MAX_CELLS", "25")
    assert main(argv) == 0 and (tmp_path / "h.png").exists()


def test_engine_limits_count_every_engine_and_can_be_raised(monkeypatch):
    monkeypatch.setenv("LLMQUEUE_MAX_ENGINES", "3")
    net = q.Network()
    net.add_replicas("a", 2)
    net.add_engine("b")
    with pytest.raises(ValueError, match="would hold 4 engines; the limit is 3"):
        net.add_engine("c")
    with pytest.raises(ValueError, match="would hold 5 engines"):
        net.add_replicas("d", 2)
    assert len(net.engines) == 3  # nothing half-built
    limits.check_engines(3)
    monkeypatch.setenv("LLMQUEUE_MAX_ENGINES", "0")
    with pytest.raises(ValueError, match="LLMQUEUE_MAX_ENGINES must be an integer >= 1"):
        limits.check_engines(1)
    monkeypatch.delenv("LLMQUEUE_MAX_ENGINES")
    limits.check_engines(limits.MAX_ENGINES)
    with pytest.raises(ValueError, match="LLMQUEUE_MAX_ENGINES"):
        limits.check_engines(limits.MAX_ENGINES + 1)


def test_the_engines_search_stops_at_the_limit(monkeypatch):
    """``plan_engines`` probes no pool beyond the limit: with K_lb = 3 and a
    limit of 3, a failing K_lb leaves K_min unknown after one probe."""
    from llmqueue.planning import engines as planning
    monkeypatch.setenv("LLMQUEUE_MAX_ENGINES", "3")
    probed = []

    def fail(base, rate, k, rules, executor, bar):
        probed.append(k)
        return planning.Probe(rate, k, 0, None, None, planning.FAIL)
    monkeypatch.setattr(planning, "probe", fail)
    spec = q.EngineSpec(bmax=512, kmax=None, latency=q.Staircase())
    traffic = q.Traffic(q.Geometric(129), q.Geometric(112))
    result = planning.plan_engines(30.0, traffic, spec, q.SLO(ttft=1.0), reps=2)
    assert result.k_lb == 3 and probed == [3] and result.k_min is None
    with pytest.raises(ValueError, match="the smallest pool .K_lb. would hold 4 engines"):
        planning.plan_engines(45.0, traffic, spec, q.SLO(ttft=1.0), reps=2)


def test_a_plan_where_nothing_passes_stops_at_the_floor(monkeypatch):
    """If no probe passes, bisection halves the rate only down to FLOOR of the
    bound (each probe's span grows as 1/rate), and says so."""
    import importlib
    planning = importlib.import_module("llmqueue.planning.plan")
    rates = []

    def fail(base, rate, k, rules, executor, bar, above_bound=False):
        rates.append(rate)
        return planning.Probe(rate, k, 2, 0.0, 0.0, planning.FAIL)
    monkeypatch.setattr(planning, "probe", fail)
    spec = q.EngineSpec(bmax=512, kmax=None, latency=q.Staircase())
    result = planning.plan(q.Traffic(100, 100), spec, q.SLO(ttft=10.0), reps=2)
    bound = result.bounds.limit
    assert result.goodput == 0.0 and "no rate passed" in result.reason
    # halving from the bound: the last probe is the first one below FLOOR * bound
    assert rates == [bound / 2**j for j in range(1, 12)]
    assert rates[-1] < planning.FLOOR * bound <= rates[-2]


def test_requests_that_never_fit_the_cache_count_as_misses_at_zero_load():
    """``A_0`` with a cache of 1000 tokens: a request of ``vp + 990`` tokens fits
    when ``vp <= 10``, which for a geometric prompt of mean 129 (on 1, 2, ...)
    has chance ``1 - (128/129)^10``."""
    from llmqueue.planning.plan import bounds_of
    kv = q.KV(1000)
    spec = q.EngineSpec(bmax=128, kmax=100, latency=q.Staircase(), kv=kv)
    bounds = bounds_of(q.Traffic(q.Geometric(129), 990), spec, q.SLO(ttft=100.0), seed=0)
    assert bounds.attainment_zero_load == pytest.approx(1 - (128 / 129) ** 10, abs=0.01)
    assert bounds.infeasible(0.9)


@pytest.mark.parametrize("argv, expected", [
    # every request larger than the cache: infeasible at once, not a search without end
    (["plan", "--ttft", "1", "--set", "kv=100"], "count as misses"),
    (["plan", "--ttft", "1e-9"], "infeasible at every rate"),
    (["plan", "--tpot", "1e-9", "--engines-for", "1e9"], "infeasible at every rate"),
])
def test_an_slo_infeasible_at_every_rate_is_a_prompt_message(argv, expected, capsys):
    start = time.perf_counter()
    assert main(argv) == 0
    out = capsys.readouterr()
    assert expected in out.out and len(out.out.strip().splitlines()) == 1
    assert time.perf_counter() - start < 10


def test_an_infeasible_plan_is_strict_json(capsys):
    assert main(["plan", "--ttft", "1e-9", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out, parse_constant=lambda token: 1 / 0)
    assert doc["infeasible"] is True and doc["goodput"] == 0.0


def test_requests_larger_than_memory_are_a_warning_and_ignored():
    proc = subprocess.run([sys.executable, "-m", "llmqueue", "run", "single", "--set",
                           "kv=1000", "--set", "vp=2000", "--set", "vd=10", "--horizon", "10",
                           "--json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "never fit" in proc.stderr
    summary = json.loads(proc.stdout)["rows"][0]
    assert summary["completed"] == 0 and summary["ignored"] == summary["arrivals"] > 0


@pytest.mark.parametrize("text, fragment", [
    ("not json", "not valid JSON"),
    ("", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"hidden_size": 4096}', "missing key 'num_hidden_layers'"),
    ('{"num_hidden_layers": 32, "hidden_size": -4096}', "hidden_size must be an integer >= 1"),
    ('{"num_hidden_layers": NaN}', "num_hidden_layers must be an integer >= 1"),
    ('{"num_hidden_layers": 1e30}', "num_hidden_layers must be an integer >= 1"),
])
def test_a_malformed_config_json_is_a_value_error_naming_the_file(text, fragment, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=fragment) as caught:
        ModelShape.from_hf_config(str(path))
    assert str(path) in str(caught.value)


def test_a_config_folder_without_config_json_names_the_file(tmp_path):
    with pytest.raises(ValueError, match="cannot read .*config.json"):
        ModelShape.from_hf_config(str(tmp_path))


def test_an_overloaded_vllm_without_kmax_matches_the_reference(monkeypatch):
    """Hundreds of residents, a few served per iteration (issue 18 item 7): the
    residents that finish or complete their prompt leave their lists in place
    (binary search), and every batch and timestamp equals the plain stepper's."""
    import random

    from llmqueue.engine import residents
    from llmqueue.engine.reference import run_reference
    from llmqueue.policies.builtin import make_policy
    in_place = []
    without = residents._without

    def counted(items, gone, kept):
        out = without(items, gone, kept)
        in_place.append(out is items)
        return out
    monkeypatch.setattr(residents, "_without", counted)
    rng = random.Random(3)
    rows, t = [], 0.0
    for _ in range(400):
        t += rng.expovariate(40.0)
        rows.append((round(t, 3), rng.randint(1, 300), rng.randint(1, 60)))
    workload = q.from_list(rows)
    fast = q.simulate(workload, "vllm", bmax=64, kmax=None, batches=True, requests=True)
    batches, requests = run_reference(workload, make_policy("vllm"), bmax=64, kmax=None)
    assert fast.batch_log == batches

    def times(log):
        return sorted((r.rid, r.admitted, r.prefill_done, r.first_token, r.finished)
                      for r in log)
    assert times(fast.request_log) == times(requests)
    assert sum(in_place) > 50  # the in-place path ran, not only rebuilds


@pytest.mark.parametrize("build, fragment", [
    (lambda: q.KV(8, block_size=16), "at least one block"),
    (lambda: q.Wait(0), "n must be an integer quota >= 1"),
    (lambda: q.Wait({"a": 2, "b": 0}), "quota"),
    (lambda: q.hardware.gpu("Z100"), "gpu must be one of"),
    (lambda: q.hardware.model("gpt-9"), "model must be one of"),
])
def test_the_api_refuses_the_same_input_with_value_errors(build, fragment):
    with pytest.raises(ValueError, match=fragment):
        build()
