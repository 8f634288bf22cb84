"""``llmqueue validate``: measurement files read strictly, errors computed
as stated, and TensorRT-LLM's published H100 offline throughput predicted
within the figures the documentation states."""

import json

import pytest

from conftest import cli_error
from llmqueue.cli.main import main
from llmqueue.experiments.measurements import (COLUMNS, SHIPPED, Measurement, predict,
                                               read_measurements, settings, summary)

HEADER = ",".join(COLUMNS)


def write(tmp_path, *rows):
    path = tmp_path / "m.csv"
    path.write_text("\n".join((HEADER,) + rows) + "\n")
    return str(path)


def test_the_shipped_rows_are_the_published_table():
    rows = read_measurements(SHIPPED)
    assert len(rows) == 21 and {r.tp for r in rows} == {1, 2, 8}
    assert rows[0] == Measurement("trtllm", "llama-3.1-8b", "H100", 1, "fp8", 128, 128, 30000,
                                  28312.0, 2)


@pytest.mark.parametrize("row, fragment", [
    ("trtllm,llama-3.1-8b,H100,1,fp8,128,128,30000", "expected 9 cells"),
    ("trtllm,llama-3.1-8b,H100,one,fp8,128,128,30000,100", "tp must be an integer"),
    ("trtllm,llama-3.1-8b,H100,1,fp8,128,0,30000,100", "osl"),
    ("trtllm,llama-3.1-8b,H100,1,fp8,128,128,30000,-5", "output_tokens_per_s"),
])
def test_a_bad_row_names_its_file_and_line(tmp_path, row, fragment):
    path = write(tmp_path, "trtllm,llama-3.1-8b,H100,1,fp8,128,128,30000,28312", row)
    with pytest.raises(ValueError, match=fragment) as err:
        read_measurements(path)
    assert f"{path}:3:" in str(err.value)


def test_a_file_without_the_columns_is_refused(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("model,gpu\nx,y\n")
    assert "the header lacks engine" in cli_error(["validate", "--measurements", str(path)])


def test_settings_follow_the_row_and_the_overrides_win():
    m = Measurement("trtllm", "llama-3.1-8b", "H100", 1, "fp8", 20000, 2000, 1500, 1351.0, 2)
    keys = settings(m, {"efficiency": "ideal"})
    # a whole 20,000-token prompt beside a full batch of 2,048 decodes
    assert keys["bmax"] == "22048" and keys["engine"] == "trtllm"
    assert keys["kv_cache_dtype"] == "fp8" and keys["efficiency"] == "ideal"
    assert "bmax" not in settings(m._replace(isl=1000), {})


def test_summary_is_the_median_and_the_largest_error():
    rows = [{"error": e} for e in (0.1, -0.3, 0.05, -0.2)]
    assert summary(rows) == {"rows": 4, "median_abs_error": pytest.approx(0.15),
                             "max_abs_error": 0.3}


def test_a_prediction_states_its_error():
    m = Measurement("trtllm", "llama-3.3-70b", "H100", 2, "fp8", 128, 128, 400, 6378.0, 2)
    row = predict(m)
    assert row["error"] == pytest.approx((row["predicted"] - 6378.0) / 6378.0)
    assert row["preemptions"] == 0  # TensorRT-LLM's scheduler reserves every request whole


def test_the_command_prints_json_and_a_figure(tmp_path, capsys):
    path = write(tmp_path, "trtllm,llama-3.3-70b,H100,2,fp8,128,128,300,6378",
                 "trtllm,llama-3.3-70b,H100,2,fp8,2048,128,300,762")
    figure = tmp_path / "v.png"
    main(["validate", "--measurements", path, "--plot", str(figure), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"][1]["isl"] == 2048 and len(doc["rows"]) == 2
    assert doc["max_abs_error"] == max(abs(r["error"]) for r in doc["rows"])
    assert figure.stat().st_size > 0


@pytest.mark.slow
def test_tensorrt_llm_s_h100_offline_table_is_predicted_within_the_stated_error(capsys):
    # docs/validation.md states these figures: median 10.1%, largest 28.9%
    main(["validate", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["median_abs_error"] < 0.12 and doc["max_abs_error"] < 0.30
