"""The KV-cache reference experiments (SPEC 7.8.1, 7.8.2, 7.8.5, 7.8.6): their
closed forms against SPEC's figures, short simulated versions within SPEC's
tolerances under fixed seeds, the long ones marked slow, and their figures."""

import math

import numpy as np
import pytest
from conftest import check_figure

from llmqueue.common.units import TICKS_PER_SECOND
from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result, Summary
from llmqueue.experiments import REGISTRY
from llmqueue.experiments import coprime
from llmqueue.experiments import memory_boundary as boundary
from llmqueue.experiments import memory_runs as mr
from llmqueue.experiments import memory_waste as waste
from llmqueue.experiments import nie_table1 as table1
from llmqueue.hardware import model
from llmqueue.plotting import plot_coprime, plot_memory_boundary, plot_memory_waste, plot_table1
from llmqueue.theory import memory


def passed(checks):
    """Every check passed (the failing ones named in the assertion message)."""
    failing = [f"{c.name}: {c.detail}" for c in checks if not c.passed]
    assert not failing, failing
    return True


# --- the shared pieces --------------------------------------------------------
def test_experiments_are_registered_after_the_others():
    names = [n for n, e in REGISTRY.items()  # other tests may register their own
             if e.run.__module__.startswith("llmqueue.experiments.")]
    spec_7_8 = ["nie-table1", "memory-boundary", "storms", "limit-cycle", "coprime",
                "memory-waste"]
    # after SPEC 6's, in SPEC 7.8's order: 7.8.1 to 7.8.6
    assert [n for n in names if n in spec_7_8] == spec_7_8
    assert names.index("nie-table1") > names.index("rybko-stolyar")


def test_uniform_is_both_ends_included():
    law = mr.uniform(10, 1600)
    draws = law.sample(np.random.default_rng(0), 200_000)
    assert draws.min() == 10 and draws.max() == 1600
    with pytest.raises(ValueError, match="high must be"):
        mr.uniform(5, 4)


def test_uniform_moments_against_brute_force():
    values = np.arange(10, 41)
    assert table1.uniform_moments(10, 40) == pytest.approx((values.mean(), values.var()))
    assert table1.uniform_moments(10, 40, integer=False) == pytest.approx((25.0, 30 ** 2 / 12))


def test_a_saturated_stream_starts_with_twice_the_prompts_the_cache_holds():
    stream = mr.saturated(2.0, mr.uniform(100, 100), mr.uniform(5, 5), 1000, seed=3)
    first = [a for _, a in zip(range(25), stream)]
    assert [a.time for a in first[:20]] == [0.0] * 20       # ceil(2 * 1000 / 100)
    assert first[20].time > 0
    assert stream.rate == pytest.approx(3.0)                 # 1.5 x capacity
    with pytest.raises(ValueError, match="load must be"):
        mr.saturated(2.0, mr.uniform(100, 100), mr.uniform(5, 5), 1000, seed=3, load=1.0)
    with pytest.raises(ValueError, match="kv / vp must be at most"):
        mr.backlog_at_start(200_000, 1.0)


def test_pending_slope_reads_pending_at_the_window_edges():
    # pending rises by one request every second over 100 s: slope exactly 1
    series = [(t * TICKS_PER_SECOND, t, 0) for t in range(101)]
    slope, se = mr.pending_slope(Result(Summary(), series=series), 100.0)
    assert slope == pytest.approx(1.0) and se == pytest.approx(0.0)
    # flat in the second half, whatever happened before
    series = [(0, 0, 0), (10 * TICKS_PER_SECOND, 50, 0), (40 * TICKS_PER_SECOND, 7, 0)]
    assert mr.pending_slope(Result(Summary(), series=series), 100.0) == (0.0, 0.0)
    with pytest.raises(ValueError, match="timeseries=True"):
        mr.pending_slope(Result(Summary()), 100.0)


def test_parse_errors_name_the_parameter():
    with pytest.raises(ValueError, match="loads must be"):
        mr.parse_numbers("loads", "0.5,-1")
    with pytest.raises(ValueError, match="pairs must be"):
        coprime.parse_pairs("1/2,3")
    with pytest.raises(ValueError, match="rows must be"):
        table1.pick("1:1,3:1")
    with pytest.raises(ValueError, match="variants must be"):
        boundary.variants_of("whole,nope")


