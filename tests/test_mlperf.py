"""MLPerf Llama-2-70B simulated (llmqueue.experiments.mlperf) and a results
file predicted row by row (llmqueue.experiments.mlperf_table).

Every expected value has its own reason: the speed factor's round trip
through a fresh simulation, the Server capacity checked by long Poisson runs
of the benchmark's own workload, an Offline run priced iteration by iteration
by hand, and the rules of the results table.  Systems are small (one or two
H200s, a few hundred samples) so the default run stays short; the heavier
checks are marked slow."""

import csv
import json
import math
import os

import numpy as np
import pytest

from llmqueue import simulate
from llmqueue.experiments import mlperf
from llmqueue.experiments.mlperf_rows import read_mlperf
from llmqueue.experiments.mlperf_table import predict_file, settings, summary
from llmqueue.hardware.efficiency import FRACTIONS, PRESETS, Efficiency
from llmqueue.models import mlperf as workload
from llmqueue.models.context import BatchContext
from llmqueue.models.mlperf import mlperf_poisson, sample_order

#: The dataset's lengths, read here with the csv module (not through the package).
DATA = os.path.join(os.path.dirname(workload.__file__), "data", workload.DATA_FILE)
#: One H200 of tp=1 (Llama-2-70B in FP8 fits): the cheapest engine copy.
H200 = {"gpu": "H200-SXM-141GB", "gpus": "1", "tp": "1"}
#: Columns of a results file, as in the shipped one.
HEADER = ("version,organization,system,accelerator,accelerators,scenario,tokens_per_s,"
          "samples_per_s,target_qps,ttft_p99_s,tpot_p99_s,precision,tp,pp,max_batch_size,"
          "max_num_tokens,kv_fraction,chunked_context,engine")
BASE_ROW = {"version": "v4.1", "organization": "Org", "system": "sys", "accelerator": "H200",
            "accelerators": "1", "scenario": "Offline", "tokens_per_s": "1000",
            "samples_per_s": "", "target_qps": "", "ttft_p99_s": "", "tpot_p99_s": "",
            "precision": "fp8", "tp": "1", "pp": "1", "max_batch_size": "",
            "max_num_tokens": "", "kv_fraction": "0.90", "chunked_context": "",
            "engine": "TensorRT-LLM (custom harness)"}


def dataset():
    """``(prompts, scaled outputs)`` of the shipped CSV, by the rule its
    docstring states: ``min(max(1, round(1.3303 x reference)), 1024)``."""
    with open(DATA, newline="") as handle:
        rows = list(csv.reader(handle))[1:]
    prompts = [int(p) for p, _ in rows]
    outputs = [min(max(1, round(1.3303 * int(d))), 1024) for _, d in rows]
    return prompts, outputs


