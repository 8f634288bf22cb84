"""Routing with prefixes: four engines with prefix caches behind routers that
do or do not read them.  The short runs check the direction of the hard
checks where it holds with a wide margin at 800 requests; the full runs
(8,000 requests, 3 seeds, and the cache too small for the blind routers) are
marked slow."""

import json
import os
import subprocess
import sys

import matplotlib.pyplot as plt
import pytest

from llmqueue.engine.options import RunOptions
from llmqueue.experiments import prefix_routing as pr
from llmqueue.plotting import plot_prefix_routing
from llmqueue.theory.prefix import lambda_star_cached


def params(**over):
    return pr.EXPERIMENT.resolve({k: str(v) for k, v in over.items()})


@pytest.fixture(scope="module")
def short():
    """Every router on seed 0's 800 requests."""
    return pr.run(params(requests=800, seeds=1), RunOptions(seed=0))


def test_rate_is_a_share_of_the_capacity_with_every_prefix_cached():
    p = params()
    assert pr.mean_sizes(p) == (1536 + 128, 1536, 128)
    assert pr.capacity(p) == pytest.approx(lambda_star_cached(512, 1664, 128, 1536))
    assert pr.capacity(p) == pytest.approx(13.06, abs=0.005)
    assert pr.arrival_rate(p) == pytest.approx(0.8 * 4 * 13.058, rel=1e-3)


def test_cache_aware_routers_find_more_and_answer_sooner(short):
    """800 requests, one seed: both cache-aware routers beat both blind ones on
    hit ratio (by 0.05 or more on seeds 0-7) and TTFT p90 (by 1.5x or more)."""
    checks = pr.checks(short)
    assert len(checks) == 4 and all(c.passed for c in checks), checks
    assert [r.summary["router"] for _, r in short] == list(pr.ROUTERS)
    for _, r in short:
        s = r.summary
        assert s["completed"] == 800 and s["seed"] == 0 and s["kv"] == 100_000
        assert s["tokens_min"] <= s["tokens_max"] and 0 <= s["tokens_spread"] < 0.5
        assert 0 < s["prefix_hit_ratio"] < s["hit_bound"] == pytest.approx(1536 / 1664)


def test_notes_give_means_and_the_order_of_the_prefix_routers(short):
    lines = pr.notes(short, params(requests=800, seeds=1))
    assert lines[0].startswith("41.79 req/s = 0.8 x 4 x lambda*_c")
    assert any(line.startswith("prefix-score against prefix-affinity:") for line in lines)


def test_the_weight_reaches_prefix_score():
    """With weight 0, prefix-score reads only the backlog: it routes as
    jsq-tokens does (ties to the lowest index in both), run for run."""
    p = params(requests=300, seeds=1, prefix_weight=0.0)
    score = pr.simulate_router(p, "prefix-score", 1).summary.as_dict()
    jsq = pr.simulate_router(p, "jsq-tokens", 1).summary.as_dict()
    assert score["prefix_weight"] == 0.0
    assert {k: v for k, v in score.items() if k not in ("router", "prefix_weight")} == \
        {k: v for k, v in jsq.items() if k != "router"}
    half = pr.simulate_router(params(requests=300, seeds=1), "prefix-score", 1).summary
    assert half["prefix_hit_ratio"] != score["prefix_hit_ratio"]


def test_a_weight_without_prefix_score_is_refused():
    with pytest.raises(ValueError, match="prefix_weight is read by router prefix-score only"):
        pr.run(params(router="random", prefix_weight=0.3), RunOptions())


def test_without_prefix_caching_the_same_arrivals_lose_their_ids():
    """prefix=false: no hits to compare, so no checks; the same arrivals."""
    p = params(requests=100, seeds=1, prefix="false")
    rows = pr.run(p, RunOptions(seed=2))
    assert [label for label, _ in rows] == [f"{r} seed 2" for r in pr.ROUTERS]
    assert all("prefix_hit_ratio" not in r.summary.as_dict() for _, r in rows)
    assert all(r.summary["completed"] == 100 for _, r in rows)
    assert pr.checks(rows) == []
    assert not any(line.startswith("prefix-score against") for line in pr.notes(rows, p))


def test_the_cli_runs_it_as_json():
    proc = subprocess.run([sys.executable, "-m", "llmqueue", "run", "prefix-routing", "--json",
                           "--set", "requests=200", "--set", "seeds=1", "--seed", "3"],
                          capture_output=True, text=True, cwd=os.path.dirname(__file__))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [row["label"] for row in doc["rows"]] == [f"{r} seed 3" for r in pr.ROUTERS]
    assert len(doc["checks"]) == 4


@pytest.mark.parametrize("option", [{"warmup": 5.0}, {"horizon": 10.0}])
def test_a_warmup_or_a_horizon_is_refused(option):
    """A run has a fixed count of arrivals: no horizon to cut it at."""
    name = next(iter(option))
    with pytest.raises(ValueError, match=f"prefix-routing does not support {name}"):
        pr.EXPERIMENT.execute(params(requests=50), RunOptions(**option))


def test_the_logs_asked_for_are_written(tmp_path):
    out = tmp_path / "r.csv"
    proc = subprocess.run([sys.executable, "-m", "llmqueue", "run", "prefix-routing", "--set",
                           "requests=100", "--set", "seeds=1", "--set", "router=prefix-score",
                           "--requests", str(out), "--timeseries", str(tmp_path / "t.csv")],
                          capture_output=True, text=True, cwd=os.path.dirname(__file__))
    assert proc.returncode == 0, proc.stderr
    assert "cached_tokens" in out.read_text().splitlines()[0]
    assert len(out.read_text().splitlines()) == 101 and (tmp_path / "t.csv").stat().st_size


def test_the_figure_has_both_panels_labelled(short):
    fig, axes = plt.subplots(1, 2)
    assert plot_prefix_routing(short, "routers", axes=axes) is fig
    for ax in axes:
        assert ax.get_title() and "(" in ax.get_xlabel() and "(" in ax.get_ylabel()
        assert [t.get_text() for t in ax.get_xticklabels()] == list(pr.ROUTERS)
    assert axes[1].get_yscale() == "log"
    plt.close(fig)


@pytest.mark.slow
def test_full_runs_cache_aware_routers_win_on_every_seed():
    """8,000 requests, 3 seeds, M = 100,000 per engine: the hard checks."""
    rows = pr.run(params(), RunOptions(seed=0))
    checks = pr.checks(rows)
    assert len(checks) == 4 and all(c.passed for c in checks), checks
    assert all(r.summary["verdict"] != "unstable" for _, r in rows)


@pytest.mark.slow
def test_a_small_cache_lets_the_blind_routers_fall_behind():
    """M = 60,000 per engine: random and jsq-tokens grow on every seed."""
    rows = pr.run(params(kv=60_000, router="all"), RunOptions(seed=0))
    for _, r in rows:
        if r.summary["router"] in pr.BLIND:
            assert r.summary["verdict"] == "unstable", r.summary.as_dict()
    assert all(c.passed for c in pr.checks(rows))
