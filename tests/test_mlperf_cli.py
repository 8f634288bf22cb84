"""``llmqueue mlperf``: a scenario simulated (``offline``, ``server``,
``interactive``), optionally calibrated on a measured Offline figure, or a
results file predicted row by row (``--measurements``); and every bad input
refused in one line with exit code 2.  Systems are small (two H200 copies of
tp=1, a few hundred samples); the shipped file's full run is marked slow."""

import csv
import json
import os

import numpy as np
import pytest

from conftest import cli_error
from llmqueue.cli.main import main
from llmqueue.models import mlperf as workload
from llmqueue.models.mlperf import sample_order

DATA = os.path.join(os.path.dirname(workload.__file__), "data", workload.DATA_FILE)
#: Two copies of one H200 each, a small batch, short searches.
SMALL = ["--set", "gpu=H200-SXM-141GB", "--set", "gpus=2", "--set", "tp=1",
         "--set", "kmax=64", "--set", "samples=200", "--set", "seconds=30",
         "--set", "reps=2"]
HEADER = ("version,organization,system,accelerator,accelerators,scenario,tokens_per_s,"
          "samples_per_s,target_qps,ttft_p99_s,tpot_p99_s,precision,tp,pp,max_batch_size,"
          "max_num_tokens,kv_fraction,chunked_context,engine")


def outputs():
    """The dataset's generated lengths, by the rule of the README, from the CSV."""
    with open(DATA, newline="") as handle:
        rows = list(csv.reader(handle))[1:]
    return np.array([min(max(1, round(1.3303 * int(d))), 1024) for _, d in rows])


def run_json(capsys, argv):
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def run_text(capsys, argv):
    assert main(argv) == 0
    return capsys.readouterr().out


def test_offline_json(capsys):
    data = run_json(capsys, ["mlperf", "offline"] + SMALL)
    assert {"scenario", "copies", "settings", "calibration", "offline"} <= set(data)
    assert "result" not in data and "plan" not in data
    assert data["scenario"] == "offline" and data["copies"] == 2
    assert data["calibration"] is None
    s = data["settings"]
    assert (s["gpu"], s["gpus"], s["tp"], s["kmax"], s["samples"], s["engine"]) == (
        "H200-SXM-141GB", 2, 1, 64, 200, "trtllm")
    off = data["offline"]
    assert off["samples_per_copy"] == 200 and off["preemptions_per_copy"] == 0
    # tokens per sample: the mean output of the 200 samples the run drew
    drawn = outputs()[sample_order(200, 0)]
    assert off["tokens_per_s"] / off["samples_per_s"] == pytest.approx(drawn.mean(), rel=1e-9)


def test_offline_calibrated_on_a_measured_figure(capsys):
    plain = run_json(capsys, ["mlperf", "offline"] + SMALL)["offline"]["tokens_per_s"]
    measured = 0.9 * plain
    data = run_json(capsys, ["mlperf", "offline"] + SMALL
                    + ["--offline-tokens-per-s", repr(measured)])
    cal = data["calibration"]
    assert cal["measured_offline_tokens_per_s"] == measured
    # every term of the roofline scales with 1/f: 0.9 of the tokens/s is f = 0.9
    assert cal["speed_factor"] == pytest.approx(0.9, rel=1e-4)
    assert cal["efficiency"]["mbu"] == pytest.approx(0.714 * 0.9, rel=1e-4)  # trtllm's 0.714
    assert data["offline"]["tokens_per_s"] == pytest.approx(measured, rel=1e-4)
    text = run_text(capsys, ["mlperf", "offline"] + SMALL
                    + ["--offline-tokens-per-s", repr(measured)])
    assert "calibrated: speed factor 0.9000" in text
    assert "2 engine copies of tp=1" in text and "Offline:" in text


def test_server_json(capsys):
    data = run_json(capsys, ["mlperf", "server"] + SMALL)
    assert data["scenario"] == "server" and data["copies"] == 2
    r = data["result"]
    lo, hi = r["bracket_per_copy"]
    assert 0 < lo < hi and r["rate_per_copy"] == lo
    assert data["plan"]["lo"] == lo and data["plan"]["hi"] == hi
    assert r["samples_per_s"] == pytest.approx(2 * lo)  # two copies
    assert r["tokens_per_s"] == pytest.approx(r["samples_per_s"] * outputs().mean(), rel=1e-12)
    assert 0 < r["ttft_p99_s"] <= 2.0 and 0 < r["tpot_p99_s"] <= 0.2
    assert data["plan"]["config"]["slo"] == {"ttft": 2.0, "tpot": 0.2}
    assert data["plan"]["mode"] == "quantile" and data["plan"]["target"] == 0.99


@pytest.mark.parametrize("scenario, limits", [
    ("server", ("(limit 2 s)", "(limit 200 ms)")),
    ("interactive", ("(limit 0.45 s)", "(limit 40 ms)"))])
def test_text_output_states_the_limits(capsys, scenario, limits):
    text = run_text(capsys, ["mlperf", scenario] + SMALL)
    assert "MLPerf Llama-2-70B on 2 x H200-SXM-141GB" in text
    assert f"{scenario.capitalize()}:" in text and "of Offline" in text
    for limit in limits:
        assert limit in text


def write_results(path, lines):
    path.write_text("\n".join([HEADER] + lines) + "\n", encoding="utf-8")
    return str(path)


