"""vLLM's ``benchmark_serving`` result JSON as a measurement file: read
strictly, its model id mapped, a finite request rate simulated as Poisson
arrivals (``offline``'s ``rate``) and per-request lengths as they were."""

import json
import math
import re

import pytest

import llmqueue as q
from conftest import cli_error
from llmqueue import experiments
from llmqueue.cli.main import main
from llmqueue.engine.options import RunOptions
from llmqueue.experiments.base import engine_kwargs
from llmqueue.experiments.measurements import (Measurement, known_model, predict,
                                               read_measurements, settings)
from llmqueue.experiments.offline import workload_of
from llmqueue.models.workload import offline

#: A result as ``benchmark_serving --save-result`` writes it (values by hand).
RESULT = {
    "date": "20250101-120000", "backend": "vllm",
    "model_id": "meta-llama/Llama-3.1-8B-Instruct",
    "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct", "num_prompts": 100,
    "request_rate": "inf", "burstiness": 1.0, "max_concurrency": None, "duration": 2.56,
    "completed": 100, "total_input_tokens": 12800, "total_output_tokens": 12800,
    "request_throughput": 39.0625, "output_throughput": 5000.0,
    "total_token_throughput": 10000.0, "mean_ttft_ms": 310.5, "median_ttft_ms": 300.0,
    "p99_ttft_ms": 600.0, "mean_tpot_ms": 15.0, "median_tpot_ms": 14.5, "p99_tpot_ms": 20.0,
}
OFFLINE = experiments.REGISTRY["offline"]