def write_results(path, *rows):
    """A results file of ``rows`` (dicts of cells over BASE_ROW)."""
    columns = HEADER.split(",")
    lines = [HEADER] + [",".join(f'"{({**BASE_ROW, **r}).get(c, "")}"' for c in columns)
                        for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def write_profile(path, eff):
    """An efficiency profile file (what ``--set efficiency=PATH`` reads)."""
    path.write_text(json.dumps({"efficiency": eff.as_dict()}), encoding="utf-8")
    return str(path)


# --- the speed factor --------------------------------------------------------------

SMALL = [{**H200, "gpus": "2", "samples": "120"},          # 2 copies of tp=1
         {"gpus": "4", "tp": "2", "samples": "120"}]       # H100 tp=2: all-reduce terms too


@pytest.mark.parametrize("keys", SMALL, ids=["h200-tp1", "h100-tp2"])
def test_an_offline_run_prices_itself_as_it_simulated(keys):
    run = mlperf.offline(mlperf.system(keys))
    copies = int(keys["gpus"]) // int(keys["tp"])
    assert run.system.copies == copies and run.samples == 120 and run.preemptions == 0
    _, outputs = workload.mlperf_lengths()
    assert run.output_tokens == int(outputs[sample_order(120, 0)].sum())
    # the iterations kept, priced again, give the simulated makespan (ns rounding apart)
    assert run.tokens_per_s() == pytest.approx(copies * run.output_tokens / run.makespan,
                                               rel=1e-6)
    assert run.samples_per_s() == pytest.approx(copies * 120 / run.makespan, rel=1e-6)


@pytest.mark.parametrize("keys", SMALL, ids=["h200-tp1", "h100-tp2"])
@pytest.mark.parametrize("share", [0.8, 1.05])
def test_calibration_round_trips_through_a_fresh_simulation(tmp_path, keys, share):
    s = mlperf.system(keys)
    run = mlperf.offline(s)
    measured = share * run.tokens_per_s()
    f = mlperf.calibrate_speed(run, measured)
    eff = mlperf.faster(s.efficiency, f)
    assert run.tokens_per_s(eff) == pytest.approx(measured, rel=1e-4)
    # every term of the roofline is a work over an efficiency or a fixed time, so
    # the engine f times as fast makes f times the tokens/s: f is the share itself
    assert f == pytest.approx(share, rel=1e-4)
    # a new simulation at that efficiency, read from a profile file as --set
    # efficiency=PATH does: an Offline schedule does not depend on the iteration
    # times, so it makes what the repricing said
    path = write_profile(tmp_path / "fast.json", eff)
    fresh_system = mlperf.system({**keys, "efficiency": path})
    assert fresh_system.efficiency == eff
    fresh = mlperf.offline(fresh_system)
    assert (fresh.output_tokens, fresh.samples) == (run.output_tokens, run.samples)
    assert s.copies * fresh.output_tokens / fresh.makespan == pytest.approx(
        run.tokens_per_s(eff), rel=1e-6)
    assert fresh.tokens_per_s() == pytest.approx(measured, rel=1e-4)
    assert fresh.makespan == pytest.approx(run.makespan / f, rel=1e-6)


def test_faster_scales_every_efficiency_up_and_every_fixed_time_down():
    eff = PRESETS["trtllm"]
    fast = mlperf.faster(eff, 1.04)
    for name in FRACTIONS:
        if getattr(eff, name) is not None:
            assert getattr(fast, name) == pytest.approx(getattr(eff, name) * 1.04)
    for name in ("tau_layer", "t_step", "t_req", "alpha"):
        assert getattr(fast, name) == pytest.approx(getattr(eff, name) / 1.04)
    assert fast.tile == eff.tile and fast.eta_el == pytest.approx(eff.eta_el * 1.04)
    slow = mlperf.faster(eff, 0.5)
    assert slow.mbu == pytest.approx(eff.mbu / 2) and slow.t_req == pytest.approx(2 * eff.t_req)


def test_faster_refuses_a_factor_taking_mbu_over_one():
    eff = Efficiency(mfu=0.5, mbu=0.9, mfu_attn=0.5, mbu_attn=0.5, eta_link=0.5)
    mlperf.faster(eff, 1.1)  # mbu 0.99: still physical
    with pytest.raises(ValueError, match=r"mbu = 0\.9 x 1\.2 = 1\.08 > 1.*HBM"):
        mlperf.faster(eff, 1.2)
    # the trtllm preset's largest efficiency is mbu_attn = 0.95: 1/0.95 is the limit
    trt = PRESETS["trtllm"]
    assert trt.mbu_attn == 0.95
    mlperf.faster(trt, 1 / 0.95)
    with pytest.raises(ValueError, match="mbu_attn"):
        mlperf.faster(trt, 1.06)
    for bad in (0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="factor"):
            mlperf.faster(trt, bad)


def test_calibration_refuses_a_figure_beyond_physics():
    s = mlperf.system({**H200, "samples": "60"})
    run = mlperf.offline(s)
    base = run.tokens_per_s()
    ideal = run.tokens_per_s(PRESETS["ideal"])
    with pytest.raises(ValueError, match="physical.*HBM"):
        mlperf.calibrate_speed(run, 10 * ideal)
    # the fastest physical speed takes mbu_attn = 0.95 to 1: base / 0.95 tokens/s
    assert mlperf.calibrate_speed(run, 1.05 * base) == pytest.approx(1.05, rel=1e-4)
    with pytest.raises(ValueError, match="physical"):
        mlperf.calibrate_speed(run, 1.06 * base)
    for bad in (0, -5.0, math.nan):
        with pytest.raises(ValueError, match="offline tokens per second"):
            mlperf.calibrate_speed(run, bad)
    # a very slow figure needs a factor below the bisection's first bracket
    assert mlperf.calibrate_speed(run, base * 1e-5) == pytest.approx(1e-5, rel=1e-4)


# --- the system --------------------------------------------------------------------

def test_the_defaults_are_nvidias_h100_system():
    s = mlperf.system({})
    p = s.params
    assert (p["engine"], p["gpu"], p["gpus"], p["tp"], p["precision"], p["kv_cache_dtype"],
            p["efficiency"], p["samples"], p["seconds"], p["reps"]) == (
        "trtllm", "H100-SXM-80GB", 8, 2, "fp8", "fp8", "trtllm", 24576, 600.0, 3)
    assert s.copies == 4 and s.roofline.tp == 2 and p["first_token"] == "prefill"
    assert s.efficiency == PRESETS["trtllm"]


@pytest.mark.parametrize("keys, words", [
    ({"gpus": "3"}, "multiple of tp"),
    ({"gpu": "nope"}, "gpu"),
    ({"latency": "staircase"}, "roofline"),
    ({"samples": "0"}, "samples"),
    ({"split": "sideways"}, "split"),
    ({"nonsense": "1"}, "nonsense"),
])
def test_a_bad_system_is_a_value_error_naming_it(keys, words):
    with pytest.raises(ValueError, match=words):
        mlperf.system(keys)


@pytest.mark.parametrize("gpus, split, cv", [
    (4, "round-robin", 0.5), (4, "random", None), (1, "round-robin", None),
    (1, "random", None), (2, "round-robin", 1 / math.sqrt(2))])
def test_the_round_robin_split_gives_erlang_gaps(gpus, split, cv):
    s = mlperf.system({**H200, "gpus": str(gpus), "split": split})
    assert s.copies == gpus
    t = mlperf.traffic(s)
    assert t.cv == (None if cv is None else pytest.approx(cv))
    prompts, outputs = dataset()
    assert t.pairs == (tuple(prompts), tuple(outputs))  # each prompt keeps its output


# --- Server and Interactive capacity -------------------------------------------------

#: A cheap copy for the capacity searches: one H200, a small batch.
CHEAP = {**H200, "kmax": "64", "samples": "200", "seconds": "30", "reps": "2"}


def p99s(spec, rate, seed, n=4000):
    """p99 TTFT and p99 TPOT (s) of ``n`` Poisson arrivals of the benchmark's
    workload at ``rate`` on the engine ``spec``, the first 10% left out,
    computed from the request log."""
    w = mlperf_poisson(rate, samples=n, seed=seed)
    res = simulate(w, spec.policy, bmax=spec.bmax, kmax=spec.kmax, latency=spec.latency,
                   chunked=spec.chunked, kv=spec.kv, first_token="prefill", requests=True)
    log = res.requests()[n // 10:]
    assert len(log) == n - n // 10 and all(r.finished is not None for r in log)
    ttft = [r.first_token - r.arrival for r in log]
    tpot = [(r.finished - r.first_token) / (r.vd - 1) for r in log if r.vd > 1]
    return float(np.quantile(ttft, 0.99)), float(np.quantile(tpot, 0.99))


def check_bracket(s, scenario, result, seeds=(1, 2, 3), n=4000):
    """At ``result.lo`` both p99s hold in long runs (each seed and their mean);
    at ``result.hi`` the mean over seeds breaks one."""
    limit = mlperf.LIMITS[scenario]
    spec = mlperf.engine_spec(s)
    assert 0 < result.lo < result.hi < math.inf
    at_lo = np.array([p99s(spec, result.lo, seed, n) for seed in seeds])
    at_hi = np.array([p99s(spec, result.hi, seed, n) for seed in seeds])
    assert (at_lo[:, 0] <= limit.ttft).all() and (at_lo[:, 1] <= limit.tpot).all(), at_lo
    ttft, tpot = at_hi.mean(axis=0)
    assert ttft > limit.ttft or tpot > limit.tpot, at_hi


def test_the_engine_spec_is_one_copy_of_the_preset():
    s = mlperf.system(CHEAP)
    spec = mlperf.engine_spec(s)
    assert (spec.policy, spec.bmax, spec.kmax, spec.chunked, spec.first_token) == (
        "sarathi", 8192, 64, False, "prefill")
    assert spec.kv is not None and spec.kv.admission == "peak" and spec.kv.block_size == 32
    assert spec.latency is s.roofline
    fast = mlperf.faster(s.efficiency, 1.02)
    assert mlperf.engine_spec(s, fast).latency.efficiency == fast


def test_server_capacity_passes_at_lo_and_fails_at_hi_in_long_runs():
    s = mlperf.system(CHEAP)
    run = mlperf.offline(s)
    result = mlperf.capacity(s, "server", run, progress=False)
    assert result.mode == "quantile" and result.target == 0.99
    assert result.config["slo"] == {"ttft": 2.0, "tpot": 0.2}
    check_bracket(s, "server", result)
    fig = mlperf.figures(s, result)
    mean_output = float(np.mean(dataset()[1]))
    assert fig["samples_per_s"] == result.lo * s.copies
    assert fig["tokens_per_s"] == pytest.approx(result.lo * mean_output, rel=1e-12)
    assert fig["bracket_per_copy"] == [result.lo, result.hi]
    assert 0 < fig["ttft_p99_s"] <= 2.0 and 0 < fig["tpot_p99_s"] <= 0.2


def test_interactive_limits_are_tighter_than_servers():
    assert mlperf.LIMITS["server"].ttft == 2.0 and mlperf.LIMITS["server"].tpot == 0.2
    assert mlperf.LIMITS["interactive"].ttft == 0.45
    assert mlperf.LIMITS["interactive"].tpot == 0.04
    s = mlperf.system(CHEAP)
    with pytest.raises(ValueError, match="scenario"):
        mlperf.capacity(s, "offline", mlperf.offline(s))


@pytest.mark.slow
def test_interactive_capacity_passes_at_lo_and_fails_at_hi_in_long_runs():
    s = mlperf.system(CHEAP)
    run = mlperf.offline(s)
    result = mlperf.capacity(s, "interactive", run, progress=False)
    assert result.config["slo"] == {"ttft": 0.45, "tpot": 0.04}
    check_bracket(s, "interactive", result, seeds=(1, 2, 3, 4, 5), n=8000)


@pytest.mark.slow
def test_server_capacity_of_a_tp2_copy_with_a_large_batch():
    s = mlperf.system({"gpus": "2", "tp": "2", "kmax": "256", "samples": "1000",
                       "seconds": "300", "reps": "3"})
    run = mlperf.offline(s)
    result = mlperf.capacity(s, "server", run, progress=False)
    # each replication measures at least `seconds` of arrivals at the Offline rate
    assert result.config["n_requests"] >= run.samples_per_s() / s.copies * 300
    check_bracket(s, "server", result, seeds=(1, 2, 3), n=8000)


@pytest.mark.slow
def test_server_capacity_under_a_speed_factor_is_checked_at_that_speed():
    s = mlperf.system(CHEAP)
    run = mlperf.offline(s)
    eff = mlperf.faster(s.efficiency, mlperf.calibrate_speed(run, 0.7 * run.tokens_per_s()))
    result = mlperf.capacity(s, "server", run, eff, progress=False)
    slow_system = mlperf.System(s.params, s.roofline.with_efficiency(eff), s.copies)
    check_bracket(slow_system, "server", result)


# --- Offline by hand -----------------------------------------------------------------

def test_offline_of_two_samples_priced_by_hand(tmp_path):
    path = write_results(tmp_path / "one.csv", {
        "system": "two-h200", "accelerators": "2", "tp": "1", "tokens_per_s": "5000",
        "kv_fraction": "", "engine": "TensorRT-LLM"})
    rows = read_mlperf(path)
    (out,) = predict_file(rows, {"samples": "2"})
    s = mlperf.system(settings(rows[0], {"samples": "2"}))
    assert s.copies == 2 and s.params["bmax"] >= 2 * 1024 and not s.params["chunked"]
    roof = s.roofline
    assert (roof.precision.weights, roof.precision.kv) == ("fp8", "fp8")
    prompts, outputs = dataset()
    order = sample_order(2, seed=0)
    p = [prompts[i] for i in order]
    d = [outputs[i] for i in order]
    assert min(d) > 1

    def ns(seconds):  # the engine's clock counts whole nanoseconds
        return round(seconds * 1e9)

    # iteration 1 prefills both prompts and emits both first tokens
    total = ns(roof.batch_time(0, p[0] + p[1], 2, BatchContext(
        decode_ctx=0, chunks=2, chunk_ctx=0, chunk_sq=p[0] ** 2 + p[1] ** 2, chunk_cross=0)))
    # then both decode (each holds its prompt and the tokens written so far) ...
    for j in range(min(d) - 1):
        total += ns(roof.batch_time(2, 0, 2, BatchContext(decode_ctx=p[0] + p[1] + 2 * j)))
    # ... and the longer alone, to its (d - 1)-th decode iteration
    long = 0 if d[0] > d[1] else 1
    for j in range(min(d) - 1, d[long] - 1):
        total += ns(roof.batch_time(1, 0, 1, BatchContext(decode_ctx=p[long] + j)))
    expected = 2 * (d[0] + d[1]) / (total / 1e9)
    assert out["predicted_tokens_per_s"] == pytest.approx(expected, rel=1e-6)
    assert out["copies"] == 2 and out["calibrated_on"] is None
    assert out["speed_factor"] is None and out["calibration"] is None
    assert out["error"] == pytest.approx((expected - 5000) / 5000, rel=1e-6)
    assert out["line"] == 2 and out["system"] == "two-h200"


# --- a results file ------------------------------------------------------------------

def test_a_results_file_is_predicted_row_by_row(tmp_path):
    cheap = {"samples": "100", "seconds": "20", "reps": "2", "kmax": "64"}
    path = write_results(
        tmp_path / "results.csv",
        {"system": "A", "scenario": "Offline", "tokens_per_s": "700"},
        {"system": "A", "scenario": "Server", "tokens_per_s": "800", "samples_per_s": "2.75",
         "ttft_p99_s": "0.5", "tpot_p99_s": "0.15"},
        {"system": "B", "scenario": "Server", "tokens_per_s": "700"},
        {"system": "C", "scenario": "Offline", "tokens_per_s": "700", "accelerators": "2",
         "tp": "1", "pp": "2"},
        {"system": "D", "scenario": "Offline", "tokens_per_s": "700", "accelerator": "TPU-v9"},
    )
    rows = read_mlperf(path)
    out = predict_file(rows, cheap)
    assert [(r["system"], r["scenario"], r["line"]) for r in out] == [
        ("A", "Offline", 2), ("A", "Server", 3), ("B", "Server", 4), ("C", "Offline", 5),
        ("D", "Offline", 6)]
    offline, server, orphan, piped, unknown = out
    # the Offline row: the uncalibrated model
    assert offline["calibrated_on"] is None and offline["speed_factor"] is None
    uncalibrated = offline["predicted_tokens_per_s"]
    assert uncalibrated > 700  # else the factor below would not be a slow-down
    assert offline["error"] == pytest.approx((uncalibrated - 700) / 700)
    # its Server partner: calibrated on it; the tokens/s scale with the factor
    assert server["calibrated_on"] == 700.0 and server["calibration"] is None
    assert server["speed_factor"] == pytest.approx(700 / uncalibrated, rel=1e-4)
    # the row keeps its measured figures beside the predicted ones
    assert (server["tokens_per_s"], server["samples_per_s"], server["ttft_p99_s"],
            server["tpot_p99_s"]) == (800.0, 2.75, 0.5, 0.15)
    assert server["predicted_tokens_per_s"] > 0
    assert server["predicted_tokens_per_s"] == pytest.approx(
        server["predicted_samples_per_s"] * float(np.mean(dataset()[1])), rel=1e-12)
    assert 0 < server["predicted_ttft_p99_s"] <= 2 and 0 < server["predicted_tpot_p99_s"] <= 0.2
    assert server["error"] == pytest.approx((server["predicted_tokens_per_s"] - 800) / 800)
    assert server["predicted_bracket_per_copy"][0] * 290.0 == pytest.approx(
        server["predicted_tokens_per_s"], rel=1e-3)
    # a Server row without an Offline row: the uncalibrated model
    assert orphan["calibrated_on"] is None and orphan["speed_factor"] is None
    assert orphan["predicted_tokens_per_s"] > 0 and orphan["error"] is not None
    # same copy, slower engine: the calibrated Server rate cannot beat the uncalibrated one
    assert server["predicted_rate_per_copy"] <= orphan["predicted_rate_per_copy"]
    # rows llmqueue cannot model: kept, with a reason, not predicted
    assert "pipeline" in piped["unsupported"] and "TPU-v9" in unknown["unsupported"]
    for row in (piped, unknown):
        assert row["predicted_tokens_per_s"] is None and row["error"] is None
        assert row["copies"] is None
    stats = summary(out)
    assert stats["unsupported"] == 2
    assert stats["scenarios"]["Offline"]["rows"] == 1
    assert stats["scenarios"]["Server"]["rows"] == 2
    assert "Interactive" not in stats["scenarios"]
    errors = [abs(r["error"]) for r in (server, orphan)]
    assert stats["scenarios"]["Server"]["max_abs_error"] == pytest.approx(max(errors))
    assert stats["scenarios"]["Offline"]["median_abs_error"] == pytest.approx(
        abs(offline["error"]))


def test_an_offline_partner_beyond_physics_leaves_the_row_uncalibrated(tmp_path):
    path = write_results(
        tmp_path / "results.csv",
        {"system": "A", "scenario": "Offline", "tokens_per_s": "1e9"},
        {"system": "A", "scenario": "Interactive", "tokens_per_s": "500"},
        {"system": "A", "scenario": "Server", "tokens_per_s": "500", "version": "v5.0"})
    out = predict_file(read_mlperf(path), {"samples": "60", "seconds": "20", "reps": "2",
                                           "kmax": "64"})
    _, interactive, other_version = out
    assert interactive["calibrated_on"] is None and interactive["speed_factor"] is None
    assert "physical" in interactive["calibration"]
    assert interactive["predicted_tokens_per_s"] > 0
    # another version's Offline row is not this one's partner
    assert other_version["calibrated_on"] is None and other_version["calibration"] is None
