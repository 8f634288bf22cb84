"""``llmqueue calibrate`` and the profiles it writes, read back by
``--set efficiency=PATH``: the JSON's shape, agreement with a fresh
simulation at the written profile, and the bad-input contract."""

import contextlib
import io
import json
import os

import pytest

from conftest import cli_error
from llmqueue.cli.main import main
from llmqueue.experiments.calibration import BOUNDS
from llmqueue.experiments.measurements import predict, read_measurements
from llmqueue.hardware.efficiency import Efficiency, read_profile

HEADER = "engine,model,gpu,tp,precision,isl,osl,requests,output_tokens_per_s\n"
#: Three tiny rows, in this file order (lines 2, 3, 4): long prompts first.
ROWS = [(1000, 100, 50, 3500.0), (128, 128, 200, 18000.0), (100, 600, 40, 7000.0)]
FREE = ["mfu", "mbu", "t_step"]
ROOFLINE = ["--set", "latency=roofline", "--set", "gpu=H100", "--set", "model=llama-3.1-8b",
            "--set", "requests=10", "--set", "vp=100", "--set", "vd=50"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("calibrate") / "tiny.csv"
    path.write_text(HEADER + "".join(f"trtllm,llama-3.1-8b,H100,1,fp8,{i},{o},{n},{x}\n"
                                     for i, o, n, x in ROWS))
    return str(path)


@pytest.fixture(scope="module")
def calibrated(tiny, tmp_path_factory):
    """``calibrate --json --profile --plot`` run once: its output and the
    profile's path (the figure is next to it, ``fitted.png``)."""
    folder = tmp_path_factory.mktemp("profile")
    profile = str(folder / "fitted.json")
    out = io.StringIO()  # capsys is per test; this fixture is per module
    with contextlib.redirect_stdout(out):
        code = main(["calibrate", "--measurements", tiny, "--free", ",".join(FREE),
                     "--profile", profile, "--plot", str(folder / "fitted.png"), "--json"])
    assert code == 0
    return json.loads(out.getvalue()), profile


def test_calibrate_json(calibrated, tiny):
    data, _ = calibrated
    assert {"efficiency", "free", "bounds", "fitted", "unseen", "rows"} <= set(data)
    assert data["free"] == FREE and data["holdout"] == "row"
    assert data["bounds"] == {n: list(BOUNDS[n]) for n in FREE}
    assert data["measurements"] == tiny and data["skipped_lines"] == []
    eff = Efficiency(**data["efficiency"])
    default = Efficiency()
    for name, value in data["efficiency"].items():
        if name in FREE:
            assert BOUNDS[name][0] <= value <= BOUNDS[name][1], name
        else:
            assert value == getattr(default, name), name
    rows = data["rows"]
    assert [(r["line"], r["isl"], r["osl"], r["requests"], r["output_tokens_per_s"])
            for r in rows] == [(k + 2,) + row for k, row in enumerate(ROWS)]  # file order
    for r in rows:
        assert {"fitted", "fitted_error", "unseen", "unseen_error"} <= set(r)
        measured = r["output_tokens_per_s"]
        assert r["fitted_error"] == pytest.approx(r["fitted"] / measured - 1, rel=1e-12)
        assert r["unseen_error"] == pytest.approx(r["unseen"] / measured - 1, rel=1e-12)
    errors = sorted(abs(r["fitted_error"]) for r in rows)
    assert data["fitted"] == {"rows": 3, "median_abs_error": pytest.approx(errors[1]),
                              "max_abs_error": pytest.approx(errors[2])}
    assert data["unseen"]["rows"] == 3
    # the fit prices each row as a fresh simulation at the fitted efficiency does
    assert eff != default
    for m, r in zip(read_measurements(tiny), rows):
        assert predict(m, {"efficiency": calibrated[1]})["predicted"] == pytest.approx(
            r["fitted"], rel=1e-6)


def test_the_profile_holds_what_was_printed_and_reads_back(calibrated):
    data, profile = calibrated
    with open(profile, encoding="utf-8") as handle:
        assert json.load(handle) == data
    assert read_profile(profile) == Efficiency(**data["efficiency"])


def run_offline(capsys, efficiency):
    assert main(["run", "offline"] + ROOFLINE + ["--set", f"efficiency={efficiency}",
                                                 "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_run_reads_the_profile(calibrated, capsys, tmp_path):
    data, profile = calibrated
    fitted = run_offline(capsys, profile)
    assert fitted["params"]["efficiency"] == profile
    # a profile holding the same efficiency alone runs the same; the default another way
    alone = tmp_path / "alone.json"
    alone.write_text(json.dumps({"efficiency": data["efficiency"]}))
    same = run_offline(capsys, str(alone))
    default = run_offline(capsys, "default")
    speed = [r["output_tokens_per_s"] for r in fitted["rows"]]
    assert speed == [r["output_tokens_per_s"] for r in same["rows"]]
    assert speed != [r["output_tokens_per_s"] for r in default["rows"]]


def test_the_figure_is_drawn(calibrated):
    figure = os.path.join(os.path.dirname(calibrated[1]), "fitted.png")
    with open(figure, "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"


def test_calibrate_text_holding_out_the_only_model(tiny, tmp_path, capsys):
    profile = tmp_path / "p.json"
    assert main(["calibrate", "--measurements", tiny, "--free", "mbu", "--holdout", "model",
                 "--profile", str(profile)]) == 0
    out = capsys.readouterr().out
    assert "mbu = " in out and "bounds 0.6 to 0.95" in out and "mfu = " not in out
    assert "3 rows: fitted median |error|" in out
    assert "unseen (" not in out  # one model held out: nothing left to predict it from
    assert f"--set efficiency={profile}" in out
    data = json.loads(profile.read_text())
    assert data["holdout"] == "model" and data["unseen"]["rows"] == 0
    assert [r["unseen"] for r in data["rows"]] == [None] * 3


def test_plot_without_unseen_predictions_is_refused_before_anything_is_written(tiny, tmp_path):
    figure, profile = tmp_path / "fit.png", tmp_path / "p.json"
    message = cli_error(["calibrate", "--measurements", tiny, "--free", "mbu", "--holdout",
                         "model", "--plot", str(figure), "--profile", str(profile)])
    assert "two models" in message
    assert not figure.exists() and not profile.exists()


@pytest.mark.parametrize("argv, message", [
    (["--free", "bogus"], "bogus"),
    (["--free", "mfu,mfu"], "repeat"),
    (["--free", ","], "at least one"),
    (["--holdout", "x"], "holdout"),
    (["--set", "efficiency=x"], "efficiency"),
    (["--set", "latency=staircase"], "roofline"),
])
def test_calibrate_bad_input(tiny, argv, message):
    assert message in cli_error(["calibrate", "--measurements", tiny] + argv)


def test_calibrate_will_not_overwrite_its_measurements(tiny):
    same = os.path.join(os.path.dirname(tiny), ".", os.path.basename(tiny))
    assert "same file" in cli_error(["calibrate", "--measurements", tiny, "--profile", same])
    assert os.path.getsize(tiny) == len(HEADER) + sum(
        len(f"trtllm,llama-3.1-8b,H100,1,fp8,{i},{o},{n},{x}\n") for i, o, n, x in ROWS)


def test_calibrate_needs_an_offline_row(tmp_path):
    results = tmp_path / "vllm.json"  # vLLM's benchmark_serving at 4 requests/s
    results.write_text(json.dumps({
        "model_id": "meta-llama/Llama-3.1-8B-Instruct", "request_rate": 4,
        "completed": 20, "total_input_tokens": 2000, "total_output_tokens": 1000,
        "output_throughput": 400.0}))
    assert "offline row" in cli_error(["calibrate", "--measurements", str(results),
                                       "--set", "gpu=H100"])


@pytest.mark.parametrize("body, message", [
    (None, "cannot read"),
    ("{not json", "not JSON"),
    ('{"efficiency": {"mfu": 0.5, "speed": 2}}', "unknown field"),
    ('{"efficiency": {"mfu": 1.5}}', "mfu"),
])
def test_run_refuses_a_bad_profile(tmp_path, body, message):
    path = tmp_path / "bad.json"
    if body is not None:
        path.write_text(body)
    line = cli_error(["run", "offline"] + ROOFLINE + ["--set", f"efficiency={path}"])
    assert message in line and str(path) in line
