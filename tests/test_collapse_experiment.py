"""The ``prefix-collapse`` experiment (a prefix cache started empty and with a
backlog): the hit ratio over time read from the logs, short runs of both
configurations, the figure and the JSON; the full runs (what they robustly
show: one state per configuration) are marked slow."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import check_figure

from llmqueue.engine.options import RunOptions
from llmqueue.experiments import REGISTRY
from llmqueue.experiments import prefix_collapse as pc
from llmqueue.theory.prefix import lambda_star_cached

HORIZON = 200.0


@pytest.fixture(scope="module")
def short():
    """Both configurations, both starts (100 waiting), 200 s, every log kept."""
    params = pc.EXPERIMENT.resolve({"initial": "100"})
    return pc.run(params, RunOptions(horizon=HORIZON, seed=0, batches=True, requests=True,
                                     timeseries=True))


def by_label(rows):
    return {label: result.summary for label, result in rows}


def test_configurations():
    a, b = pc.CONFIGS["system-prompts"], pc.CONFIGS["many-groups"]
    # one engine as prefix-capacity's, at 0.95 of its capacity with hits
    assert a.rate == pytest.approx(0.95 * lambda_star_cached(512, 1152, 128, 1024))
    assert a.rate == pytest.approx(0.95 * 13.06, abs=0.01)
    assert (a.groups, a.shared, a.M) == (8, 1024, 75_000)
    ideal, plain = b.capacities()
    assert plain < b.rate < ideal            # only the hits make it stable
    assert b.groups * b.shared > 4 * b.M    # all the prefixes cannot stay cached
    assert [c.name for c in pc.parse_configs(" many-groups ")] == ["many-groups"]
    with pytest.raises(ValueError, match="configs must be all or a comma-separated list"):
        pc.parse_configs("nope")
    assert REGISTRY["prefix-collapse"] is pc.EXPERIMENT
    with pytest.raises(ValueError, match="does not support warmup"):
        pc.EXPERIMENT.execute(pc.EXPERIMENT.resolve({}), RunOptions(warmup=1.0))


def test_hit_over_time_reads_first_starts(short):
    result = dict(short)["many-groups backlog"]
    starts = pc.first_starts(result)
    started = [r for r in result.request_log if r.memory.cached is not None]
    # the batch log names every start (but those of an iteration the horizon cut)
    rids = {r.rid for r in started}
    assert set(starts) <= rids and len(rids - set(starts)) <= 5
    # the windows add up to the run's hit ratio of first starts
    _, ratio = pc.hit_windows(result, 10.0)
    hits, prompts = sum(r.memory.cached for r in started), sum(r.vp for r in started)
    assert result.summary["prefix_hit_ratio"] == pytest.approx(hits / prompts)
    assert np.nanmin(ratio) >= 0 and np.nanmax(ratio) < 1
    # the 100 waiting at t = 0 start in arrival order, the first in the first iteration
    assert starts[0] == 0.0 and starts[99] >= starts[1]


def test_short_runs(short):
    s = by_label(short)
    assert list(s) == ["system-prompts empty", "system-prompts backlog", "many-groups empty",
                       "many-groups backlog"]
    system, many = s["system-prompts empty"], s["many-groups empty"]
    # 8 busy prefixes stay cached (every prompt hits its 1024 shared tokens)...
    assert system["hit_late"] > 0.87 and system["hit_ideal"] > 0.87
    # ...1,000 short ones are evicted under load: far below an unlimited cache
    assert many["hit_late"] < many["hit_ideal"] - 0.1 and many["evictions"] > 0
    assert s["many-groups backlog"]["initial"] == 100
    for name in ("system-prompts", "many-groups"):
        a, b = s[f"{name} empty"], s[f"{name} backlog"]
        assert abs(a["hit_late"] - b["hit_late"]) < 0.05
    checks = pc.checks(short)
    assert len(checks) == 4
    assert all(c.passed for c in checks if "one hit ratio" in c.name), checks
    assert any("second half" in line for line in pc.notes(short, {}))


def test_figure_draws(short):
    from llmqueue.plotting import plot_collapse
    from llmqueue.plotting.collapse import Panel, Start
    starts = []
    for label, result in short[2:]:
        t, pending, _ = result.timeseries()
        starts.append(Start(label, *pc.hit_windows(result, 20.0), t, pending))
    panel = Panel("many groups", starts, 0.889)
    check_figure(2, lambda axes: plot_collapse([panel], "collapse", 20.0, axes=axes))


def test_json_from_the_command_line():
    proc = subprocess.run([sys.executable, "-m", "llmqueue", "run", "prefix-collapse",
                           "--horizon", "60", "--set", "configs=many-groups", "--json"],
                          capture_output=True, text=True, cwd=os.path.dirname(__file__))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["scenario"] == "prefix-collapse" and len(doc["rows"]) == 2
    assert {"hit_late", "pending_slope", "hit_ideal"} <= set(doc["rows"][0])
    assert len(doc["checks"]) == 2


@pytest.mark.slow
def test_prefix_collapse_full():
    """30 minutes per run, 3 seeds: both configurations end in one state (the
    same hit ratio from both starts, neither growing); the many groups' hit
    ratio stays far below an unlimited cache's, the system prompts' at it."""
    rows = pc.run(pc.EXPERIMENT.resolve({"seeds": "3"}), RunOptions(seed=0))
    failed = [c for c in pc.checks(rows) if not c.passed]
    assert not failed, failed
    s = by_label(rows)
    for start in ("empty", "backlog"):
        assert s[f"system-prompts {start}"]["hit_late"] > 0.88
        many = s[f"many-groups {start}"]
        assert many["hit_late"] < many["hit_ideal"] - 0.2