# --- SPEC 7.8.1: closed forms -------------------------------------------------
@pytest.mark.parametrize("row", table1.ROWS, ids=lambda r: r.name)
def test_table1_closed_forms_are_specs(row):
    th = table1.closed_forms(row, table1.CACHE)
    assert th["mu_calculator"] == pytest.approx(row.calculator, abs=0.0005)
    assert th["mean_g"] == pytest.approx(row.mean_g, abs=0.5)
    assert th["mu"] == pytest.approx(row.mu, abs=0.00005)
    assert th["delta"] == pytest.approx(0.0244, abs=0.00005)
    assert th["mean_tokens"] == pytest.approx(1610, abs=1.0)


def test_table1_rows_are_the_three_workloads():
    # 1:1 is SPEC's law; 2:1 and 1:2 are derived from SPEC's E[g] (see nie_table1)
    assert [(r.name, r.prompt, r.output, r.tau) for r in table1.ROWS] == [
        ("1:1", (10, 1600), (10, 1600), 0.0372), ("2:1", (10, 2133), (10, 1066), 0.0430),
        ("1:2", (10, 1066), (10, 2133), 0.0337)]


# --- SPEC 7.8.1: the saturated runs ---------------------------------------------
def test_table1_saturated_sarathi_reaches_mu():
    params = table1.EXPERIMENT.resolve({})
    rows = table1.run(params, RunOptions(horizon=2400.0, seed=0))
    assert [label for label, _ in rows] == ["1:1", "2:1", "1:2"]
    assert passed(table1.checks(rows))


@pytest.mark.slow
def test_table1_long_runs():
    params = table1.EXPERIMENT.resolve({"seeds": "3"})
    assert passed(table1.checks(table1.run(params, RunOptions(horizon=3000.0, seed=1))))


# --- SPEC 7.8.2 ---------------------------------------------------------------------
def test_boundary_theory():
    whole = boundary.theory("whole", table1.CACHE)
    assert whole["mu"] == pytest.approx(3.2645, abs=0.00005)
    assert whole["mu"] * (1 - whole["delta"]) == pytest.approx(3.185, abs=0.0005)
    assert whole["b_star"] == pytest.approx(131_000 * 1610 / 1_078_715)   # about 196
    assert whole["binding"] == "memory"
    chunked = boundary.theory("chunked", table1.CACHE)
    # Nie's chunked area at 512; integer moments move it by under 0.0005 (SPEC 7.8.1)
    assert chunked["mu"] == pytest.approx(3.2636, abs=0.0005)
    assert chunked["binding"] == "memory"      # b* ~ 195 < 512


def test_boundary_expected_slope():
    mu, sat, delta = 3.2645, 3.255, 0.0244
    assert boundary.fluid(0.9 * mu, mu, sat, delta) == 0.0
    assert boundary.fluid(0.99 * mu, mu, sat, delta) is None      # between: no claim
    assert boundary.fluid(1.2 * mu, mu, sat, delta) == pytest.approx(1.2 * mu - sat)


def test_boundary_short_run():
    params = boundary.EXPERIMENT.resolve({"loads": "0.8,1.2", "seeds": "3",
                                          "variants": "whole"})
    rows = boundary.run(params, RunOptions(horizon=600.0, seed=0))
    assert [label for label, _ in rows] == ["whole saturated", "whole 0.80 mu", "whole 1.20 mu"]
    assert passed(boundary.checks(rows))
    above = rows[2][1].summary
    assert above["rate"] == pytest.approx(1.2 * 3.2645, abs=1e-3)
    assert rows[1][1].series is not None     # the first seed's time series is kept


@pytest.mark.slow
def test_boundary_full():
    params = boundary.EXPERIMENT.resolve({"seeds": str(boundary.SEEDS)})
    rows = boundary.run(params, RunOptions(horizon=boundary.HORIZON, seed=0))
    assert passed(boundary.checks(rows))


# --- SPEC 7.8.5 -----------------------------------------------------------------------
def test_coprime_capacity_and_lives():
    # g(200, 1) = 2*200 + 1 = 401, g(200, 2) = 3*200 + 3 = 603: M / 502
    assert coprime.capacity(200, (1, 2), 200_000) == pytest.approx(200_000 / 502)
    assert [math.gcd(a + 1, b + 1) for a, b in coprime.PAIRS] == [1, 1, 1, 2, 2]


def test_coprime_short_run_separates():
    params = coprime.EXPERIMENT.resolve({"pairs": "2/4,1/3", "contrast": "2/4"})
    rows = coprime.run(params, RunOptions(horizon=100.0, seed=0))
    assert [label for label, _ in rows] == ["vp=200 (2,4)", "vp=200 (1,3)", "vp=6 (2,4)"]
    assert passed(coprime.checks(rows))
    for _, result in rows[:2]:   # saturated: the cache is full, completions at capacity
        s = result.summary
        assert s["kv_utilization"] > 0.99
        assert s["completions_over_capacity"] == pytest.approx(1.0, abs=0.02)


