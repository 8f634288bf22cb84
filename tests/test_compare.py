"""``llmqueue compare``: schedulers on a user's trace, with the latencies,
throughput and verdict, and every rescaling said (issue #33); the latency
columns and replay line of ``run trace`` and ``run azure``."""

import json

import pytest

from conftest import cli_error
from llmqueue.cli.main import main
from llmqueue.cli.report import report
from llmqueue.engine.options import RunOptions
from llmqueue.engine.simulate import simulate
from llmqueue.experiments import azure, trace
from llmqueue.experiments.base import engine_kwargs
from llmqueue.models.traces import read_trace

LATENCIES = [f"{m}_{q}" for m in ("ttft", "tpot") for q in ("p50", "p90", "p99")]
VERDICTS = {"stable", "unstable", "inconclusive"}
#: What a replay adds to a run's figures.
ADDED = {"offered_tokens_per_s", "replay_slope", "replay_slope_se", "replay_verdict"}


def write_trace(path, rows):
    path.write_text("arrival,prefill,decode\n" + "".join(f"{t:g},{p},{d}\n" for t, p, d in rows))
    return str(path)


@pytest.fixture
def light(tmp_path):
    """300 s of one request a second, 100 + 20 tokens: well inside one engine."""
    return write_trace(tmp_path / "light.csv", [(t, 100, 20) for t in range(300)])


@pytest.fixture
def heavy(tmp_path):
    """20 requests a second of 500 + 100 tokens for 30 s: four times the capacity."""
    return write_trace(tmp_path / "heavy.csv", [(i / 20, 500, 100) for i in range(600)])


def run_json(argv, capsys):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_compare_prints_each_schedulers_latencies_and_verdict(light, capsys):
    doc = run_json(["compare", light, "--scheduler", "sarathi,vllm,orca", "--json"], capsys)
    assert [r["label"] for r in doc["rows"]] == ["sarathi", "vllm", "orca"]
    for row in doc["rows"]:
        assert row["completed"] == 300 and row["output_tokens_per_s"] > 0
        assert all(row[k] is not None for k in LATENCIES)
        assert row["replay_verdict"] == "stable"
    assert doc["params"]["schedulers"] == ["sarathi", "vllm", "orca"]
    assert doc["replay"]["rescaled"] is False and doc["replay"]["speedup"] == 1.0
    assert "as recorded (no rescaling)" in doc["replay"]["line"]
    assert main(["compare", light, "--scheduler", "sarathi,vllm"]) == 0
    out = capsys.readouterr().out
    for title in ("output tok/s", "TTFT p50 s", "TPOT p50 s", "p90", "p99", "verdict"):
        assert title in out
    assert "replay: 300 requests of light.csv (generic) as recorded (no rescaling)" in out
    assert "sarathi: over the second half of the arrivals" in out


def test_compare_defaults_to_the_four_paper_schedulers_and_calls_overload_unstable(
        heavy, capsys):
    doc = run_json(["compare", heavy, "--json"], capsys)
    assert [r["label"] for r in doc["rows"]] == list(azure.SCHEDULERS)
    assert {r["replay_verdict"] for r in doc["rows"]} == {"unstable"}
    assert all(r["completed"] == 600 for r in doc["rows"])  # it runs until all finish


def test_compare_rows_are_run_traces_rows(light, capsys):
    ours = run_json(["compare", light, "--scheduler", "vllm", "--set", "bmax=256", "--json"],
                    capsys)["rows"][0]
    theirs = run_json(["run", "trace", "--set", f"path={light}", "--scheduler", "vllm",
                       "--set", "bmax=256", "--json"], capsys)["rows"][0]
    assert ours == theirs


def test_any_rescaling_is_said_in_the_text_and_the_json(light, capsys):
    doc = run_json(["compare", light, "--scheduler", "sarathi", "--set", "speedup=2",
                    "--set", "limit=100", "--json"], capsys)
    replay = doc["replay"]
    assert replay["rescaled"] and replay["speedup"] == 2.0 and replay["limit"] == 100
    assert (replay["requests"], replay["of"]) == (100, 300)
    assert "the first 100 of 300 requests" in replay["line"] and "speedup 2" in replay["line"]
    assert doc["rows"][0]["arrivals"] == 100
    assert replay["last_arrival_s"] == pytest.approx(99 / 2)
    assert main(["run", "trace", "--set", f"path={light}", "--set", "speedup=2"]) == 0
    assert "at speedup 2: arrival times divided by 2" in capsys.readouterr().out


def test_run_azure_keeps_its_speedup_and_says_it(light, capsys):
    assert main(["run", "azure", "--set", f"path={light}", "--scheduler", "sarathi"]) == 0
    out = capsys.readouterr().out
    assert "at speedup 0.25: arrival times divided by 0.25, so 0.25x the recorded rate" in out
    assert "TTFT p50 s" in out and "verdict" in out
    doc = run_json(["run", "azure", "--set", f"path={light}", "--scheduler", "sarathi",
                    "--set", "speedup=1", "--json"], capsys)
    assert doc["params"]["speedup"] == 1.0 and doc["rows"][0]["replay_verdict"] in VERDICTS


def test_a_replay_adds_figures_and_changes_none(heavy, capsys):
    p = trace.EXPERIMENT.resolve({"path": heavy, "scheduler": "vllm", "kv": "40000"})
    (_, result), = trace.EXPERIMENT.execute(p, RunOptions())
    plain = simulate(read_trace(heavy).workload().without_ids(), **engine_kwargs(p),
                     first_token=p["first_token"])
    got = dict(result.summary)
    assert set(got) - set(plain.summary) == ADDED
    assert {k: got[k] for k in plain.summary} == dict(plain.summary)
    assert result.series is None and result.kv_series is None  # not asked for: dropped
    # a cache's columns stay in the replay's table
    assert "KV used" in report(trace.EXPERIMENT, [("vllm", result)], p)


def test_the_series_stays_when_asked_for(light):
    p = trace.EXPERIMENT.resolve({"path": light})
    (_, result), = trace.EXPERIMENT.execute(p, RunOptions(timeseries=True))
    assert result.series and result.summary["replay_verdict"] == "stable"


@pytest.mark.parametrize("argv, words", [
    (["--scheduler", "sarathi,nope"], ("scheduler", "nope")),
    (["--scheduler", "sarathi,,vllm"], ("--scheduler", "commas")),
    (["--scheduler", "vllm,vllm"], ("--scheduler", "twice")),
    (["--set", "path=other.csv"], ("--set path", "TRACE")),
    (["--set", "scheduler=vllm"], ("--set scheduler", "--scheduler")),
    (["--set", "speedup=0"], ("speedup",)),
    (["--horizon", "0"], ("--horizon",)),
])
def test_bad_input_is_one_line(light, argv, words):
    line = cli_error(["compare", light, *argv])
    assert all(word in line for word in words), line


def test_an_absent_trace_is_one_line(tmp_path):
    assert "absent.csv" in cli_error(["compare", str(tmp_path / "absent.csv")])


def test_run_azure_without_the_trace_says_where_to_get_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(azure, "DEFAULT_TRACE", str(tmp_path / "AzureLLMInferenceTrace_conv.csv"))
    assert main(["run", "azure"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    for words in ("https://github.com/Azure/AzurePublicDataset", "CC-BY 4.0", str(tmp_path),
                  "AzureLLMInferenceTrace_conv.csv", "--set path=FILE"):
        assert words in err[0]
