"""Calibration of the roofline's efficiency on whole-run throughput
(:mod:`llmqueue.experiments.calibration`) and what it stands on: the roofline
priced a whole run at once (:meth:`Roofline.iteration_times`,
:meth:`Roofline.run_seconds`, :class:`~llmqueue.hardware.run_time.MaxSum`),
efficiency profiles (:func:`~llmqueue.hardware.efficiency.read_profile`).

Expected values come from an independent computation: ``batch_time`` one
iteration at a time, a brute-force sum of maxima, a fresh simulation at the
efficiency in question, or an efficiency chosen to generate the measurements."""

import dataclasses
import json
import math

import numpy as np
import pytest

from llmqueue.experiments import calibration as cal
from llmqueue.experiments.measurements import Measurement, predict, read_measurements
from llmqueue.hardware.efficiency import PRESETS, Efficiency, efficiency, read_profile
from llmqueue.hardware.roofline import Iterations, Roofline
from llmqueue.hardware.run_time import MaxSum
from llmqueue.models.context import BatchContext

#: A GPU / model / tp / precision of each kind: one GPU, and two with all-reduces.
ROOFLINES = [("llama-3.1-8b", 1), ("llama-3.3-70b", 2)]
#: The efficiency the round trip generates its measurements at (inside BOUNDS, every
#: free field away from the default one).
TRUTH = Efficiency(mfu=0.6, mbu=0.75, mfu_attn=0.35, mbu_attn=0.7, tau_layer=20e-6,
                   t_step=0.3e-3)
#: An efficiency far from the default (for the premise: a new simulation at it).
FAR = Efficiency(mfu=0.4, mbu=0.65, tau_layer=0.0, t_step=1e-3)
HEADER = "engine,model,gpu,tp,precision,isl,osl,requests,output_tokens_per_s\n"
#: Tiny rows of different shapes: short/long prompts, short/long outputs, two models.
SHAPES = [("llama-3.1-8b", 1, 128, 128, 200), ("llama-3.1-8b", 1, 1000, 100, 50),
          ("llama-3.1-8b", 1, 100, 1000, 50), ("llama-3.1-8b", 1, 2000, 50, 20),
          ("llama-3.3-70b", 2, 512, 256, 40), ("llama-3.3-70b", 2, 2000, 64, 16)]
#: A small lazily-admitted KV pool that preempts long outputs (TensorRT-LLM's
#: KV share applies only to kv=auto).
PREEMPTING = {"kv": "4000", "kv_admission": "lazy", "kv_cache_free_gpu_mem_fraction": "none"}


def row(model="llama-3.1-8b", tp=1, isl=128, osl=128, requests=100, measured=1000.0,
        line=2, **more):
    """A TensorRT-LLM fp8 H100 measurement row."""
    return Measurement("trtllm", model, "H100", tp, "fp8", isl, osl, requests, measured,
                       line, **more)


def write_csv(path, rows):
    """A measurement file of ``rows`` ``(model, tp, isl, osl, requests, measured)``."""
    path.write_text(HEADER + "".join(f"trtllm,{m},H100,{tp},fp8,{i},{o},{n},{x!r}\n"
                                     for m, tp, i, o, n, x in rows))
    return str(path)


def write_profile(path, eff):
    path.write_text(json.dumps({"efficiency": eff.as_dict()}))
    return str(path)


def random_efficiency(rng):
    """The default efficiency with every field of BOUNDS drawn inside its bounds."""
    return dataclasses.replace(Efficiency(), **{n: float(rng.uniform(lo, hi))
                                                for n, (lo, hi) in cal.BOUNDS.items()})