@pytest.mark.slow
def test_coprime_longer_run():
    params = coprime.EXPERIMENT.resolve({})
    assert passed(coprime.checks(coprime.run(params, RunOptions(horizon=2000.0, seed=1))))


# --- SPEC 7.8.6 ------------------------------------------------------------------------
def test_point_c_memory_closed_forms():
    assert model("codellama-34b").kv_bytes_per_token() == 2 * 48 * 8 * 128 * 2 == 196_608
    g = memory.kv_area(290, 990, waste.POINT_C_CHUNK)
    assert g == 779_240
    t128 = 0.01128 + 0.03547
    assert g * t128 / 0.4675 == pytest.approx(77_900, abs=50)
    # 29-40 k tokens give mu_mem of about 0.80-1.10 req/s, below lambda = 2.14
    assert memory.mu_mem(29_000, g, t128) == pytest.approx(0.80, abs=0.005)
    assert memory.mu_mem(40_000, g, t128) == pytest.approx(1.10, abs=0.005)


def test_memory_waste_short_run():
    params = waste.EXPERIMENT.resolve({"policies": "sarathi,vllm,fastertransformer"})
    rows = waste.run(params, RunOptions(horizon=1200.0, seed=0))
    assert [label for label, _ in rows] == ["sarathi", "vllm", "fastertransformer",
                                            "point-c sarathi-128 kv=38000"]
    assert passed(waste.checks(rows))
    s = {label: result.summary for label, result in rows}
    # vllm's prefill-only iterations are where its decoders wait holding KV
    assert s["vllm"]["prefill_only_fraction"] > 0 == s["sarathi"]["prefill_only_fraction"]


def test_orca_is_sarathi_with_whole_prompts_and_no_budget():
    params = waste.EXPERIMENT.resolve({"policies": "sarathi,orca", "point_c_kv": "none"})
    rows = waste.run(params, RunOptions(horizon=200.0, seed=2))
    assert passed([c for c in waste.checks(rows) if c.name.startswith("orca serves")])
    a, b = (dict(result.summary) for _, result in rows)
    assert a == b


@pytest.mark.slow
def test_memory_waste_long():
    params = waste.EXPERIMENT.resolve({})
    assert passed(waste.checks(waste.run(params, RunOptions(horizon=3000.0, seed=1))))


# --- the figures ---------------------------------------------------------------------
def fake(**figures):
    return Result(Summary.from_mapping(figures))


def boundary_rows():
    series = [(t * TICKS_PER_SECOND, t // 10, 0) for t in range(0, 101, 5)]
    common = {"variant": "whole", "mu": 3.26, "mu_sat": 3.25, "delta": 0.024, "seeds": 2}
    return [("whole saturated", fake(load=None, **common)),
            ("whole 0.90 mu", Result(Summary.from_mapping(
                {**common, "load": 0.9, "rate": 2.9, "slope": 0.0, "slope_se": 0.01,
                 "fluid_slope": 0.0}), series=series)),
            ("whole 1.20 mu", Result(Summary.from_mapping(
                {**common, "load": 1.2, "rate": 3.9, "slope": 0.6, "slope_se": 0.02,
                 "fluid_slope": 0.66}), series=series))]


FIGURES = {
    "plot_table1": (2, lambda a: plot_table1(
        [("1:1", fake(throughput_requests_per_s=3.2, mu=3.26, mu_calculator=3.26,
                      recompute_fraction=0.3, kv_utilization=0.99,
                      preemptions_per_iteration=0.1))], "table 1", axes=a)),
    "plot_memory_boundary": (2, lambda a: plot_memory_boundary(
        boundary_rows(), ["whole 0.90 mu"], "boundary", axes=a)),
    "plot_coprime": (1, lambda a: plot_coprime(
        [("a", fake(vp=200, kv=200_000, vd_a=1, vd_b=3, gcd=2, preemptions_per_iteration=2.5)),
         ("b", fake(vp=6, kv=2000, vd_a=1, vd_b=3, gcd=2, preemptions_per_iteration=20.0))],
        "coprime", ax=a[0] if a else None)),
    "plot_memory_waste": (2, lambda a: plot_memory_waste(
        [("vllm", fake(throughput_over_mu=0.9, throughput_requests_per_s=2.9, area_over_g=1.1,
                       kv_utilization=0.99)), ("point-c", fake(throughput_over_mu=None))],
        "waste", {"vllm": 0.9}, {"vllm": 1.1}, axes=a)),
}


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figures_draw_into_given_axes_with_units(name):
    check_figure(*FIGURES[name])
