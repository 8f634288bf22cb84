"""SPEC 7.8.3 (preemption storms, metastability, WAIT's larger stable range)
and 7.8.4 (greedy admission's worst-case limit cycle): the closed forms,
recomputed here from first principles, and short runs of the ``storms`` and
``limit-cycle`` experiments against SPEC's expectations; the full runs are
marked slow."""

import math

import numpy as np
import pytest

from llmqueue.engine.options import RunOptions
from llmqueue.experiments import REGISTRY
from llmqueue.experiments import limit_cycle as cycle
from llmqueue.experiments import storms
from llmqueue.experiments.greedy_memory import LINEAR, M, QUOTA, VD, VP, theory
from llmqueue.models.latency import Constant, Staircase
from llmqueue.theory.greedy import fluid_point, limit_cycle_rate, limit_cycle_share
from llmqueue.theory.wait import wait_thresholds

C, A = 0.02, 2e-5          # SPEC 7.8.3's t = c + a b


# -- closed forms ------------------------------------------------------------

def test_spec_7_8_3_closed_forms():
    """g is the KV summed over the request's vd + 1 iterations (vp, vp + 1, ...,
    vp + vd); the rest follows SPEC 7.6 and 7.5 by hand."""
    g = sum(range(VP, VP + VD + 1))
    assert g == 24_120
    th = theory()
    assert th["g"] == g
    assert th["fixed_point"] == pytest.approx(4.146, abs=5e-4) == M / g
    b_star = M * (VP + VD) / g
    assert b_star == pytest.approx(912.1, abs=0.05) and th["b_star"] == pytest.approx(b_star)
    mu = (M / g) / (C + A * b_star)
    assert mu == pytest.approx(108.41, abs=0.005)
    assert th["mu_mem"] == pytest.approx(mu) and th["lambda_joint"] == pytest.approx(mu)
    assert th["binding"] == "memory"
    assert wait_thresholds([(VP, VD, 1)], M) == [QUOTA] and th["wait_n"] == QUOTA == 4
    tau = C + A * QUOTA * (VP + VD)           # 4 prompts of 20 and 4 x 200 decodes
    assert tau == pytest.approx(0.0376)
    assert th["wait_tau"] == pytest.approx(tau)
    assert th["lambda_wait"] == pytest.approx(QUOTA / tau) == pytest.approx(106.38, abs=0.005)
    assert th["wait_kv"] == QUOTA * g == 96_480


def test_greedy_fluid_point_at_95():
    """n = lambda t(n) with t(n) = c + a n (vp + vd), solved by iteration (a
    contraction: lambda a 220 < 1), is SPEC's 3.265 starts per iteration; its
    KV n g is 78.7 % of M (SPEC's 78.8 % rounds n to 3.265 first)."""
    n = 0.0
    for _ in range(500):
        n = 95 * (C + A * n * (VP + VD))
    point = fluid_point(95, VP, VD, LINEAR)
    assert n == pytest.approx(3.265, abs=5e-4) and point.starts == pytest.approx(n)
    assert point.iteration == pytest.approx(n / 95)
    assert point.kv_tokens == pytest.approx(n * 24_120)
    assert point.kv_tokens / M == pytest.approx(0.788, abs=1e-3)
    assert 3.265 * 24_120 / M == pytest.approx(0.788, abs=5e-4)


def test_limit_cycle_closed_forms():
    """A cohort of M / (vp + vd) requests at their peak fills the cache and
    finishes every vd + 1 iterations."""
    rate = limit_cycle_rate(M, VP, VD)
    assert rate == pytest.approx(M / (VP + VD) / (VD + 1)) == pytest.approx(2.261, abs=5e-4)
    assert limit_cycle_share(VP, VD) == pytest.approx((VP + VD / 2) / (VP + VD))
    assert limit_cycle_share(VP, VD) == pytest.approx(0.545, abs=5e-4)
    assert rate / (M / 24_120) == pytest.approx(limit_cycle_share(VP, VD))


def test_closed_forms_refuse_bad_input():
    with pytest.raises(ValueError, match="rate must be below the compute capacity"):
        fluid_point(250, VP, VD, LINEAR)  # 250 x 2e-5 x 220 > 1
    with pytest.raises(ValueError, match="latency must be a Staircase"):
        fluid_point(95, VP, VD, Constant(1.0))
    with pytest.raises(ValueError, match="rate"):
        fluid_point(0, VP, VD, LINEAR)
    with pytest.raises(ValueError, match="vd"):
        limit_cycle_rate(M, VP, 0)
    with pytest.raises(ValueError, match="M"):
        limit_cycle_rate(0, VP, VD)
    assert fluid_point(50, VP, VD, Staircase(c=0.1, a=0.0, b0=1)).starts == pytest.approx(5.0)


