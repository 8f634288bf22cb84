"""The prefix-caching reference experiments (Mooncake traces, capacity with
hits, Che's approximation): closed forms, short runs whose figures point the
right way, the long runs (marked slow) against the published figures within
their tolerances, ``--json`` and the figures."""

import json
import math
import os
import subprocess
import sys

import pytest
from conftest import check_figure

import llmqueue as q
from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result, Summary
from llmqueue.experiments import REGISTRY
from llmqueue.experiments import prefix_capacity as capacity
from llmqueue.experiments import prefix_che as che
from llmqueue.experiments import prefix_mooncake as mooncake
from llmqueue.plotting import plot_prefix_capacity, plot_prefix_che, plot_prefix_mooncake


def passed(checks):
    """Every check passed (the failing ones named in the assertion message)."""
    failing = [f"{c.name}: {c.detail}" for c in checks if not c.passed]
    assert not failing, failing
    return True


def agree(ours, ours_se, theirs, theirs_se):
    """Two means agree: apart by at most twice their combined standard error."""
    return abs(ours - theirs) <= 2 * math.hypot(ours_se or 0.0, theirs_se)


def cli(*argv):
    return subprocess.run([sys.executable, "-m", "llmqueue", *argv], capture_output=True,
                          text=True, cwd=os.path.dirname(__file__), timeout=300)


@pytest.fixture
def mooncake_dir(traces_dir):
    """The Mooncake traces; skips where ../shared/traces/mooncake is absent."""
    folder = os.path.join(traces_dir, "mooncake")
    if not all(os.path.isfile(os.path.join(folder, f)) for f in mooncake.FILES):
        pytest.skip("../shared/traces/mooncake is not here (a fresh clone has none)")
    return folder


def test_registered_after_the_memory_experiments():
    names = list(REGISTRY)
    order = ["prefix-mooncake", "prefix-capacity", "prefix-che"]
    assert [n for n in names if n in order] == order
    assert names.index("prefix-mooncake") > names.index("memory-waste")
    for name in order:  # runs of a fixed count: no horizon to take
        assert "horizon" not in REGISTRY[name].options and REGISTRY[name].horizon is None


# --- the Mooncake traces ----------------------------------------------------------
def test_mooncake_without_the_traces_names_the_missing_file(tmp_path, monkeypatch):
    monkeypatch.setattr(mooncake, "FOLDER", str(tmp_path / "mooncake"))
    missing = os.path.join(str(tmp_path / "mooncake"), "conversation_trace.jsonl")
    with pytest.raises(ValueError, match=f"path: {missing} is absent"):
        mooncake.run(mooncake.EXPERIMENT.resolve({}), RunOptions())
    proc = cli("run", "prefix-mooncake", "--set", f"path={tmp_path / 'nothing.jsonl'}")
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "nothing.jsonl is absent" in lines[0]


def test_mooncake_first_requests(mooncake_dir):
    params = mooncake.EXPERIMENT.resolve({"path": mooncake_dir, "limit": "600"})
    rows = mooncake.run(params, RunOptions())
    assert [label for label, _ in rows] == ["conversation unlimited", "conversation M=3,000,000",
                                            "synthetic unlimited", "synthetic M=3,000,000"]
    assert passed(mooncake.checks(rows))
    for _, result in rows:  # the first requests: no published figure to hold them to
        s = result.summary
        assert s["reference_ideal"] is None and s["requests"] == s["completed"] == 600
    unlimited, limited = rows[0][1].summary, rows[1][1].summary
    assert unlimited["prefix_hit_ratio"] == pytest.approx(unlimited["ideal_hit_ratio"])
    assert limited["prefix_hit_ratio"] < limited["ideal_hit_ratio"]


def test_mooncake_one_file(mooncake_dir):
    path = os.path.join(mooncake_dir, "synthetic_trace.jsonl")
    params = mooncake.EXPERIMENT.resolve({"path": path, "limit": "300", "kv": "1000000"})
    rows = mooncake.run(params, RunOptions())
    assert [label for label, _ in rows] == ["synthetic unlimited", "synthetic M=1,000,000"]
    assert passed(mooncake.checks(rows))