def write(tmp_path, doc, name="result.json"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def test_a_result_is_one_vllm_measurement(tmp_path):
    (m,) = read_measurements(write(tmp_path, RESULT))
    assert m == Measurement("vllm", "llama-3.1-8b", "", None, "", 128, 128, 100, 5000.0, 1,
                            None, None)


def test_mean_lengths_are_the_totals_over_the_completed_requests_rounded(tmp_path):
    doc = {**RESULT, "completed": 3, "total_input_tokens": 301, "total_output_tokens": 50,
           "request_rate": 2.5}
    (m,) = read_measurements(write(tmp_path, doc))
    assert (m.isl, m.osl, m.requests, m.rate) == (100, 17, 3, 2.5)  # 100.33 and 16.67


@pytest.mark.parametrize("model_id, name", [
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b"),
    ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b"),
    ("meta-llama/Llama-2-13b-hf", "llama-2-13b"),
    ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
    ("/models/llama-3.3-70b-instruct/", "llama-3.3-70b"),
    ("llama-3.1-405b", "llama-3.1-405b"),
    ("mistralai/Mistral-7B-Instruct-v0.3", None),
    ("org/unknown-model", None),
])
def test_a_hugging_face_id_maps_to_a_known_model(model_id, name):
    assert known_model(model_id) == name


def test_an_unknown_model_keeps_its_id_and_needs_set_model(tmp_path):
    (m,) = read_measurements(write(tmp_path, {**RESULT, "model_id": "org/unknown-model"}))
    assert m.model == "org/unknown-model"
    with pytest.raises(ValueError, match="give the model with --set model=NAME"):
        settings(m, {"gpu": "H100"})
    assert settings(m, {"gpu": "H100", "model": "llama-3-8b"})["model"] == "llama-3-8b"


def test_a_list_and_json_lines_give_a_row_each(tmp_path):
    second = {**RESULT, "request_rate": 4.0, "output_throughput": 800.0}
    rows = read_measurements(write(tmp_path, [RESULT, second]))
    assert [(m.line, m.rate, m.output_tokens_per_s) for m in rows] == \
        [(1, None, 5000.0), (2, 4.0, 800.0)]
    lines = json.dumps(RESULT) + "\n\n" + json.dumps(second) + "\n"
    rows = read_measurements(write(tmp_path, lines, "results.jsonl"))
    assert [(m.line, m.rate) for m in rows] == [(1, None), (3, 4.0)]


def test_per_request_lengths_are_kept_and_failed_requests_left_out(tmp_path):
    doc = {**RESULT, "completed": 3, "total_input_tokens": 60, "total_output_tokens": 12,
           "input_lens": [10, 20, 30, 40], "output_lens": [2, 0, 4, 6]}
    (m,) = read_measurements(write(tmp_path, doc))
    assert m.lengths == ((10, 2), (30, 4), (40, 6)) and m.requests == 3
    keys = settings(m._replace(rate=0.5), {"gpu": "H100"})
    assert keys["lengths"] == "10:2,30:4,40:6" and keys["rate"] == "0.5"
    assert not {"requests", "vp", "vd"} & set(keys)
    # the simulated requests are those lengths, in order, the first at time 0
    arrivals = list(workload_of(OFFLINE.resolve(keys), 0))
    assert [(a.prefill, a.decode) for a in arrivals] == list(m.lengths)
    assert arrivals[0].time == 0.0 and arrivals[1].time > 0


def test_a_vllm_row_states_only_what_it_knows_and_takes_vllm_s_pool(tmp_path):
    (m,) = read_measurements(write(tmp_path, RESULT))
    keys = settings(m, {"gpu": "H100", "precision": "fp8"})
    assert (keys["engine"], keys["gpu"], keys["precision"]) == ("vllm", "H100", "fp8")
    assert "tp" not in keys and "kv_cache_dtype" not in keys and "rate" not in keys
    # the vllm preset's gpu_memory_utilization, not TensorRT-LLM's free fraction
    assert "kv_cache_free_gpu_mem_fraction" not in keys
    assert OFFLINE.resolve(keys)["gpu_memory_utilization"] == 0.9
    with pytest.raises(ValueError, match="states no GPU.*--set gpu=NAME"):
        settings(m, {})


def simulate_as_before(p):
    """The offline batch as ``offline`` ran it before ``rate`` existed."""
    workload = offline(p["requests"], p["vp"], p["vd"], seed=0)
    return q.simulate(workload, horizon=None, **engine_kwargs(p),
                      first_token=p["first_token"]).summary


def test_rate_inf_is_the_offline_batch_exactly():
    keys = {"engine": "trtllm", "latency": "roofline", "kv": "auto", "gpu": "H100",
            "model": "llama-3.1-8b", "precision": "fp8", "requests": "40", "vp": "500",
            "vd": "60"}
    before = simulate_as_before(OFFLINE.resolve(keys))
    for extra in ({}, {"rate": "inf"}):
        p = OFFLINE.resolve({**keys, **extra})
        assert p["rate"] == math.inf
        assert OFFLINE.execute(p)[0][1].summary.as_dict() == before.as_dict()


def test_a_finite_rate_sends_poisson_arrivals_and_runs_to_the_last_finish():
    keys = {"requests": "12", "vp": "64", "vd": "8", "bmax": "none", "kmax": "none",
            "rate": "2"}
    p = OFFLINE.resolve(keys)
    arrivals = list(workload_of(p, 0))
    times = [a.time for a in arrivals]
    assert len(times) == 12 and times[0] == 0.0 and times == sorted(times)
    assert times[-1] > 2  # 11 gaps of mean 0.5 s; with seed 0 it is well past 2 s
    # the same requests as the batch of that seed: only the times differ
    assert [a[1:3] for a in arrivals] == [a[1:3] for a in workload_of({**p, "rate": math.inf}, 0)]
    s = OFFLINE.execute(p, RunOptions())[0][1].summary
    assert s["completed"] == 12 and s["duration"] >= times[-1]
    assert s["output_tokens_per_s"] == pytest.approx(12 * 8 / s["duration"])


@pytest.mark.parametrize("change, fragment", [
    ({"output_throughput": None}, "output_throughput must be"),
    ({"completed": 0}, "completed must be an integer >= 1"),
    ({"total_output_tokens": "12800"}, "total_output_tokens must be"),
    ({"model_id": ""}, "model_id must be"),
    ({"request_rate": "fast"}, "request_rate must be a number > 0 or \"inf\""),
    ({"request_rate": 0}, "request_rate must be"),
    ({"request_rate": 4.0, "burstiness": 0.5}, "burstiness 0.5"),
    ({"max_concurrency": 8}, "max_concurrency 8"),
    ({"input_lens": [1, 2]}, "input_lens and output_lens"),
    ({"input_lens": [1, 2], "output_lens": [3]}, "input_lens and output_lens"),
    ({"input_lens": [1, 2], "output_lens": [3, -1]}, "output_lens\\[1\\]"),
    ({"input_lens": [1], "output_lens": [0]}, "all failed"),
])
def test_a_bad_value_names_the_file_and_the_key(tmp_path, change, fragment):
    path = write(tmp_path, {**RESULT, **change})
    with pytest.raises(ValueError, match=fragment) as err:
        read_measurements(path)
    assert str(err.value).startswith(f"{path}: ")


def test_a_concurrency_limit_that_never_binds_is_accepted(tmp_path):
    (m,) = read_measurements(write(tmp_path, {**RESULT, "max_concurrency": 100}))
    assert m.requests == 100


@pytest.mark.parametrize("key", ["model_id", "request_rate", "completed", "total_input_tokens",
                                 "total_output_tokens", "output_throughput"])
def test_a_missing_key_is_named(tmp_path, key):
    path = write(tmp_path, {k: v for k, v in RESULT.items() if k != key})
    with pytest.raises(ValueError, match=f"{path}: the result lacks {key} "):
        read_measurements(path)


@pytest.mark.parametrize("text, fragment", [
    ('{"model_id": "x",', ": not JSON ("),
    ("[1, 2]", ": result 1 of its list: expected a JSON object"),
    ("[]", "no benchmark results"),
    (json.dumps(RESULT) + "\n{nope}\n", ":2: not JSON ("),
], ids=["cut", "not-objects", "empty", "bad-line"])
def test_malformed_json_is_one_line(tmp_path, text, fragment):
    path = write(tmp_path, text)
    with pytest.raises(ValueError, match=re.escape(fragment)) as err:
        read_measurements(path)
    assert "\n" not in str(err.value)


def test_the_command_reports_a_bad_file_in_one_line(tmp_path):
    path = write(tmp_path, {k: v for k, v in RESULT.items() if k != "completed"})
    assert "lacks completed" in cli_error(["validate", "--measurements", path,
                                           "--set", "gpu=H100"])
    good = write(tmp_path, RESULT, "good.json")
    assert "--set gpu=NAME" in cli_error(["validate", "--measurements", good])


def test_a_finite_rate_row_predicts_through_poisson_arrivals(tmp_path):
    doc = {**RESULT, "num_prompts": 6, "completed": 6, "total_input_tokens": 6 * 256,
           "total_output_tokens": 6 * 32, "request_rate": 1.5, "output_throughput": 40.0}
    (m,) = read_measurements(write(tmp_path, doc))
    row = predict(m, {"gpu": "H100", "tp": "1"})
    p = OFFLINE.resolve(settings(m, {"gpu": "H100", "tp": "1"}))
    last = [a.time for a in workload_of(p, 0)][-1]
    assert row["makespan_s"] >= last > 0
    assert row["predicted"] == pytest.approx(6 * 32 / row["makespan_s"])


def test_validate_runs_a_benchmark_result_end_to_end(tmp_path, capsys):
    doc = {**RESULT, "num_prompts": 8, "completed": 8, "total_input_tokens": 8 * 128,
           "total_output_tokens": 8 * 128, "output_throughput": 3000.0,
           "input_lens": [128] * 8, "output_lens": [128] * 8}
    path = write(tmp_path, [doc, {**doc, "request_rate": 4}])
    assert main(["validate", "--measurements", path, "--set", "gpu=H100", "--set", "tp=1",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["set"] == {"gpu": "H100", "tp": "1"} and len(out["rows"]) == 2
    offline_row, online_row = out["rows"]
    assert offline_row["engine"] == "vllm" and offline_row["model"] == "llama-3.1-8b"
    assert offline_row["requests"] == 8 and offline_row["predicted"] > 0
    assert offline_row["error"] == pytest.approx((offline_row["predicted"] - 3000) / 3000)
    # arriving over time, the same requests finish later than all at once
    assert online_row["makespan_s"] > offline_row["makespan_s"]


def test_rate_and_lengths_are_quiet_keys_of_run_offline():
    assert OFFLINE.params["rate"].quiet_default and OFFLINE.params["lengths"].quiet_default
    assert OFFLINE.resolve({})["rate"] == math.inf and OFFLINE.resolve({})["lengths"] is None


@pytest.mark.parametrize("argv, fragment", [
    (["--set", "rate=0"], "rate must be inf (every request at time 0) or requests per second"),
    (["--set", "rate=-inf"], "rate must be inf"),
    (["--set", "lengths=10"], "lengths: request 1 must be PROMPT:OUTPUT"),
    (["--set", "lengths=10:4,5:0"], "lengths: request 2's output"),
    (["--set", "lengths=10:4", "--set", "requests=3"], "requests cannot be set with it"),
])
def test_bad_rate_or_lengths_in_run_offline_is_exit_2(argv, fragment):
    assert fragment in cli_error(["run", "offline", *argv])
