"""SPEC 9's workload, latency and memory keys on single-engine experiments:
size laws for vp/vd, arrival=renewal|poisson|gamma:CV, initial=N,
latency=staircase|step|roofline, kv=TOKENS|auto|none."""

import csv
import json
import math
import pickle

import numpy as np
import pytest

from llmqueue.cli.main import main
from llmqueue.cli.plan import configure
from llmqueue.experiments import get
from llmqueue.experiments.base import engine_kwargs
from llmqueue.experiments.blowup import sizes as blowup_sizes
from llmqueue.experiments.traffic import size_law
from llmqueue.hardware import Roofline, kv_capacity
from llmqueue.models.latency import StepModel
from llmqueue.models.chunks import mean_chunks
from llmqueue.models.sizes import Fixed, Geometric, LogNormal, UniformInt, decode_variance
from llmqueue.sweeps import grid

FORMS = "N, uniform:LO:HI, geometric:MEAN, lognormal:MEAN:CV or empirical:FILE"


def run_json(capsys, *argv):
    assert main(list(argv) + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def requests_csv(capsys, tmp_path, *sets, horizon="100", seed=None):
    path = tmp_path / "r.csv"
    argv = ["run", "single", "--horizon", horizon, "--requests", str(path)]
    for s in sets:
        argv += ["--set", s]
    if seed is not None:
        argv += ["--seed", str(seed)]
    assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    return list(csv.DictReader(open(path)))


# --- size laws ------------------------------------------------------------------------


def test_every_size_law_parses(tmp_path):
    counts = tmp_path / "counts.txt"
    counts.write_text("3\n5\n\n10\n")
    single = get("single")
    for text, mean, variance in [("7", 7, 0), ("uniform:10:20", 15, (11 ** 2 - 1) / 12),
                                 ("geometric:50", 50, 50 * 49), ("lognormal:100:0.5", 100,
                                                                 50 ** 2),
                                 (f"empirical:{counts}", 6, np.var([3, 5, 10]))]:
        value = single.resolve({"vp": text})["vp"]
        law = size_law("vp", value)
        assert (law.mean, law.variance) == pytest.approx((mean, variance)), text
    # a plain integer stays an int (today's fixed-size code path and sweep seeds)
    assert single.resolve({"vp": "290"})["vp"] == 290


@pytest.mark.parametrize("key", ["vp", "vd"])
@pytest.mark.parametrize("text", ["uniform:5", "uniform:20:10", "geometric:0.5",
                                  "lognormal:100", "poisson:3", "-5", "1.5",
                                  "empirical:/no/such/file"])
def test_a_bad_size_law_is_one_line_naming_the_key_and_the_forms(capsys, key, text):
    assert main(["run", "single", "--set", f"{key}={text}", "--horizon", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"llmqueue: error: {key}")
    assert FORMS in err


def test_random_sizes_with_poisson_arrivals(capsys, tmp_path):
    rows = requests_csv(capsys, tmp_path, "vp=uniform:10:20", "vd=geometric:50",
                        "arrival=poisson", "rate=4", seed=1)
    vp = np.array([int(r["vp"]) for r in rows])
    vd = np.array([int(r["vd"]) for r in rows])
    times = np.array([float(r["arrival"]) for r in rows])
    assert len(rows) > 300
    # uniform on 10..20: mean 15, sd sqrt(10); both ends are drawn
    assert abs(vp.mean() - 15) < 4 * math.sqrt(10 / len(vp))
    assert vp.min() == 10 and vp.max() == 20
    # geometric of mean 50: sd sqrt(50 * 49)
    assert abs(vd.mean() - 50) < 4 * math.sqrt(50 * 49 / len(vd)) and vd.min() >= 1
    gaps = np.diff(np.sort(times))
    assert gaps.std() / gaps.mean() == pytest.approx(1, abs=0.2)  # exponential gaps


def test_renewal_with_a_size_law_keeps_deterministic_gaps(capsys, tmp_path):
    rows = requests_csv(capsys, tmp_path, "vp=uniform:100:200", "gap=0.5", horizon="20")
    times = sorted(float(r["arrival"]) for r in rows)
    assert times == pytest.approx([0.5 * k for k in range(1, len(times) + 1)])
    assert len({r["vp"] for r in rows}) > 5


def test_a_degenerate_law_gives_the_fixed_size_run_exactly(capsys):
    # uniform:290:290 draws 290 every time through compose: same requests, same numbers
    fixed = run_json(capsys, "run", "single", "--horizon", "40")["rows"][0]
    law = run_json(capsys, "run", "single", "--set", "vp=uniform:290:290", "--set",
                   "vd=uniform:990:990", "--horizon", "40")["rows"][0]
    assert law == fixed


# --- arrivals and the initial backlog ---------------------------------------------------


def test_gamma_arrivals_have_the_asked_coefficient_of_variation(capsys, tmp_path):
    cvs = {}
    for cv in (0.25, 3.0):
        rows = requests_csv(capsys, tmp_path, f"arrival=gamma:{cv}", "rate=5", "vp=10",
                            "vd=2", seed=2)
        gaps = np.diff([0.0] + sorted(float(r["arrival"]) for r in rows))
        assert gaps.mean() == pytest.approx(0.2, rel=0.15 * cv + 0.05)
        cvs[cv] = gaps.std() / gaps.mean()
    assert cvs[0.25] == pytest.approx(0.25, abs=0.05)
    assert cvs[3.0] > 2


@pytest.mark.parametrize("text", ["gamma", "gamma:0", "gamma:x", "uniform"])
def test_a_bad_arrival_law_is_refused(capsys, text):
    assert main(["run", "single", "--set", f"arrival={text}", "--horizon", "5"]) == 2
    assert "arrival must be renewal, poisson or gamma:CV" in capsys.readouterr().err


def test_initial_puts_requests_at_time_zero(capsys, tmp_path):
    rows = requests_csv(capsys, tmp_path, "initial=5", "gap=0.5", horizon="3")
    times = [float(r["arrival"]) for r in rows]
    assert times[:5] == [0.0] * 5
    assert times[5:] == pytest.approx([0.5 * k for k in range(1, len(times) - 4)])
    # drawn from the size laws
    rows = requests_csv(capsys, tmp_path, "initial=40", "vp=uniform:1:1000", horizon="1")
    assert sum(float(r["arrival"]) == 0 for r in rows) == 40
    assert len({r["vp"] for r in rows[:40]}) > 20


# --- latency keys -----------------------------------------------------------------------


def test_latency_keys_build_the_models_and_plan_uses_the_same():
    single = get("single")
    p = single.resolve({"latency": "roofline", "gpu": "H100", "model": "llama-3-8b",
                        "tp": "2", "efficiency": "ideal"})
    model = engine_kwargs(p)["latency"]
    assert isinstance(model, Roofline)
    assert repr(model) == repr(Roofline("H100", "llama-3-8b", tp=2, efficiency="ideal"))
    engine, _ = configure(["latency=roofline", "gpu=H100", "model=llama-3-8b", "tp=2",
                           "efficiency=ideal"])
    assert repr(engine.latency) == repr(model)
    assert isinstance(engine_kwargs(single.resolve({"latency": "step"}))["latency"], StepModel)


@pytest.mark.parametrize("setting, message", [
    (["latency=roofline"], "latency=roofline needs gpu=NAME and model=NAME"),
    (["latency=roofline", "gpu=H100", "model=llama-3-8b", "c=0.02"], "c is not read"),
    (["gpu=H100"], "gpu is not read with latency=staircase"),
    (["latency=step", "efficiency=ideal"], "efficiency is not read"),
    (["latency=fast"], "latency must be one of staircase, step, roofline"),
    (["gpu=T4"], "gpu must be one of"),
])
def test_bad_latency_settings_are_refused(capsys, setting, message):
    argv = ["run", "single", "--horizon", "5"]
    for s in setting:
        argv += ["--set", s]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


# --- kv=auto ----------------------------------------------------------------------------


def test_kv_auto_is_the_capacity_of_spec_8_4(capsys):
    doc = run_json(capsys, "run", "single", "--set", "kv=auto", "--set", "gpu=A100-80GB",
                   "--set", "model=codellama-34b", "--horizon", "20")
    # SPEC 8.4 [I]: CodeLlama-34B on one A100-80GB leaves 19,106 tokens
    assert doc["rows"][0]["kv_capacity"] == 19_106 == kv_capacity("A100-80GB",
                                                                   "codellama-34b")
    assert doc["params"]["kv"] == "auto" and "preemptions" in doc["rows"][0]


@pytest.mark.parametrize("setting", [["kv=auto"], ["kv=auto", "gpu=H100"]])
def test_kv_auto_needs_a_gpu_and_a_model(capsys, setting):
    argv = ["run", "single", "--horizon", "5"]
    for s in setting:
        argv += ["--set", s]
    assert main(argv) == 2
    assert "kv=auto needs gpu=NAME and model=NAME" in capsys.readouterr().err


def test_plan_refuses_keys_it_would_ignore(capsys):
    for key in ("rate=2", "initial=3"):  # plan searches the rate from an empty start
        assert main(["plan", "--set", key, "--ttft", "1"]) == 2
        assert "cannot be set for plan" in capsys.readouterr().err


# --- memory capacity with size laws -----------------------------------------------------


def test_memory_capacity_uses_the_expected_area_of_the_laws(capsys):
    doc = run_json(capsys, "capacity", "--set", "kv=1000", "--set", "vp=uniform:10:20",
                   "--set", "vd=uniform:1:3", "--set", "chunked=false", "--set",
                   "bmax=1000000", "--set", "kmax=none", "--set", "c=0.05", "--set", "a=0",
                   "--set", "b0=1")
    # E[g] = E[vp](E[vd] + 1) + (E[vd^2] + E[vd]) / 2 = 15 * 3 + (14/3 + 2) / 2 = 145/3
    assert doc["mu_mem"] == pytest.approx(1000 / (0.05 * 145 / 3))
    assert doc["tokens_per_request"] == pytest.approx(17)


def test_mean_chunks_is_the_mean_number_of_chunks():
    law = UniformInt(10, 301)
    assert mean_chunks(law, 128) == pytest.approx(np.mean(np.ceil(np.arange(10, 301) / 128)))
    assert mean_chunks(Fixed(290), 128) == 3
    # geometric: sum over k of (1 - 1/m)^(k c) = 1 / (1 - (1 - 1/m)^c)
    assert mean_chunks(Geometric(200), 64) == pytest.approx(1 / (1 - (1 - 1 / 200) ** 64))
    draws = LogNormal(300, 1.0).sample(np.random.default_rng(0), 200_000)
    assert mean_chunks(LogNormal(300, 1.0), 128) == pytest.approx(
        np.mean(np.ceil(draws / 128)), abs=0.02)
    # decode draws of 0 count as 1: {0, 1, 2} gives {1, 1, 2}, variance 2/9
    assert decode_variance(UniformInt(0, 3)) == pytest.approx(2 / 9)


# --- sweeps, other experiments -----------------------------------------------------------


def test_grids_take_size_laws_and_ranges_of_fixed_sizes():
    single = get("single")
    assert grid.parse(single, "vp=uniform:10:20,geometric:5") == \
        ("vp", ["uniform:10:20", "geometric:5"])
    assert grid.parse(single, "vp=100:300:100") == ("vp", [100, 200, 300])
    assert grid.parse(single, "arrival=gamma:0.5") == ("arrival", ["gamma:0.5"])
    assert grid.parse(single, "kv=auto,1000") == ("kv", ["auto", 1000])
    pickle.dumps(single)  # process pools and Dask ship the experiment


def test_blowup_numbers_stay_geometric_means_and_laws_are_taken():
    blowup = get("blowup")
    prefill, decode = blowup_sizes(blowup.resolve({}))
    assert isinstance(prefill, Geometric) and (prefill.mean, decode.mean) == (129, 112)
    prefill, _ = blowup_sizes(blowup.resolve({"vp": "uniform:100:200"}))
    assert isinstance(prefill, UniformInt) and prefill.mean == 150


def test_point_c_and_theorem2_take_size_laws(capsys):
    row = run_json(capsys, "run", "point-c", "--scheduler", "sarathi", "--set",
                   "vp=uniform:280:300", "--horizon", "20")["rows"][0]
    assert row["arrivals"] == 42  # one every 0.4675 s
    p = get("theorem2").resolve({"vp": "geometric:100", "vd": "uniform:50:150"})
    assert (size_law("vp", p["vp"]).mean, size_law("vd", p["vd"]).mean) == (100, 100)