def test_measurements_of_a_small_file(capsys, tmp_path):
    path = write_results(tmp_path / "r.csv", [
        'v1,Org,A,H200,1,Offline,600,,,,,fp8,1,1,64,,0.9,,TensorRT-LLM',
        'v1,Org,A,H200,1,Server,500,1.7,,0.6,0.15,fp8,1,1,64,,0.9,,TensorRT-LLM',
        'v1,Org,B,H200,2,Offline,600,,,,,fp8,1,2,64,,0.9,,TensorRT-LLM'])
    keys = ["--set", "samples=100", "--set", "seconds=20", "--set", "reps=2"]
    png = tmp_path / "fig.png"
    data = run_json(capsys, ["mlperf", "--measurements", path, "--plot", str(png)] + keys)
    assert data["measurements"] == path and data["set"] == {
        "samples": "100", "seconds": "20", "reps": "2"}
    assert data["unsupported"] == 1 and set(data["scenarios"]) == {"Offline", "Server"}
    offline, server, piped = data["rows"]
    # each row keeps its measured figure beside the prediction
    assert [r["tokens_per_s"] for r in data["rows"]] == [600.0, 500.0, 600.0]
    assert (server["samples_per_s"], server["ttft_p99_s"], server["tpot_p99_s"]) == (
        1.7, 0.6, 0.15)
    assert server["predicted_samples_per_s"] > 0 and server["predicted_ttft_p99_s"] <= 2
    assert server["calibrated_on"] == 600.0
    assert server["speed_factor"] == pytest.approx(600 / offline["predicted_tokens_per_s"],
                                                   rel=1e-4)
    assert server["error"] == pytest.approx((server["predicted_tokens_per_s"] - 500) / 500)
    assert piped["predicted_tokens_per_s"] is None and "pipeline" in piped["unsupported"]
    assert png.stat().st_size > 0 and png.read_bytes()[:4] == b"\x89PNG"
    text = run_text(capsys, ["mlperf", "--measurements", path] + keys)
    assert "measured tok/s" in text and "predicted tok/s" in text
    assert "Offline: 1 rows" in text and "Server: 1 rows" in text
    assert "1 row(s) unsupported" in text and "pipeline" in text


@pytest.mark.parametrize("argv, words", [
    (["mlperf"], "give either a scenario"),
    (["mlperf", "offline", "--measurements", "shipped"], "one of the two"),
    (["mlperf", "offline", "--set", "gpus=3"], "multiple of tp"),
    (["mlperf", "offline", "--set", "gpu=nope"], "gpu must be one of"),
    (["mlperf", "offline", "--plot", "f.png"], "--plot"),
    (["mlperf", "offline", "--set", "samples=50", "--offline-tokens-per-s", "-5"],
     "--offline-tokens-per-s must be a finite number > 0"),
    (["mlperf", "offline", "--set", "samples=50", "--offline-tokens-per-s", "1e9"],
     "no physical speed"),
    (["mlperf", "--measurements", "missing.csv"], "missing.csv"),
    (["mlperf", "--measurements", "shipped", "--offline-tokens-per-s", "5"],
     "--offline-tokens-per-s"),
    (["mlperf", "offline", "--set", "scenario=x"], "no parameter 'scenario'"),
])
def test_bad_input_is_one_line_and_exit_2(argv, words):
    assert words in cli_error(argv)


@pytest.mark.parametrize("argv, words", [
    (["mlperf", "bogus"], "invalid choice"),
    (["mlperf", "offline", "--set", "reps=1"], "reps"),
    (["mlperf", "offline", "--set", "samples"], "KEY=VALUE"),
    (["mlperf", "server", "--set", "split=sideways"], "split"),
    (["mlperf", "offline", "--set", "gpu=A100-80GB", "--set", "samples=5"], "FP8"),
    (["mlperf", "--measurements", "shipped", "--plot", "f.xyz"], "--plot"),
    (["mlperf", "--measurements", "shipped", "--set", "samples=abc"], "samples"),
])
def test_more_bad_input_in_process(capsys, argv, words):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and words in err


def test_a_malformed_results_file_is_one_line(tmp_path):
    path = write_results(tmp_path / "bad.csv", [
        'v1,Org,A,H200,1,Offline,-3,,,,,fp8,1,1,64,,0.9,,TensorRT-LLM'])
    line = cli_error(["mlperf", "--measurements", path])
    assert "bad.csv:2" in line and "tokens_per_s" in line


@pytest.mark.slow
def test_the_shipped_file_end_to_end(capsys):
    data = run_json(capsys, ["mlperf", "--measurements", "shipped"])
    rows = data["rows"]
    assert len(rows) == 8 and data["unsupported"] == 0
    offline = {r["system"]: r for r in rows if r["scenario"] == "Offline"}
    servers = [r for r in rows if r["scenario"] == "Server"]
    assert len(offline) == 4 and len(servers) == 4
    for r in servers:
        assert r["calibrated_on"] == offline[r["system"]]["tokens_per_s"]
        assert r["speed_factor"] is not None and r["calibration"] is None
        assert r["predicted_tokens_per_s"] > 0
        assert r["error"] == pytest.approx(
            (r["predicted_tokens_per_s"] - r["tokens_per_s"]) / r["tokens_per_s"])
    for r in offline.values():
        assert r["calibrated_on"] is None and r["predicted_tokens_per_s"] > 0
    for name in ("Offline", "Server"):
        stats = data["scenarios"][name]
        assert stats["rows"] == 4
        assert stats["max_abs_error"] == pytest.approx(
            max(abs(r["error"]) for r in rows if r["scenario"] == name))
