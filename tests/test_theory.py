"""Capacity figures in closed form (SPEC 6.2), the work-conservation test of
SPEC 3, Little's law, and the `llmqueue capacity` command."""

import json
import os
import subprocess
import sys

import pytest

import llmqueue as q
from llmqueue.cli.main import main
from llmqueue.theory import capacity as theory


class Quadratic:
    """t_b = 1 + 0.01 b^2: b / t_b peaks at b = 10 with 10 / 2 = 5 tokens/s."""

    def batch_time(self, decode, prefill, requests):
        b = decode + prefill
        return 1.0 + 0.01 * b * b


def test_spec_6_2_capacity_figures():
    assert q.Staircase().tokens_time(512) == pytest.approx(0.15316, abs=1e-12)
    assert theory.token_capacity(512) == pytest.approx(512 / 0.15316, rel=1e-12)
    assert theory.lambda_star(512, 100, 100) == pytest.approx(16.71, abs=0.005)
    assert theory.load(16.71, 512, 100, 100) == pytest.approx(1.0, abs=1e-3)


def test_point_c_load_is_exactly_one():
    assert theory.load(1 / 0.4675, 128, 290, 990) == pytest.approx(1.0, rel=1e-12)


def test_fluid_slope_is_zero_below_capacity_and_the_excess_above():
    cap = 512 / 0.15316
    star = cap / 200
    assert theory.fluid_slope(0.9 * star, 512, 100, 100) == 0.0
    assert theory.fluid_slope(1.2 * star, 512, 100, 100) == pytest.approx(0.2 * cap)


def test_peak_rate_beats_capacity_when_bmax_is_not_a_multiple_of_b0():
    # b0 = 128, bmax = 200: a batch of 128 lasts 0.04675 s, one of 200 lasts 0.08222 s
    assert theory.token_capacity(200) == pytest.approx(200 / 0.08222)
    assert theory.peak_token_rate(200) == pytest.approx(128 / 0.04675)
    assert theory.peak_token_rate(512) == pytest.approx(theory.token_capacity(512))


def test_any_latency_model_plugs_in():
    assert theory.peak_token_rate(50, Quadratic()) == pytest.approx(5.0)
    assert theory.peak_token_rate(5, Quadratic()) == pytest.approx(5 / 1.25)
    assert theory.token_capacity(50, Quadratic()) == pytest.approx(50 / 26)
    assert theory.token_capacity(64, q.Constant(0.5)) == 128.0
    assert theory.peak_token_rate(64, q.Constant(0.5)) == 128.0


@pytest.mark.parametrize("call, fragment", [
    (lambda: theory.token_capacity(0), "bmax must be an integer >= 1, got 0"),
    (lambda: theory.lambda_star(512, 100, 0), "mean_decode must be a finite number > 0"),
    (lambda: theory.load(-1.0, 512, 100, 100), "rate must be a finite number > 0"),
    (lambda: theory.is_work_conserving(3, 5, 0), "bmax must be an integer >= 1"),
])
def test_bad_arguments_name_the_parameter(call, fragment):
    with pytest.raises(ValueError, match=fragment):
        call()


def test_work_conservation_is_min_of_budget_and_demand():
    # Fig. 8, sarathi with bmax 4: A, B, C decode and D (1 prefill token) waits
    demand = theory.batch_demand([1], decoding=3)
    assert demand == 4
    assert theory.is_work_conserving(4, demand, 4)        # ABC+Dp
    assert not theory.is_work_conserving(3, demand, 4)    # ABC alone (vllm would)
    assert theory.is_work_conserving(2, 2, 4)             # less work than budget
    assert not theory.is_work_conserving(128, 1379, 512)


def test_littles_law_is_exact_on_a_run_that_drains():
    arrivals = [(0.1 * i, 50 + 7 * i, 20 + 3 * i) for i in range(40)]
    for policy in ("sarathi", "vllm", "fastertransformer"):
        s = q.simulate(q.from_list(arrivals), policy, bmax=256, kmax=8).summary
        check = theory.littles_law(s)
        assert s["completed"] == 40
        assert check["relative_error"] < 1e-9, policy


def test_littles_law_holds_approximately_in_a_long_stable_run():
    s = q.simulate(q.poisson(10.0, 100, 100, seed=2), "sarathi", bmax=512, kmax=None,
                   horizon=400).summary
    # the requests in the system at the horizon (a few dozen of ~4000) are left out of W
    assert theory.littles_law(s)["relative_error"] < 0.03


# -- llmqueue capacity --------------------------------------------------------

SPEC62 = ["--set", "bmax=512", "--set", "kmax=none", "--set", "arrival=poisson",
          "--set", "vp=100", "--set", "vd=100"]


def capacity_json(capsys, *argv):
    assert main(["capacity", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_capacity_json_for_the_spec_6_2_case(capsys):
    below = capacity_json(capsys, *SPEC62, "--set", "rate=15")
    assert below["token_capacity"] == pytest.approx(512 / 0.15316)
    assert below["lambda_star"] == pytest.approx(16.71, abs=0.005)
    assert below["load"] == pytest.approx(15 * 200 * 0.15316 / 512)
    assert {n: v["predicted"] for n, v in below["verdicts"].items()} == {
        "sarathi": "stable", "orca": "stable", "vllm": "no guarantee",
        "fastertransformer": "no guarantee", "step-fill": "no guarantee",
        "whole-prefill": "no guarantee"}
    above = capacity_json(capsys, *SPEC62, "--set", "rate=18", "--scheduler", "orca")
    assert above["verdicts"] == {"orca": {"work_conserving": True, "predicted": "unstable"}}
    assert above["fluid_slope"] == pytest.approx(18 * 200 - 512 / 0.15316)


def test_capacity_at_point_c_is_the_boundary(capsys):
    doc = capacity_json(capsys)  # the defaults of `run single`: point C
    assert doc["token_capacity"] == pytest.approx(128 / 0.04675)
    assert doc["load"] == pytest.approx(1.0, rel=1e-12)
    assert doc["verdicts"]["sarathi"]["predicted"] == "boundary"


def test_capacity_text_names_the_figures(capsys):
    assert main(["capacity", *SPEC62, "--set", "rate=15"]) == 0
    out = capsys.readouterr().out
    assert "3342.9 tokens/s" in out and "16.71 req/s" in out and "stable" in out


@pytest.mark.parametrize("argv, fragment", [
    (["--set", "bmax=none"], "bmax must be an integer >= 1 for capacity figures"),
    (["--set", "gap=0"], "gap must be a finite number > 0"),
    (["--set", "arrival=poisson", "--set", "rate=-2"], "rate must be a finite number > 0"),
    (["--set", "colour=red"], "single has no parameter 'colour'"),
])
def test_capacity_bad_input_is_one_line_and_exit_code_2(argv, fragment):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "llmqueue", "capacity", *argv], env=env,
                          capture_output=True, text=True, cwd=os.path.dirname(__file__))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and fragment in lines[0], proc.stderr