@pytest.mark.slow
def test_mooncake_whole_files(mooncake_dir):
    rows = mooncake.run(mooncake.EXPERIMENT.resolve({"path": mooncake_dir}), RunOptions())
    assert passed(mooncake.checks(rows))
    s = {label: result.summary for label, result in rows}
    for name, ideal, limited in (("conversation", 0.3733, 0.14), ("synthetic", 0.6504, 0.32)):
        full = s[f"{name} unlimited"]
        assert full["ideal_hit_ratio"] == pytest.approx(ideal, abs=0.00005)
        hit = full["prefix_hit_ratio"]
        assert ideal - 0.005 <= hit <= full["ideal_hit_ratio"] + 0.0005
        # "about 0.14 and 0.32": the independent stepper's 0.1436 and 0.3210
        assert s[f"{name} M=3,000,000"]["prefix_hit_ratio"] == pytest.approx(limited, abs=0.01)


# --- capacity with hits -------------------------------------------------------------
def test_capacity_closed_forms():
    th = capacity.theory()
    assert th["lambda_star_c"] == pytest.approx(13.06, abs=0.005)
    assert th["token_capacity"] == pytest.approx(512 / 0.15316)
    assert th["lambda_star_none"] == pytest.approx(th["token_capacity"] / 1280)
    assert th["gain"] == pytest.approx(5.0)
    # the no-cache run at 0.9 lambda*_c offers 4.5 times its capacity
    assert 0.9 * th["lambda_star_c"] / th["lambda_star_none"] == pytest.approx(4.5)


def test_capacity_short_run_points_the_right_way():
    params = capacity.EXPERIMENT.resolve({"count": "1000", "seeds": "1"})
    rows = capacity.run(params, RunOptions(seed=0))
    assert [label for label, _ in rows] == [name for name, _, _ in capacity.RUNS]
    s = [result.summary for _, result in rows]
    assert s[0]["prefix_hit_ratio"] > capacity.HIT_FLOOR < s[1]["prefix_hit_ratio"]
    assert s[2]["prefix_hit_ratio"] is None  # no cache
    assert s[0]["pending_slope"] < s[1]["pending_slope"] < s[2]["pending_slope"]
    assert s[2]["verdict"] == "unstable" and s[2]["fluid_backlog_slope"] == pytest.approx(
        0.9 * 13.0582 * 1280 - 3342.9, abs=2.0)
    assert all(r.series is not None for _, r in rows)   # the first seed's time series


@pytest.mark.slow
def test_capacity_full():
    rows = capacity.run(capacity.EXPERIMENT.resolve({}), RunOptions(seed=0))
    assert passed(capacity.checks(rows))
    stable, over, none = (result.summary for _, result in rows)
    # the published figures (3 seeds each, +- their spread) against ours (+- ours)
    assert agree(stable["prefix_hit_ratio"], stable["prefix_hit_ratio_se"], 0.887, 0.002)
    assert agree(stable["backlog_slope"], stable["backlog_slope_se"], -11, 67)
    assert agree(over["pending_slope"], over["pending_slope_se"], 1.24, 0.15)
    assert agree(none["backlog_slope"], none["backlog_slope_se"], 11_610, 310)
    assert none["fluid_backlog_slope"] == pytest.approx(11_700, abs=15)
    # an overloaded engine serves its capacity, with the cache and without
    assert over["served_rate"] == pytest.approx(over["lambda_star_c"], rel=0.03)
    assert none["served_rate"] == pytest.approx(none["lambda_star_none"], rel=0.03)


# --- Che's approximation ------------------------------------------------------------
def test_che_rate_is_three_tenths_of_the_capacity_without_the_cache():
    assert che.rate() == pytest.approx(0.3 * 3342.9 / 592, abs=0.001)
    assert che.rate() == pytest.approx(1.694, abs=0.0005)


def test_resident_tokens_is_littles_law_over_the_outputs():
    # one request of 20 + 5 tokens: after its prefill it holds blocks of 16 for
    # tokens 16..24 of its own (its prompt's first block is a full hash block)
    result = q.simulate(q.renewal(1.0, 20, 5, count=1), requests=True)
    [r] = result.requests()
    end = r.finished + 1.0
    assert che.resident_tokens(result, 0.0, end) == pytest.approx(
        16 * (r.finished - r.prefill_done) / end)
    assert che.resident_tokens(result, r.finished, end) == 0.0