# -- the experiments: declaration and parameters ----------------------------

def test_experiments_are_registered():
    names = list(REGISTRY)
    assert names.index("storms") + 1 == names.index("limit-cycle")
    assert "storms" in names and "limit-cycle" in names


def test_cases_are_checked():
    assert [c.name for c in storms.parse_cases("all")] == list(storms.CASES)
    assert [c.name for c in storms.parse_cases(" 104,saturated ")] == ["104", "saturated"]
    for bad in ("", "95", "saturated,nope"):
        with pytest.raises(ValueError, match="cases must be all or a comma-separated list"):
            storms.parse_cases(bad)
    with pytest.raises(ValueError, match="does not support warmup"):
        storms.EXPERIMENT.execute(storms.EXPERIMENT.resolve({}), RunOptions(warmup=1.0))


def test_merged_averages_seeds_and_counts_storms():
    runs = [{"pending_slope": 1.0, "pending_slope_se": 0.1, "pending_final": 10,
             "storm_onset": None, "throughput_requests_per_s": 90.0},
            {"pending_slope": 3.0, "pending_slope_se": 0.1, "pending_final": 13,
             "storm_onset": 50.0, "throughput_requests_per_s": 92.0}]
    out = storms.merged(runs)
    assert out["pending_slope"] == 2.0 and out["throughput_requests_per_s"] == 91.0
    assert out["pending_slope_se"] == pytest.approx(np.std([1.0, 3.0], ddof=1) / math.sqrt(2))
    assert out["storm_onset"] == 50.0 and out["storm_runs"] == 1 and out["pending_final"] == 12


# -- short runs ---------------------------------------------------------------

def by_label(rows):
    return {label: result.summary for label, result in rows}


@pytest.fixture(scope="module")
def saturated():
    """Saturated and 95 req/s from empty, 60 s (figures over the last 30 s)."""
    params = storms.EXPERIMENT.resolve({"cases": "saturated,95-empty", "initial": "1000"})
    return storms.run(params, RunOptions(horizon=60.0, seed=1))


def test_saturated_greedy_storms_and_wait_holds_its_fixed_point(saturated):
    rows = by_label(saturated)
    th = theory()
    greedy, wait = rows["saturated greedy"], rows["saturated wait(4)"]
    # WAIT: 4 whole prompts per iteration of 0.0376 s and KV 4 g in every
    # iteration of equal length, exactly, once warm; never a preemption
    assert wait["throughput_requests_per_s"] == pytest.approx(th["lambda_wait"], rel=5e-3)
    assert wait["kv_utilization"] == pytest.approx(QUOTA * 24_120 / M, abs=1e-3)
    assert wait["preemptions_whole"] == 0 and wait["threshold_error"] == 0
    # greedy: a full cache, preemptions in nearly every iteration, well below WAIT
    assert greedy["kv_utilization"] > 0.99
    assert greedy["preemptions_per_iteration"] > 5
    assert greedy["throughput_requests_per_s"] < 0.85 * th["lambda_wait"]
    failed = [c for c in storms.checks(saturated) if not c.passed]
    assert not failed, failed


def test_greedy_from_empty_at_95_sits_at_its_fluid_point(saturated):
    greedy = by_label(saturated)["95-empty greedy"]
    assert greedy["preemptions_whole"] == 0 and greedy["storm_onset"] is None
    share = fluid_point(95, VP, VD, LINEAR).kv_tokens / M
    assert greedy["kv_utilization"] == pytest.approx(share, abs=0.015)


@pytest.fixture(scope="module")
def metastable():
    """95 req/s with 1,000 requests at t = 0, 120 s, all logs (for the plots)."""
    params = storms.EXPERIMENT.resolve({"cases": "95-full", "initial": "1000"})
    return storms.run(params, RunOptions(horizon=120.0, seed=1, batches=True,
                                         timeseries=True, requests=True))


