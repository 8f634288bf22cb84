"""The ``prefix-sessions`` experiment (multi-turn sessions with and without the
prefix cache, a large and a small KV cache): a short run's directions, its
figures read from the runs, its table, JSON and figure; the full run at the
reference sizes is marked slow."""

import json
import os
import subprocess
import sys

import pytest
from conftest import check_figure

from llmqueue.engine.options import RunOptions
from llmqueue.experiments import REGISTRY
from llmqueue.experiments import prefix_sessions as ps


@pytest.fixture(scope="module")
def short():
    """100 sessions, one seed, the request logs kept."""
    params = ps.EXPERIMENT.resolve({"sessions": "100", "seeds": "1"})
    return params, ps.run(params, RunOptions(seed=0, requests=True))


def by_label(rows):
    return {label: result.summary for label, result in rows}


def test_registered_with_its_options():
    assert REGISTRY["prefix-sessions"] is ps.EXPERIMENT
    with pytest.raises(ValueError, match="prefix-sessions does not support horizon"):
        ps.EXPERIMENT.execute(ps.EXPERIMENT.resolve({}), RunOptions(horizon=10.0))
    with pytest.raises(ValueError, match="sessions"):
        ps.EXPERIMENT.resolve({"sessions": "0"})


def test_short_run_directions(short):
    params, rows = short
    s = by_label(rows)
    assert list(s) == ["M=1,000,000 cache", "M=1,000,000 no cache", "M=20,000 cache",
                       "M=20,000 no cache"]
    big, plain = s["M=1,000,000 cache"], s["M=1,000,000 no cache"]
    tight = s["M=20,000 cache"]
    # the large cache never fills: no preemption, no eviction, most prompts cached
    assert big["preemptions"] == plain["preemptions"] == 0 and big["evictions"] == 0
    assert big["prefix_hit_ratio"] > 0.85
    assert big["ttft_ratio"] < 0.5 and big["prefill_ratio"] < 0.2
    # the small one: fewer hits, preemptions, and restarts that hit their own work
    assert tight["prefix_hit_ratio"] < big["prefix_hit_ratio"]
    assert tight["preemptions"] > 0 and tight["recompute_hit_tokens"] > 0
    assert all(c.passed for c in ps.checks(rows)), ps.checks(rows)
    assert len(ps.checks(rows)) == 2  # directions only: not the reference sizes
    assert any("not checked here" in line for line in ps.notes(rows, params))


def test_figures_read_the_runs(short):
    _, rows = short
    results = dict(rows)
    on, off = results["M=1,000,000 cache"], results["M=1,000,000 no cache"]
    # same sessions with and without the cache: the same prompts (turns arrive
    # in another order: a turn comes when the previous one finishes)
    assert sorted(r.vp for r in on.request_log) == sorted(r.vp for r in off.request_log)
    prompts = sum(r.vp for r in off.request_log)
    assert off.summary["prefill_per_request"] == pytest.approx(prompts / len(off.request_log))
    hits = sum(r.memory.cached for r in on.request_log)
    # no preemption: the cache run computes every prompt token it did not find cached
    assert on.summary["prefill_per_request"] * len(on.request_log) == pytest.approx(
        prompts - hits)
    assert on.summary["prefix_hit_ratio"] == pytest.approx(hits / prompts)
    assert on.summary["ttft_ratio"] == pytest.approx(
        on.summary["ttft_p90"] / off.summary["ttft_p90"])
    assert on.summary["ttft_ratios"] == [pytest.approx(on.summary["ttft_ratio"])]


def test_merge_means_and_errors():
    runs = [{"ttft_ratio": 0.1, "preemptions": 10, "evictions": None},
            {"ttft_ratio": 0.3, "preemptions": 20, "evictions": None}]
    out = ps.merge(runs)
    assert out["ttft_ratio"] == pytest.approx(0.2) and out["ttft_ratios"] == [0.1, 0.3]
    assert out["preemptions"] == 15 and out["preemptions_se"] == pytest.approx(5.0)
    assert out["evictions"] is None and out["evictions_se"] is None


def test_reference_check_widens_by_the_seeds_error():
    s = {"kv": ps.SMALL, "preemptions": 2350.0, "preemptions_se": 60.0}
    assert ps._reference(s, "preemptions").passed          # 240 off, within 200 + 2 x 60
    assert not ps._reference({**s, "preemptions_se": 10.0}, "preemptions").passed


def test_figure_draws(short):
    from llmqueue.plotting import plot_sessions
    _, rows = short
    check_figure(3, lambda axes: plot_sessions(rows, "sessions", axes=axes))


def test_json_from_the_command_line():
    proc = subprocess.run([sys.executable, "-m", "llmqueue", "run", "prefix-sessions", "--set",
                           "sessions=100", "--set", "seeds=1", "--json"], capture_output=True,
                          text=True, cwd=os.path.dirname(__file__))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["scenario"] == "prefix-sessions" and len(doc["rows"]) == 4
    assert {"prefix_hit_ratio", "ttft_ratio", "prefill_per_request"} <= set(doc["rows"][0])
    assert all(c["passed"] for c in doc["checks"])


@pytest.mark.slow
def test_prefix_sessions_full():
    """1,000 sessions, 3 seeds: the directions and every reference figure
    (within its tolerance widened by two standard errors over the seeds)."""
    params = ps.EXPERIMENT.resolve({})
    rows = ps.run(params, RunOptions(seed=0))
    found = ps.checks(rows)
    assert len(found) == 2 + len(ps.REFERENCE)
    failed = [c for c in found if not c.passed]
    assert not failed, failed