def test_caches_are_whole_token_counts():
    assert che.caches_of("50000,20000") == [20_000, 50_000]
    with pytest.raises(ValueError, match="caches must be"):
        che.caches_of("20000,5")


def test_che_short_run_rises_with_the_cache():
    params = che.EXPERIMENT.resolve({"count": "3000", "caches": "20000,100000"})
    rows = che.run(params, RunOptions(seed=0))
    assert [label for label, _ in rows] == ["M=20,000", "M=100,000"]
    assert all(c.passed for c in che.checks(rows) if "rises" in c.name)
    for _, result in rows:   # 1,500 measured requests: a looser tolerance than 0.02
        s = result.summary
        assert abs(s["gap"]) <= 0.03
        assert 0 < s["resident_tokens"] < 100 < s["kv_mean"]   # outputs only: 16 each


@pytest.mark.slow
def test_che_full():
    rows = che.run(che.EXPERIMENT.resolve({}), RunOptions(seed=0))
    assert passed(che.checks(rows))
    assert [r.summary["kv"] for _, r in rows] == list(che.CACHES)


# --- --json ----------------------------------------------------------------------------
def rows_of(proc):
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    return doc["scenario"], [r["label"] for r in doc["rows"]], doc["checks"]


def test_json_of_che_and_capacity():
    name, labels, checks = rows_of(cli("run", "prefix-che", "--set", "count=300", "--set",
                                       "caches=20000", "--json"))
    assert name == "prefix-che" and labels == ["M=20,000"] and checks
    name, labels, checks = rows_of(cli("run", "prefix-capacity", "--set", "count=200", "--set",
                                       "seeds=1", "--seed", "2", "--json"))
    assert name == "prefix-capacity" and len(labels) == 3 and len(checks) == 4


def test_json_of_mooncake(mooncake_dir):
    name, labels, checks = rows_of(cli("run", "prefix-mooncake", "--set", "limit=100",
                                       "--set", f"path={mooncake_dir}", "--json"))
    assert name == "prefix-mooncake" and len(labels) == 4 and all(c["passed"] for c in checks)


# --- the figures ------------------------------------------------------------------------
def fake(series=None, **figures):
    return Result(Summary.from_mapping(figures), series=series)


def mooncake_rows():
    return [(f"{name} {kind}", fake(trace=f"{name}_trace.jsonl", unlimited=kind == "unlimited",
                                    kv=10**12 if kind == "unlimited" else 3_000_000,
                                    ideal_hit_ratio=0.4, prefix_hit_ratio=hit))
            for name in ("conversation", "synthetic")
            for kind, hit in (("unlimited", 0.4), ("M", 0.15))]


def capacity_rows():
    series = [(t * 10**9, t, 0) for t in range(0, 50, 5)]
    common = dict(lambda_star_c=13.06, lambda_star_none=2.61, gain=5.0, fluid_slope=0.5)
    return [(name, fake(series, load=load, rate=load * 13.06, prefix=prefix,
                        served_rate=served, **common))
            for name, load, prefix, served in (("0.90 lambda*_c", 0.9, True, None),
                                               ("1.10 lambda*_c", 1.1, True, 13.1),
                                               ("0.90, no cache", 0.9, False, 2.6))]


def che_rows():
    return [(f"M={M}", fake(kv=M, prefix_hit_ratio=hit, che_hit_ratio=hit + 0.01,
                            hit_bound=0.889)) for M, hit in ((20_000, 0.38), (100_000, 0.76))]


FIGURES = {
    "plot_prefix_mooncake": (1, lambda a: plot_prefix_mooncake(
        mooncake_rows(), "mooncake", ax=a[0] if a else None)),
    "plot_prefix_capacity": (2, lambda a: plot_prefix_capacity(capacity_rows(), "capacity",
                                                               axes=a)),
    "plot_prefix_che": (1, lambda a: plot_prefix_che(
        che_rows(), ([10_000, 50_000, 200_000], [0.3, 0.6, 0.85]), "che",
        ax=a[0] if a else None)),
}


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figures_draw_into_given_axes_with_units(name):
    check_figure(*FIGURES[name])