def test_metastability_greedy_stays_in_the_storm_and_wait_drains(metastable):
    rows = by_label(metastable)
    greedy, wait = rows["95-full greedy"], rows["95-full wait(4)"]
    assert greedy["throughput_requests_per_s"] < 95 * 0.97   # serves less than arrives
    assert greedy["pending_final"] > 1000 and greedy["preemptions_per_iteration"] > 1
    assert wait["pending_final"] < 1000 and wait["preemptions_whole"] == 0
    for check in storms.checks(metastable):
        if "wait" in check.name or "stuck" in check.name:
            assert check.passed, check


def test_storm_figures_read_the_logs(metastable):
    result = dict(metastable)["95-full greedy"]
    starts = [b.start / 1e9 for b, k in zip(result.batch_log, result.kv_log) if k.preemptions]
    assert result.summary["storm_onset"] == pytest.approx(starts[0])
    total = sum(k.preemptions for k in result.kv_log)
    assert result.summary["preemptions_whole"] == pytest.approx(total / len(result.kv_log))


def test_storm_figures_draw(metastable, tmp_path):
    from llmqueue.plotting import animate_storm, plot_storm, save
    fig = plot_storm(metastable, "storm", rate_lines=[(108.4, "mu_mem")],
                     kv_lines=[(M, "M")])
    assert len(fig.axes) == 4 and fig.axes[1].get_legend() is not None
    assert fig.axes[3].get_xlabel() == "time (s)"
    save(fig, str(tmp_path / "storm.png"))
    anim = animate_storm(metastable, "forming", M, note="note", seconds=0.5, fps=4)
    path = save(anim, str(tmp_path / "storm.gif"), dpi=30)
    assert (tmp_path / "storm.gif").stat().st_size > 0 and path.endswith(".gif")


@pytest.fixture(scope="module")
def limit_rows():
    """The three 7.8.4 rows over 500 iterations (one whole cycle in the second half)."""
    return cycle.run(cycle.EXPERIMENT.resolve({}), RunOptions(horizon=500.0, seed=1,
                                                              batches=True, requests=True))


def test_limit_cycle_short(limit_rows):
    rows = by_label(limit_rows)
    scratch, wait, keep = rows["greedy scratch"], rows["wait(4) scratch"], rows["greedy keep"]
    assert scratch["cycles"] >= 1
    # the cohort: as many as fit the cache at their peak, once per cycle
    assert scratch["completions_max"] == M // (VP + VD) == 454
    assert scratch["completions_per_iteration"] == pytest.approx(limit_cycle_rate(M, VP, VD),
                                                                 rel=0.02)
    assert wait["completions_min"] == wait["completions_max"] == 4 and wait["preemptions"] == 0
    assert keep["completions_per_iteration"] > 1.5 * scratch["completions_per_iteration"]
    checks = {c.name.split(":")[0]: c for c in cycle.checks(limit_rows)}
    assert checks["greedy scratch"].passed and checks["wait(4) scratch"].passed
    lines = cycle.notes(limit_rows, {})
    assert any(line.startswith("Contrast: with restart=scratch") for line in lines)


def test_completions_count_every_finish(limit_rows):
    result = dict(limit_rows)["wait(4) scratch"]
    ends, counts = cycle.completions(result)
    finished = [r for r in result.request_log if r.finished is not None]
    assert counts.sum() == len(finished) and len(ends) == len(result.batch_log)
    assert np.all(np.diff(ends) == pytest.approx(cycle.TAU))


def test_limit_cycle_draws(limit_rows, tmp_path):
    from llmqueue.plotting import plot_limit_cycle, save
    series = [(name, *cycle.completions(result)) for name, result in limit_rows]
    fig = plot_limit_cycle(series, "cycle", [(4.146, "M/g"), (2.261, "cycle")], window=201,
                           zoom=(250.0, 450.0))
    assert len(fig.axes) == 2 and fig.axes[0].get_legend() is not None
    save(fig, str(tmp_path / "cycle.png"))


# -- full runs ----------------------------------------------------------------

@pytest.mark.slow
def test_storms_full():
    """Every case at SPEC's sizes (3,000 at t = 0, 300 s): all checks pass."""
    params = storms.EXPERIMENT.resolve({})
    rows = storms.run(params, RunOptions(horizon=storms.HORIZON, seed=1))
    failed = [c for c in storms.checks(rows) if not c.passed]
    assert not failed, failed


@pytest.mark.slow
def test_limit_cycle_full():
    """SPEC's 20,000 iterations: all checks pass."""
    rows = cycle.run(cycle.EXPERIMENT.resolve({}), RunOptions(horizon=20_000.0, seed=1))
    failed = [c for c in cycle.checks(rows) if not c.passed]
    assert not failed, failed
