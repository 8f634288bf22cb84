"""SPEC 8.10 E8.4: Theorem 2 with a hardware model (Llama-3-8B, one H100, the
default roofline, sarathi, bmax 2048, Poisson, 512 + 256 tokens).

lambda* becomes lambda_mix = bmax / t_mix / 768 with t_mix the time of the full
batch at the workload's mix (82.4 ms, 32.35 req/s); above it the backlog grows
at lambda * 768 - 2048 / t_mix."""

import json

import pytest

from llmqueue.cli.main import main
from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result, Summary
from llmqueue.experiments import theorem2_roofline as e84
from llmqueue.hardware.roofline import Roofline
from llmqueue.theory.bounds import token_bound

T_MIX = token_bound(Roofline("H100", "llama-3-8b"), 2048, 512, 256).t_mix
CAPACITY = 2048 / T_MIX          # tokens/s of full batches at the mix, about 24,850
LAMBDA_MIX = CAPACITY / 768      # SPEC E8.4: 32.35 req/s


def measure(loads, seeds, horizon, warmup=0.0):
    params = {**e84.EXPERIMENT.resolve({}), "loads": ",".join(map(str, loads)),
              "seeds": seeds}
    return e84.run(params, RunOptions(horizon=horizon, warmup=warmup, seed=0))


def test_lambda_mix_is_spec_e84():
    t_mix, star = e84.mix(e84.EXPERIMENT.resolve({}))
    assert t_mix == pytest.approx(0.0824, rel=0.005)
    assert star == pytest.approx(32.35, rel=0.005)
    assert star == pytest.approx(LAMBDA_MIX, rel=1e-12)


def test_below_and_far_above_lambda_mix():
    # 8 runs of 40 s (4 s warm-up), about a second: the fluid slope at 1.4 is
    # 0.4 * 24,850 = 9,940 tokens/s; a capacity 10% off would move it by 2,500
    rows = {r.summary["load"]: r.summary for _, r in measure([0.8, 1.4], 4, 40.0, 4.0)}
    low, high = rows[0.8], rows[1.4]
    assert low["rate"] == pytest.approx(0.8 * LAMBDA_MIX)
    assert high["rate"] == pytest.approx(1.4 * LAMBDA_MIX)
    assert low["fluid_slope"] == 0.0
    assert high["fluid_slope"] == pytest.approx(0.4 * CAPACITY)
    assert high["fluid_slope"] == pytest.approx(9940, rel=0.005)      # SPEC's figure
    # 36 s is short for a verdict of "stable" (a run may be inconclusive), never unstable
    assert low["unstable_runs"] == 0 and high["unstable_runs"] == 4
    assert abs(low["slope"]) < 0.02 * high["fluid_slope"]
    assert abs(high["slope"] - high["fluid_slope"]) <= 0.2 * high["fluid_slope"]


def row(load, slope, stable, unstable, seeds=6):
    fluid = max(0.0, (load - 1) * CAPACITY)
    return (f"{load:.2f}", Result(Summary.from_mapping(
        {"load": load, "seeds": seeds, "slope": slope, "fluid_slope": fluid,
         "stable_runs": stable, "unstable_runs": unstable})))


def test_checks_catch_each_miss():
    good = [row(0.9, 10.0, 6, 0), row(1.0, 50.0, 3, 0), row(1.2, 0.2 * CAPACITY * 0.85, 0, 6),
            row(1.4, 0.4 * CAPACITY * 1.15, 0, 6)]
    checks = e84.checks(good)
    # 0.9: stable; 1.0: nothing; 1.2 and 1.4: unstable and near the fluid slope
    assert len(checks) == 5 and all(c.passed for c in checks)
    bad = [row(0.9, 10.0, 5, 0), row(1.1, 2000.0, 0, 5), row(1.2, 0.2 * CAPACITY * 0.75, 0, 6),
           row(1.4, 0.4 * CAPACITY * 1.25, 0, 6)]
    assert [c.passed for c in e84.checks(bad)] == [False, False, True, False, True, False]


def test_cli_rows_and_bad_settings(capsys):
    assert main(["run", "theorem2-roofline", "--set", "loads=0.6,1.2", "--set", "seeds=2",
                 "--horizon", "20", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["load"] for r in rows] == [0.6, 1.2]
    assert rows[1]["rate"] == pytest.approx(1.2 * LAMBDA_MIX)
    assert main(["run", "theorem2-roofline", "--set", "seeds=1", "--horizon", "10"]) == 2
    assert "seeds must be an integer >= 2" in capsys.readouterr().err


@pytest.mark.slow
def test_full_e84():
    # SPEC's size: 7 loads x 6 seeds x 300 s, 30 s warm-up (about 20 s)
    rows = measure(e84.LOADS, e84.SEEDS, e84.HORIZON, 30.0)
    checks = e84.checks(rows)
    assert len(checks) == 3 + 3 + 2 and all(c.passed for c in checks), checks
    s = {r.summary["load"]: r.summary for _, r in rows}
    assert s[1.2]["fluid_slope"] == pytest.approx(4970, rel=0.005)
