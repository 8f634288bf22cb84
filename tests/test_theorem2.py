"""Theorem 2 (SPEC 6.2): measured backlog slopes follow the fluid slope.

Each load's slope is the mean over seeds of the backlog drift over the
second half of a run, with the standard error of that mean over the seeds.
"""

import json

import pytest

from llmqueue.cli.main import main
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import theorem2
from llmqueue.theory import capacity as theory

CAPACITY = 512 / 0.15316  # tokens/s, SPEC 6.2


def measure(loads, seeds, horizon):
    params = {**theorem2.EXPERIMENT.resolve({}), "loads": ",".join(map(str, loads)),
              "seeds": seeds}
    rows = theorem2.run(params, RunOptions(horizon=horizon, seed=0))
    return {r.summary["load"]: r.summary for _, r in rows}


def check(rows):
    for load, row in rows.items():
        assert row["fluid_slope"] == pytest.approx(max(0.0, (load - 1) * CAPACITY))
        if load < 1:
            assert abs(row["slope"]) <= 3 * row["slope_se"], row   # statistically zero
            assert row["stable_runs"] == row["seeds"], row
        elif load > 1.05:
            assert abs(row["slope"] - row["fluid_slope"]) <= 4 * row["slope_se"], row
        if load >= 1.2:
            assert row["unstable_runs"] == row["seeds"], row


def test_slopes_follow_the_fluid_slope():
    # 30 runs of 400 s, about 10 s in all; a capacity 5% off would move the
    # fluid slope by ~170 tokens/s, 8 standard errors here
    rows = measure([0.9, 1.1, 1.2], seeds=10, horizon=400.0)
    check(rows)
    assert rows[1.1]["slope_se"] < 40 and rows[1.2]["slope_se"] < 40


@pytest.mark.slow
def test_slopes_follow_the_fluid_slope_over_the_whole_range():
    check(measure(theorem2.LOADS, seeds=20, horizon=1000.0))


def test_cli_rows_per_load(capsys):
    assert main(["run", "theorem2", "--set", "loads=0.8,1.3", "--set", "seeds=2",
                 "--horizon", "60", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["load"] for r in rows] == [0.8, 1.3]
    for r in rows:
        assert {"slope", "slope_se", "fluid_slope", "rate", "seeds"} <= set(r)
        assert r["rate"] == pytest.approx(r["load"] * theory.lambda_star(512, 100, 100))


@pytest.mark.parametrize("setting, fragment", [
    ("loads=fast", "loads must be comma-separated numbers > 0"),
    ("loads=0.9,-1", "loads must be comma-separated numbers > 0"),
    ("seeds=1", "seeds must be an integer >= 2"),
])
def test_bad_settings(setting, fragment, capsys):
    assert main(["run", "theorem2", "--set", setting, "--horizon", "10"]) == 2
    assert fragment in capsys.readouterr().err