def random_work(rng, n=200):
    """``n`` random iterations: decode and prefill tokens (not both 0), chunks in
    1..prefill with prefill and 0 without, cached-token contexts over decades
    (so each max of the roofline is won by either side)."""
    decode = rng.integers(0, 400, n) * (rng.random(n) < 0.7)
    prefill = rng.integers(0, 8192, n) * (rng.random(n) < 0.6)
    prefill[decode + prefill == 0] = 1
    chunks = np.where(prefill > 0, 1 + (rng.random(n) * prefill).astype(np.int64), 0)
    chunks = np.minimum(chunks, prefill)

    def wide(high):
        return (10 ** rng.uniform(0, high, n)).astype(np.int64) * (rng.random(n) < 0.85)

    return Iterations(decode, prefill, chunks, wide(7), wide(6), wide(8), wide(10))


# --- 1. iteration_times is batch_time, float for float --------------------------------

@pytest.mark.parametrize("model, tp", ROOFLINES)
@pytest.mark.parametrize("eff", ["default", "ideal"])
def test_iteration_times_equal_batch_time_exactly(model, tp, eff):
    roof = Roofline("H100", model, tp, eff, "fp8")
    work = random_work(np.random.default_rng(1234 + tp))
    times = roof.iteration_times(work)
    assert times.shape == (200,)
    bounds = {"t_lin": set(), "t_ap": set(), "t_ad": set()}
    for i in range(200):
        d, p, chunks, dc, cc, sq, cross = (int(a[i]) for a in work)
        context = BatchContext(dc, chunks, cc, sq, cross)
        assert times[i] == roof.batch_time(d, p, d + chunks, context), i
        for term, side in roof.breakdown(d, p, d + chunks, context).bound.items():
            bounds[term].add(side)
    # the cases reach both sides of the GEMMs' and prefill attention's maxima (decode
    # attention reads 2*kv_heads*head_dim bytes per 4*heads*head_dim FLOPs: always
    # memory-bound on these models)
    assert {"compute", "memory"} <= bounds["t_lin"] and {"compute", "memory"} <= bounds["t_ap"]
    assert "memory" in bounds["t_ad"], bounds
    # numbers broadcast: one batch shape at many contexts
    dc = np.arange(0, 10**6, 10**4)
    shared = roof.iteration_times(Iterations(7, 300, 2, dc, 5000, 300**2 // 2, 11))
    assert shared.tolist() == [roof.batch_time(7, 300, 9, BatchContext(int(x), 2, 5000,
                                                                       45000, 11))
                               for x in dc]


def test_batch_times_and_tokens_times_go_through_iteration_times_unchanged():
    roof = Roofline("H100", "llama-3.1-8b", 1, "default", "fp8")
    context = BatchContext(12_345, 3, 777, 300**2 + 2 * 100**2, 999)
    for k in (1, 5, 31, 32, 100):  # below and above the vectorised length
        assert roof.batch_times(17, 500, 20, context, k) == [
            roof.batch_time(17, 500, 20, context.after(j, 17, 500)) for j in range(k)]
    sizes = np.array([1, 2, 127, 128, 129, 4096, 8192])
    assert roof.tokens_times(sizes).tolist() == [roof.tokens_time(int(b)) for b in sizes]


# --- 2. a run's time in O(log n) --------------------------------------------------------

def test_max_sum_is_the_brute_force_sum_of_maxima():
    rng = np.random.default_rng(7)
    for case in range(60):
        n = int(rng.integers(1, 80))
        x = rng.exponential(1.0, n) * (rng.random(n) < 0.7)  # zeros in x ...
        y = rng.exponential(1.0, n) * (rng.random(n) < 0.7)  # ... in y, and in both
        if case % 3 == 0:
            x[: n // 2] = np.round(x[: n // 2] * 4) / 4  # ties in x / y
            y[: n // 2] = np.round(y[: n // 2] * 4) / 4
        s = MaxSum(x, y)
        ratios = [xi / yi for xi, yi in zip(x, y) if xi > 0 and yi > 0]
        pairs = [(0.0, float(rng.uniform(0, 3))), (float(rng.uniform(0, 3)), 0.0),
                 (0.0, 0.0), (1.0, 1.0)] + [tuple(rng.exponential(1.0, 2)) for _ in range(8)]
        if ratios:  # b/a exactly at an iteration's ratio: both sides equal there
            pairs.append((1.0, float(ratios[0])))
        for a, b in pairs:
            brute = math.fsum(max(a * xi, b * yi) for xi, yi in zip(x, y))
            assert s.total(a, b) == pytest.approx(brute, rel=1e-12, abs=1e-300), (case, a, b)


def test_max_sum_of_nothing_and_of_zeros():
    assert MaxSum(np.zeros(0), np.zeros(0)).total(2.0, 3.0) == 0.0
    assert MaxSum(np.zeros(4), np.zeros(4)).total(2.0, 3.0) == 0.0
    assert MaxSum([0.0, 5.0], [2.0, 0.0]).total(0.0, 0.0) == 0.0
    assert MaxSum([0.0, 5.0], [2.0, 0.0]).total(1.0, 1.0) == 7.0


@pytest.mark.parametrize("model, tp", ROOFLINES)
def test_run_seconds_is_the_sum_of_the_iteration_times(model, tp):
    rng = np.random.default_rng(99 + tp)
    work = random_work(rng, 500)
    roof = Roofline("H100", model, tp, "default", "fp8")
    totals = roof.run_totals(work)  # reduced once, priced at any efficiency
    assert totals.iterations == 500
    for eff in [Efficiency()] + [random_efficiency(rng) for _ in range(6)]:
        other = roof.with_efficiency(eff)
        assert other.run_seconds(totals) == pytest.approx(
            math.fsum(other.iteration_times(work)), rel=1e-9)
    # the ideal preset has its own GEMM tile (1) and no element-wise term
    ideal = roof.with_efficiency("ideal")
    assert ideal.run_seconds(ideal.run_totals(work)) == pytest.approx(
        math.fsum(ideal.iteration_times(work)), rel=1e-9)


def test_iteration_log_keeps_every_iteration_it_priced():
    roof = Roofline("H100", "llama-3.1-8b", 1, "default", "fp8")
    log = cal.IterationLog(roof)
    assert log.iterations().decode.size == 0
    assert log.kv_capacity == roof.kv_capacity  # everything else is the inner model's
    seconds = [log.batch_time(0, 700, 2, BatchContext(0, 2, 0, 350**2 * 2, 0))]
    seconds += log.batch_times(40, 0, 40, BatchContext(8000), 3)
    seconds += log.batch_times(9, 120, 10, BatchContext(900, 1, 64, 120**2, 64 * 120), 50)
    seconds.append(log.batch_time(5, 0, 5, BatchContext(5000)))
    work = log.iterations()
    assert work.decode.size == 1 + 3 + 50 + 1
    assert roof.iteration_times(work).tolist() == seconds
    assert work.decode_ctx[1:4].tolist() == [8000, 8040, 8080]


# --- 3. the premise: an offline batch's schedule does not depend on the times ----------

@pytest.mark.parametrize("shape, overrides", [
    (dict(isl=128, osl=128, requests=200), {}),
    (dict(isl=2000, osl=50, requests=20), {}),
    (dict(isl=100, osl=600, requests=40), {"engine": "vllm"}),
    (dict(model="llama-3.3-70b", tp=2, isl=512, osl=256, requests=40), {}),
    (dict(isl=128, osl=512, requests=40), PREEMPTING),
])
def test_one_simulation_prices_the_run_at_any_efficiency(tmp_path, shape, overrides):
    m = row(**shape)
    run = cal.record(m, overrides)
    simulated = predict(m, overrides)
    assert cal.predicted(run, Efficiency()) == pytest.approx(simulated["predicted"], rel=1e-6)
    profile = write_profile(tmp_path / "far.json", FAR)
    fresh = predict(m, {**overrides, "efficiency": profile})
    assert cal.predicted(run, FAR) == pytest.approx(fresh["predicted"], rel=1e-6)
    assert fresh["predicted"] < 0.95 * simulated["predicted"]  # a different efficiency
    assert run.output_tokens == m.requests * m.osl
    if overrides is PREEMPTING:  # the schedule is still the same with preemptions
        assert simulated["preemptions"] > 0 and fresh["preemptions"] > 0


def test_record_refuses_rows_it_cannot_calibrate_on():
    with pytest.raises(ValueError, match="rate"):
        cal.record(row(rate=5.0))
    with pytest.raises(ValueError, match="roofline"):
        cal.record(row(), {"latency": "staircase"})


# --- 4. fitting recovers a known efficiency ----------------------------------------------

@pytest.fixture(scope="module")
def synthetic():
    """The rows of SHAPES measured at TRUTH (a file written, then read back) and
    their recorded runs."""
    rows = [row(mod, tp, i, o, n, line=k + 2) for k, (mod, tp, i, o, n) in enumerate(SHAPES)]
    runs = [cal.record(m) for m in rows]
    return [(mod, tp, i, o, n, cal.predicted(r, TRUTH))
            for (mod, tp, i, o, n), r in zip(SHAPES, runs)], runs


def runs_of(measurements, runs):
    """``runs`` with their rows replaced by ``measurements`` (same shapes)."""
    assert [m[:8] for m in measurements] == [r.measurement[:8] for r in runs]
    return [r._replace(measurement=m) for m, r in zip(measurements, runs)]


def test_fit_recovers_the_efficiency_that_made_the_measurements(tmp_path, synthetic):
    table, runs = synthetic
    measured = read_measurements(write_csv(tmp_path / "m.csv", table))
    runs = runs_of(measured, runs)
    fitted = cal.fit(runs, cal.FREE)
    for r in runs:
        assert cal.predicted(r, fitted) == pytest.approx(r.measurement.output_tokens_per_s,
                                                         rel=0.005)
    # two models of 32 and 80 layers and six shapes identify every free field
    for name in cal.FREE:
        assert getattr(fitted, name) == pytest.approx(getattr(TRUTH, name), rel=1e-3), name
    for name in ("eta_el", "eta_link", "t_req", "alpha", "tile"):  # not free: the base's
        assert getattr(fitted, name) == getattr(Efficiency(), name)


def test_one_model_identifies_only_the_sum_of_its_per_iteration_overheads(synthetic):
    table, runs = synthetic
    runs = runs_of([r.measurement._replace(output_tokens_per_s=t[-1])
                    for r, t in zip(runs, table)], runs)[:4]  # llama-3.1-8b only
    fitted = cal.fit(runs, cal.FREE)
    for r in runs:
        assert cal.predicted(r, fitted) == pytest.approx(r.measurement.output_tokens_per_s,
                                                         rel=0.005)
    # t_step and L*tau_layer are both paid once per iteration (L = 32)
    assert 32 * fitted.tau_layer + fitted.t_step == pytest.approx(
        32 * TRUTH.tau_layer + TRUTH.t_step, rel=0.05)


def test_fit_of_some_fields_keeps_the_others_at_the_base(synthetic):
    table, runs = synthetic
    runs = runs_of([r.measurement._replace(output_tokens_per_s=t[-1])
                    for r, t in zip(runs, table)], runs)
    base = dataclasses.replace(TRUTH, mfu=0.8, mbu=0.9)
    fitted = cal.fit(runs, ("mbu", "mfu"), base)
    assert fitted == dataclasses.replace(base, mfu=fitted.mfu, mbu=fitted.mbu)
    assert (fitted.mfu, fitted.mbu) == pytest.approx((TRUTH.mfu, TRUTH.mbu), rel=1e-4)


def test_fit_refuses_bad_fields_and_no_rows(synthetic):
    runs = synthetic[1]
    for free, message in [((), "at least one"), (("bogus",), "bogus"),
                          (("mfu", "mfu"), "repeat"), (("tile",), "tile")]:
        with pytest.raises(ValueError, match=message):
            cal.fit(runs, free)
    with pytest.raises(ValueError, match="eta_el"):
        cal.fit(runs, ("eta_el",), dataclasses.replace(Efficiency(), eta_el=None))
    with pytest.raises(ValueError, match="at least one offline row"):
        cal.fit([], cal.FREE)


# --- 5. bounds hold ------------------------------------------------------------------------

def test_an_impossible_measurement_leaves_the_fit_at_its_bounds():
    m = row(isl=128, osl=128, requests=100)
    ideal = predict(m, {"efficiency": "ideal"})["predicted"]  # no hardware does better
    result = cal.calibrate([m._replace(output_tokens_per_s=3 * ideal)])
    eff = result.efficiency
    for name in cal.FREE:
        lo, hi = cal.BOUNDS[name]
        assert lo <= getattr(eff, name) <= hi, (name, getattr(eff, name))
    assert result.at_bounds() and set(result.at_bounds()) <= set(cal.FREE)
    (only,) = result.rows
    assert only["fitted"] < ideal < only["output_tokens_per_s"]
    assert only["fitted_error"] < -0.6
    assert only["unseen"] is None and only["unseen_error"] is None  # no other row


# --- 6. cross-validation ------------------------------------------------------------------

def test_each_row_is_predicted_by_a_fit_that_never_saw_it(tmp_path, synthetic):
    table, _ = synthetic
    # measurements off the truth by a few percent, so no fit is exact
    noisy = [t[:-1] + (t[-1] * f,) for t, f in zip(table[:4], (1.03, 0.97, 1.02, 0.99))]
    measured = read_measurements(write_csv(tmp_path / "m.csv", noisy))
    ticks = []
    result = cal.calibrate(measured, free=("mfu", "mbu", "t_step"), holdout="row",
                           progress=lambda done, total: ticks.append((done, total)))
    assert [d for d, _ in ticks] == list(range(1, 4 + 4 + 1 + 1))  # 4 runs, 1 + 4 fits
    assert {t for _, t in ticks} == {9}
    assert result.free == ("mfu", "mbu", "t_step") and result.holdout == "row"
    assert [r["line"] for r in result.rows] == [2, 3, 4, 5]
    runs = [cal.record(m) for m in measured]  # recorded again, independently
    for r, m, run in zip(result.rows, measured, runs):
        assert r["fitted"] == pytest.approx(cal.predicted(run, result.efficiency), rel=1e-9)
        assert r["fitted_error"] == pytest.approx(r["fitted"] / m.output_tokens_per_s - 1,
                                                  rel=1e-12)
        assert r["unseen_error"] == pytest.approx(r["unseen"] / m.output_tokens_per_s - 1,
                                                  rel=1e-12)
    for i in (0, 2):
        others = cal.fit(runs[:i] + runs[i + 1:], ("mfu", "mbu", "t_step"))
        assert result.rows[i]["unseen"] == pytest.approx(cal.predicted(runs[i], others),
                                                         rel=1e-9)
    assert cal.fit(runs, ("mfu", "mbu", "t_step")) == result.efficiency
    assert result.summary("unseen")["rows"] == 4


def test_holding_out_a_model(synthetic):
    table, _ = synthetic
    rows = [row(mod, tp, i, o, n, x, line=k + 2) for k, (mod, tp, i, o, n, x)
            in enumerate(table)]
    # one model: nothing is left to fit on when it is held out
    alone = cal.calibrate(rows[:3], free=("mfu", "mbu"), holdout="model")
    assert [r["unseen"] for r in alone.rows] == [None] * 3
    assert [r["unseen_error"] for r in alone.rows] == [None] * 3
    assert alone.summary("unseen") == {"rows": 0, "median_abs_error": None,
                                       "max_abs_error": None}
    # two models: each is predicted from the other's rows alone
    both = cal.calibrate([rows[0], rows[4], rows[1]], free=("mbu",), holdout="model")
    runs = [cal.record(m) for m in (rows[0], rows[4], rows[1])]
    from_70b = cal.fit([runs[1]], ("mbu",))
    from_8b = cal.fit([runs[0], runs[2]], ("mbu",))
    expected = [cal.predicted(runs[0], from_70b), cal.predicted(runs[1], from_8b),
                cal.predicted(runs[2], from_70b)]
    assert [r["unseen"] for r in both.rows] == pytest.approx(expected, rel=1e-9)


def test_calibrate_skips_rows_at_a_rate_and_refuses_bad_holdouts():
    rows = [row(line=2), row(line=3, rate=4.0), row(isl=1000, osl=64, requests=20, line=4)]
    result = cal.calibrate(rows, free=("mbu",))
    assert result.skipped == [3]
    assert [r["line"] for r in result.rows] == [2, 4]
    with pytest.raises(ValueError, match="holdout"):
        cal.calibrate(rows, free=("mbu",), holdout="x")
    with pytest.raises(ValueError, match="at least one offline row"):
        cal.calibrate([rows[1]], free=("mbu",))


# --- 7. profiles ---------------------------------------------------------------------------

def test_a_profile_round_trips_and_prices_the_run(tmp_path):
    m = row(isl=300, osl=200, requests=30)
    result = cal.calibrate([m], free=("mfu", "mbu"))
    data = cal.profile(result, "m.csv", {"kv_block": "16"})
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    assert read_profile(str(path)) == result.efficiency
    assert efficiency(str(path)) == result.efficiency
    assert data["free"] == ["mfu", "mbu"] and data["set"] == {"kv_block": "16"}
    assert data["bounds"] == {"mfu": [0.3, 0.9], "mbu": [0.6, 0.95]}
    # a profile holding some fields: the others are the default's
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"efficiency": {"mbu": 0.9, "eta_el": None}}))
    assert read_profile(str(partial)) == dataclasses.replace(Efficiency(), mbu=0.9, eta_el=None)
    assert efficiency("Ideal") == PRESETS["ideal"]


@pytest.mark.parametrize("body, message", [
    (None, "cannot read"),
    ("{not json", "not JSON"),
    ('["efficiency"]', "'efficiency' object"),
    ('{"mfu": 0.5}', "'efficiency' object"),
    ('{"efficiency": {"mfu": 0.5, "speed": 2}}', "unknown field.*speed"),
    ('{"efficiency": {"mfu": 1.5}}', "mfu"),
    ('{"efficiency": {"t_step": -1}}', "t_step"),
    ('{"efficiency": {"tile": 0}}', "tile"),
])
def test_bad_profiles_are_one_line_errors_naming_the_file(tmp_path, body, message):
    path = tmp_path / "bad.json"
    if body is not None:
        path.write_text(body)
    with pytest.raises(ValueError, match=message) as info:
        efficiency(str(path))
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_name_that_is_neither_preset_nor_profile_is_refused():
    with pytest.raises(ValueError, match="ideal, default"):
        efficiency("fast")


@pytest.mark.slow
def test_the_shipped_rows_calibrate_to_the_trtllm_preset_and_meet_the_issues_goal():
    """Issue #32's goal on TensorRT-LLM's published H100 rows: rows a
    calibration never saw (each left out in turn) are predicted within 8% at
    the median and 20% at worst; and the fit on all of them is the ``trtllm``
    preset, which the MLPerf simulation uses."""
    from llmqueue.experiments.measurements import SHIPPED
    result = cal.calibrate(read_measurements(SHIPPED))
    unseen = result.summary("unseen")
    assert unseen["rows"] == 21
    assert unseen["median_abs_error"] <= 0.08 and unseen["max_abs_error"] <= 0.20
    preset = PRESETS["trtllm"]
    for name in cal.FREE:
        assert getattr(result.efficiency, name) == pytest.approx(getattr(preset, name),
                                                                 rel=2e-3, abs=1e-9), name
